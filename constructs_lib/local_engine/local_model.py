"""A deterministic local Messages API on 127.0.0.1, with seeded fault injection.

``POST /v1/messages`` answers one of ``labels`` (default hot, warm, cold) chosen from a hash
of the user message, so the same row always gets the same label, run after run. Every
response carries a ``request-id`` header; requests are counted (thread-safe).

Fault injection (``fault_rate`` F, ``seed`` S) decides per *request content*, not per
arrival, so which rows fail does not depend on thread timing and a seed reproduces a run.
A row's first request fails with probability F; a failing row gets one seeded plan:

- ``transient`` (60 %): its first 1 or 2 requests fail with 429, 529, 500 or a timeout (at
  most one timeout), then it succeeds, as a short outage would;
- ``persistent`` (20 %): every request fails with 429, 529, 500 or a timeout, so Lambda's
  retries run out and the event goes to the on-failure destination;
- ``invalid`` (20 %): every request gets 400, as a request the API rejects stays rejected;
  the model step dead-letters it itself without a retry.

A timeout holds the request ``timeout_hold_seconds`` (longer than the client's timeout),
then closes the connection unanswered.

The model behaves as the model catalogue says (:mod:`.model_behaviour`): a request it refuses
(a non-default sampling parameter, a prefill, a thinking type or effort it does not accept,
``max_tokens`` over its maximum) gets a 400 ``invalid_request_error``, a model the catalogue
does not know a 404 ``not_found_error``, both before any fault plan; a model that thinks
(adaptive thinking, asked for or its default) sends a ``thinking`` block before the label,
whose tokens count toward ``max_tokens`` and ``output_tokens``, so a ``max_tokens`` too small
for its thought ends with ``stop_reason: "max_tokens"``. ``refusal_rate`` R gives a seeded,
per-content share R of the answers ``stop_reason: "refusal"``, as the model's safety
classifiers may.

Prompt caching is emulated as the API does it (:class:`PromptCacheEmulator`): a system
prefix marked with ``cache_control`` and at least the model's minimum cacheable length (the
catalogue's) is written on first use (``cache_creation_input_tokens``), read while its TTL
lasts on the run's clock (``cache_read_input_tokens``), and each read refreshes the TTL;
``input_tokens`` counts only what was not cached. Tokens are estimated as 4 characters each.
Every billed answer's usage is counted by its shape (:attr:`LocalMessagesAPI.billed_usages`:
a few hundred distinct shapes however many rows), so a run prices each request at its own
tier (long context included), as the step itself does.

Message Batches (``/v1/messages/batches``: create, retrieve, list, results, cancel, delete) are
served by :attr:`LocalMessagesAPI.batches` (:mod:`.message_batches`): a batch ends
``batch_delay_seconds`` after its creation on the run's clock; ``batch_errored_rate`` and
``batch_expired_rate`` give seeded, per-custom_id ``errored`` (``api_error``) and ``expired``
results; ``batch_create_faults`` (e.g. ``["disconnect_after_create"]``) are faults around
the next creates. Each succeeded batch request is a billed request (counted in
:attr:`LocalMessagesAPI.batch_requests` and the token counters).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from ..model_prices import billed_tokens
from . import message_batches, message_batches_http, model_behaviour
from .loopback import LoopbackServer, send_json
from .message_batches import MessageBatchStore

DEFAULT_LABELS = ("hot", "warm", "cold")
DEFAULT_MODEL = "claude-haiku-5-5"
TIMEOUT = "timeout"
TRANSIENT_FAULTS: tuple[int | str, ...] = (429, 529, 500, TIMEOUT)
PLAN_WEIGHTS = {"transient": 0.6, "persistent": 0.2, "invalid": 0.2}
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


@dataclass(frozen=True)
class FaultPlan:
    """What a row's requests get: ``kind`` ``healthy``/``transient``/``persistent``/``invalid``;
    ``faults`` lists the failures of a transient plan, in order."""

    kind: str
    faults: tuple[int | str, ...] = ()
    digest: str = ""
    seed: int = 0

    def outcome(self, request_index: int) -> int | str:
        """200, an error status or ``"timeout"`` for the row's ``request_index``-th request
        (0-based)."""
        if self.kind == "invalid":
            return 400
        if self.kind == "persistent":
            rng = random.Random(f"{self.seed}:{self.digest}:{request_index}")
            return rng.choice(TRANSIENT_FAULTS)
        if request_index < len(self.faults):
            return self.faults[request_index]
        return 200


def fault_plan(digest: str, fault_rate: float, seed: int) -> FaultPlan:
    """The seeded plan of the content with ``digest`` (see the module docstring)."""
    rng = random.Random(f"{seed}:{digest}")
    if fault_rate <= 0 or rng.random() >= fault_rate:
        return FaultPlan("healthy")
    kind = rng.choices(list(PLAN_WEIGHTS), weights=list(PLAN_WEIGHTS.values()))[0]
    if kind == "transient":
        first = rng.choice(TRANSIENT_FAULTS)
        if rng.choice((1, 2)) == 1:
            return FaultPlan(kind, (first,))
        # At most one hang per outage: two hangs in a row hold the idempotency record longer
        # than a concurrent duplicate's compressed retries last, a race the stack's real
        # waits (minutes against a 85 s model timeout) make rare.
        second = rng.choice([f for f in TRANSIENT_FAULTS if f != TIMEOUT or first != TIMEOUT])
        return FaultPlan(kind, (first, second))
    return FaultPlan(kind, digest=digest, seed=seed)


def user_text(body: dict[str, Any]) -> str:
    """The text of the last user message (string or content blocks)."""
    messages = body.get("messages") or []
    content = messages[-1].get("content", "") if messages and isinstance(messages[-1], dict) else ""
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return str(content)


def label_for(text: str, labels: Sequence[str] = DEFAULT_LABELS) -> str:
    """The deterministic answer for ``text``."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return labels[int.from_bytes(digest[:8], "big") % len(labels)]


#: The billed token counts of a ``usage``, in the order :attr:`LocalMessagesAPI.billed_usages`
#: keeps them.
BILLED_USAGE = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)
#: The TTLs ``cache_control`` may name, in run-clock seconds.
CACHE_TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}


def estimated_tokens(text: str) -> int:
    """The local model's token count of ``text``: 4 characters a token, at least 1."""
    return max(1, len(text) // 4)


def system_blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's ``system`` as text blocks (a plain string is one block, unmarked)."""
    system = body.get("system")
    if isinstance(system, str):
        return [{"type": "text", "text": system}] if system else []
    if isinstance(system, list):
        return [block for block in system if isinstance(block, dict)]
    return []


def min_cacheable_tokens(model: str) -> int:
    """The model's minimum cacheable length, from the model catalogue. A model it does not
    know never gets here over HTTP (a 404); a batch request for one caches nothing."""
    spec = model_behaviour.model_spec(model)
    return int(spec.min_cacheable_tokens) if spec is not None else 2**62


class PromptCacheEmulator:
    """The API's prompt cache, per model and prefix, on a run clock (seconds).

    :param clock: run-clock seconds, default ``time.monotonic`` (one local second is one run
        second); a local run passes its compressed clock.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._expires: dict[str, float] = {}
        self._lock = threading.Lock()
        #: Requests that wrote the cache, and requests that read it.
        self.writes = 0
        self.reads = 0

    def usage(self, body: dict[str, Any], model: str) -> dict[str, int]:
        """The ``usage`` of a 200 answer to ``body``: what was written, read and not cached."""
        blocks = system_blocks(body)
        marked = [i for i, block in enumerate(blocks) if block.get("cache_control")]
        system_text = "".join(str(block.get("text", "")) for block in blocks)
        uncached = user_text(body)
        written = read = 0
        if marked:
            end = marked[-1] + 1
            prefix = "".join(str(block.get("text", "")) for block in blocks[:end])
            rest = "".join(str(block.get("text", "")) for block in blocks[end:])
            ttl = str((blocks[marked[-1]].get("cache_control") or {}).get("ttl") or "5m")
            tokens = estimated_tokens(prefix)
            if tokens >= min_cacheable_tokens(model) and ttl in CACHE_TTL_SECONDS:
                hit = self._use(f"{model}\0{prefix}", CACHE_TTL_SECONDS[ttl])
                written, read = (0, tokens) if hit else (tokens, 0)
                uncached = rest + uncached
            else:
                uncached = system_text + uncached
        else:
            uncached = system_text + uncached
        return {
            "input_tokens": estimated_tokens(uncached),
            "output_tokens": 1,
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
        }

    def _use(self, prefix: str, ttl_seconds: float) -> bool:
        """True for a read of a live entry; either way the entry lives ``ttl_seconds`` on."""
        key = hashlib.sha256(prefix.encode()).hexdigest()
        now = self._clock()
        with self._lock:
            hit = self._expires.get(key, -math.inf) > now
            self._expires[key] = now + ttl_seconds
            if hit:
                self.reads += 1
            else:
                self.writes += 1
            return hit


class RateLimiter:
    """At most ``per_minute`` accepted requests in any window of one minute of the run's
    clock (``seconds_per_minute`` local seconds), as a provider's requests-per-minute limit.

    A sliding log of accepted requests: a request over the limit is refused (and not
    logged, as a provider's 429 does not use quota), and told when the oldest accepted
    request leaves the window: :meth:`admit` returns None or that wait in run-clock seconds.
    """

    def __init__(self, per_minute: int, seconds_per_minute: float) -> None:
        if per_minute < 1 or seconds_per_minute <= 0:
            raise ValueError("per_minute must be >= 1 and seconds_per_minute > 0")
        self.per_minute = per_minute
        self.seconds_per_minute = seconds_per_minute
        self._accepted: deque[float] = deque()
        self._lock = threading.Lock()

    def admit(self, now: float | None = None) -> float | None:
        """None when the request is accepted, else the wait (run-clock seconds) to retry."""
        now = time.monotonic() if now is None else now
        with self._lock:
            while self._accepted and self._accepted[0] <= now - self.seconds_per_minute:
                self._accepted.popleft()
            if len(self._accepted) < self.per_minute:
                self._accepted.append(now)
                return None
            local_wait = self._accepted[0] + self.seconds_per_minute - now
        return max(0.001, local_wait) * 60.0 / self.seconds_per_minute


class LocalMessagesAPI(LoopbackServer):
    """The server. Use as a context manager or call :meth:`start` / :meth:`stop`.

    Parameters (defaults in brackets): ``labels`` [hot, warm, cold]; ``fault_rate`` [0.0];
    ``seed`` [0]; ``refusal_rate`` [0.0]: the seeded share of answers that are refusals;
    ``timeout_hold_seconds`` [1.5]; ``model`` [claude-haiku-5-5] used when a
    request names none; ``rate_limit`` [none]: a :class:`RateLimiter`; a request over it
    gets 429 with ``retry-after`` (whole seconds) and ``retry-after-ms`` on the run's
    clock, before any fault plan applies; ``run_clock`` [``time.monotonic``]: run-clock
    seconds, which the prompt cache's TTLs are measured on.

    Counters: :attr:`outcomes` by status, :attr:`rate_limited` (429s of the limiter),
    :attr:`input_tokens`, :attr:`output_tokens`, :attr:`cache_creation_input_tokens` and
    :attr:`cache_read_input_tokens` (billed: 200 answers only); :attr:`prompt_cache` counts
    cache writes and reads; :attr:`billed_usages` counts billed answers by their usage and
    whether they were batch requests; :attr:`refusals` counts refusals; :attr:`model_refused`
    counts the requests the model refused (a 400 or 404), by status.
    """

    thread_name = "local-model"

    def __init__(
        self,
        *,
        labels: Sequence[str] = DEFAULT_LABELS,
        fault_rate: float = 0.0,
        seed: int = 0,
        timeout_hold_seconds: float = 1.5,
        model: str = DEFAULT_MODEL,
        rate_limit: RateLimiter | None = None,
        run_clock: Callable[[], float] = time.monotonic,
        batch_delay_seconds: float = 60.0,
        batch_errored_rate: float = 0.0,
        batch_expired_rate: float = 0.0,
        batch_create_faults: Sequence[int | str] = (),
        refusal_rate: float = 0.0,
    ) -> None:
        super().__init__()
        if not 0.0 <= fault_rate <= 1.0:
            raise ValueError("fault_rate must be between 0 and 1")
        if not 0.0 <= refusal_rate <= 1.0:
            raise ValueError("refusal_rate must be between 0 and 1")
        self.refusal_rate = refusal_rate
        self.refusals = 0
        #: Requests the model refused before answering: status -> count.
        self.model_refused: Counter[int] = Counter()
        #: Billed answers by ``(usage tokens in BILLED_USAGE order, batch)``.
        self.billed_usages: Counter[tuple[tuple[int, ...], bool]] = Counter()
        self.labels = tuple(labels)
        self.fault_rate = fault_rate
        self.seed = seed
        self.timeout_hold_seconds = timeout_hold_seconds
        self.model = model
        self.outcomes: Counter[str] = Counter()  # "200", "429", ..., "timeout"
        self.rate_limit = rate_limit
        self.rate_limited = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.cache_creation_input_tokens = 0
        self.cache_read_input_tokens = 0
        self.prompt_cache = PromptCacheEmulator(run_clock)
        self._per_content: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.batch_errored_rate = batch_errored_rate
        self.batch_expired_rate = batch_expired_rate
        #: Succeeded (billed) batch requests, and their tokens (also in the totals above),
        #: the part billed at the batch discount.
        self.batch_requests = 0
        self.batch_tokens: dict[str, int] = dict.fromkeys(billed_tokens(), 0)
        #: The Message Batches of this server, processed on the run's clock.
        self.batches = MessageBatchStore(
            self._batch_answer,
            decide=self._batch_decide,
            processing_delay=batch_delay_seconds,
            clock=run_clock,
            # Answers count billed tokens and depend on the prompt cache's state.
            answer_once=True,
        )
        self.batches.create_faults = list(batch_create_faults)

    def _batch_decide(self, custom_id: str, params: dict[str, Any]) -> str:
        # A request the model refuses is refused inside a batch too (its result is errored).
        if self.model_problem({"model": self.model, **params}) is not None:
            return "invalid_request_error"
        rng = random.Random(f"{self.seed}:batch:{custom_id}")
        draw = rng.random()
        if draw < self.batch_errored_rate:
            return "api_error"
        if draw < self.batch_errored_rate + self.batch_expired_rate:
            return "expired"
        return "succeeded"

    def _batch_answer(self, params: dict[str, Any], request_id: str) -> dict[str, Any]:
        answer = self.success_body(params, request_id)
        usage = answer["usage"]
        with self._lock:
            self.batch_requests += 1
            for name in self.batch_tokens:
                self.batch_tokens[name] += int(usage.get(name) or 0)
        self.count_usage(usage, batch=True)
        return answer

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        """Requests are answered by this server's state."""
        return _handler_class(self)

    @property
    def request_count(self) -> int:
        """``POST /v1/messages`` requests received, whatever their outcome."""
        with self._lock:
            return sum(self.outcomes.values())

    def requests_by_content(self) -> dict[str, int]:
        """Requests received per distinct user message (its sha256), so per row."""
        with self._lock:
            return dict(self._per_content)

    def plan_of(self, digest: str) -> FaultPlan:
        """The fault plan of the content with ``digest`` (``healthy`` without faults)."""
        return fault_plan(digest, self.fault_rate, self.seed)

    def requests_per_row_by_plan(self) -> dict[str, dict[str, int]]:
        """Per fault plan kind: rows (distinct contents) requested, their requests, and the
        most requests one row got. Rate-limit 429s refused before a plan are not in it."""
        found: dict[str, dict[str, int]] = {}
        for digest, count in self.requests_by_content().items():
            kind = self.plan_of(digest).kind
            entry = found.setdefault(kind, {"rows": 0, "requests": 0, "max": 0})
            entry["rows"] += 1
            entry["requests"] += count
            entry["max"] = max(entry["max"], count)
        return found

    # -- request handling --------------------------------------------------------------------
    def throttle(self) -> tuple[float, str] | None:
        """None when the rate limit admits a request; else count a 429 and return its
        retry-after (run-clock seconds) and request id."""
        if self.rate_limit is None:
            return None
        wait = self.rate_limit.admit()
        if wait is None:
            return None
        with self._lock:
            self.rate_limited += 1
            self.outcomes["429"] += 1
            request_id = f"req_local_{next(self._ids):06d}"
        return wait, request_id

    def count_usage(self, usage: dict[str, int], *, batch: bool = False) -> None:
        """Add a 200 answer's billed tokens (``batch``: billed as a batch request)."""
        shape = tuple(int(usage.get(name) or 0) for name in BILLED_USAGE)
        with self._lock:
            self.billed_usages[(shape, batch)] += 1
            self.input_tokens += int(usage.get("input_tokens", 0))
            self.output_tokens += int(usage.get("output_tokens", 0))
            self.cache_creation_input_tokens += int(usage.get("cache_creation_input_tokens", 0))
            self.cache_read_input_tokens += int(usage.get("cache_read_input_tokens", 0))

    def decide(self, body: dict[str, Any]) -> tuple[int | str, str]:
        """Count the request; return its outcome and request id."""
        text = user_text(body)
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        plan = fault_plan(digest, self.fault_rate, self.seed)
        with self._lock:
            index = self._per_content[digest]
            self._per_content[digest] += 1
            outcome = plan.outcome(index)
            self.outcomes[str(outcome)] += 1
            request_id = f"req_local_{next(self._ids):06d}"
        return outcome, request_id

    def count_rejected(self, status: int) -> None:
        """Count a request refused before any fault plan applied (bad path, body or key)."""
        with self._lock:
            self.outcomes[str(status)] += 1

    def model_problem(self, body: dict[str, Any]) -> tuple[int, str] | None:
        """``(404, message)`` for a model the catalogue does not know, ``(400, message)`` for a
        request the model refuses (:func:`.model_behaviour.request_problem`), else None. A
        refused request is counted in :attr:`model_refused`."""
        model = str(body.get("model") or self.model)
        spec = model_behaviour.model_spec(model)
        found: tuple[int, str] | None = None
        if spec is None:
            found = (404, f"model: {model}")
        else:
            problem = model_behaviour.request_problem(body, spec)
            found = None if problem is None else (400, problem)
        if found is not None:
            with self._lock:
                self.model_refused[found[0]] += 1
        return found

    def refuses(self, body: dict[str, Any]) -> bool:
        """Whether this answer is a refusal: seeded per content, :attr:`refusal_rate` of them."""
        if self.refusal_rate <= 0:
            return False
        digest = hashlib.sha256(user_text(body).encode("utf-8")).hexdigest()
        return random.Random(f"{self.seed}:refusal:{digest}").random() < self.refusal_rate

    def success_body(self, body: dict[str, Any], request_id: str) -> dict[str, Any]:
        """A Messages API success body the SDK accepts, as the catalogue's model answers:
        thinking first when it thinks, cut at ``max_tokens``, or a refusal."""
        text = user_text(body)
        model = str(body.get("model") or self.model)
        spec = model_behaviour.model_spec(model)
        usage = self.prompt_cache.usage(body, model)
        label = label_for(text, self.labels)
        refused = self.refuses(body)
        if spec is not None:
            said = model_behaviour.answer(
                spec,
                body,
                label,
                text_tokens=estimated_tokens(label),
                stop_reason="refusal" if refused else "end_turn",
            )
            content, stop_reason = said.content, said.stop_reason
            usage["output_tokens"] = said.output_tokens
        else:
            content = [{"type": "text", "text": label}]
            stop_reason = "end_turn"
        if refused:
            with self._lock:
                self.refusals += 1
        return {
            "id": "msg_local_" + request_id.rsplit("_", 1)[-1],
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }

    def hold(self) -> None:
        """Wait out a timeout fault (returns early when the server stops)."""
        self.stopping.wait(self.timeout_hold_seconds)


def error_body(status: int, message: str | None = None) -> dict[str, Any]:
    """A Messages API error body."""
    error_type = ERROR_TYPES.get(status, "api_error")
    return {
        "type": "error",
        "error": {"type": error_type, "message": message or f"local model: injected {status}"},
    }


def _handler_class(api: LocalMessagesAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            return  # The counters are the log; stderr stays clean.

        def send_json(
            self, status: int, payload: dict[str, Any], request_id: str, headers: dict[str, str]
        ) -> None:
            self._send(status, payload, request_id or "req_local_batch", headers)

        def _batches(self, method: str, raw: bytes) -> bool:
            if not self.path.startswith(message_batches.BATCHES_PATH):
                return False
            if not (self.headers.get("x-api-key") or self.headers.get("authorization")):
                self._send(401, error_body(401, "missing API key"), "")
                return True
            with api._lock:
                request_id = f"req_local_{next(api._ids):06d}"
            host = self.headers.get("host") or "127.0.0.1"
            return message_batches_http.route(
                api.batches, self, method, raw, f"http://{host}", request_id
            )

        def do_GET(self) -> None:  # http.server's naming
            if not self._batches("GET", b""):
                self._send(404, error_body(404, "local model: unknown path"), "")

        def do_DELETE(self) -> None:  # http.server's naming
            if not self._batches("DELETE", b""):
                self._send(404, error_body(404, "local model: unknown path"), "")

        def do_POST(self) -> None:  # http.server's naming
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self._batches("POST", raw):
                return
            if self.path.split("?", 1)[0] != "/v1/messages":
                self._send(404, error_body(404, "local model serves /v1/messages only"), "")
                return
            if not (self.headers.get("x-api-key") or self.headers.get("authorization")):
                self._send(401, error_body(401, "missing API key"), "")
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = None
            if not isinstance(body, dict) or not body.get("messages") or "max_tokens" not in body:
                self._send(400, error_body(400, "body needs messages and max_tokens"), "")
                return
            problem = api.model_problem(body)
            if problem is not None:
                self._send(problem[0], error_body(*problem), "")
                return
            throttled = api.throttle()
            if throttled is not None:
                wait, request_id = throttled
                headers = {
                    "retry-after": str(max(1, math.ceil(wait))),
                    "retry-after-ms": str(max(1, math.ceil(wait * 1000))),
                }
                message = "local model: rate limit of the run reached"
                self._send(429, error_body(429, message), request_id, headers)
                return
            outcome, request_id = api.decide(body)
            if outcome == TIMEOUT:
                api.hold()
                self.close_connection = True
                return
            if outcome == 200:
                answer = api.success_body(body, request_id)
                api.count_usage(answer["usage"])
                self._send(200, answer, request_id)
            else:
                self._send(int(outcome), error_body(int(outcome)), request_id)

        def _send(
            self,
            status: int,
            payload: dict[str, Any],
            request_id: str,
            headers: dict[str, str] | None = None,
        ) -> None:
            if not request_id:
                api.count_rejected(status)
            send_json(self, status, payload, {"request-id": request_id, **(headers or {})})

    return Handler
