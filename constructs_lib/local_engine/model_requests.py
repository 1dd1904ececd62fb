"""Every model request a handler sends, attributed to the record key it was sent for.

The Anthropic SDK sends over ``httpx2``, and its transports end in
``httpx2.HTTPTransport.handle_request``. While :meth:`ModelRequests.installed` is open, that
method is wrapped. A request sent on a thread the engine marked (:meth:`ModelRequests.for_key`,
around each handler call) is counted against that key. The answer is then handed to
:class:`~.lambda_faults.LambdaFaults`, which may kill the invocation before the handler
sees it. Requests from unmarked threads (a test's own client) pass through untouched.

Message Batches calls (``/v1/messages/batches``) pass through uncounted: a batch is billed
per succeeded result, which the local model counts. ``--kill-rate`` kills a read of a
batch's results partway instead (after 1 to :data:`~.lambda_faults.RESULTS_KILL_MAX_LINES`
lines: the collector resumes from its checkpoint), and a ``messages.batches.create`` may be
killed around (``batch_create_kill_rate``, one of
:data:`~.lambda_faults.BATCH_CREATE_KILL_POINTS`): before it is sent, after the model
answered it, or, through :meth:`ModelRequests.before_aws_call` (a botocore hook the engine
installs), at the handler's next AWS call, which is the write of the batch id.

*Billed* follows the runtime's rule: every request that reached the model is billed, except
401, 429 and 529 answers, and Bedrock's answers that served nothing whatever their status
(``ServiceQuotaExceededException``, a 400, and ``ServiceUnavailableException``, a 503, are
waited out as rate limits). A request that timed out or lost its connection after it was
sent is billed: the model may have done the work. Those requests are also counted apart
(:attr:`ModelRequests.transport_errors`): on a loaded machine an answer can arrive after the
model call's deadline, so the request fails in transport and its retry is billed again, a
second billed request that only the machine's speed caused.
"""

from __future__ import annotations

import json
import threading
import time
import unicodedata
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx2

from .lambda_faults import BATCH_CREATE_KILL_POINTS, LambdaFaults, LambdaKilled

#: Answers the provider does not bill (the runtime's Spend counts them the same way).
UNBILLED_STATUSES = frozenset({401, 429, 529})
#: Bedrock errors (``x-amzn-errortype``) that served nothing: the rate limits the runtime
#: waits out, whatever their status (issue 32), and ``ModelNotReadyException`` (a 429).
UNBILLED_BEDROCK_ERRORS = frozenset(
    {
        "ThrottlingException",
        "ServiceQuotaExceededException",
        "ServiceUnavailableException",
        "ModelNotReadyException",
    }
)
#: Members of an event the model step joins to its business key (``model_step.key``).
REPLAY_GENERATION_FIELD = "replay_generation"
DEAD_LETTER_FIELD = "dead_letter"

_state = threading.local()


class ModelRequests:
    """Counts and times requests per record key; kills invocations when ``faults`` says so."""

    def __init__(self, faults: LambdaFaults | None = None) -> None:
        self._faults = faults
        self.billed: Counter[str] = Counter()  # record key -> billed requests
        self.sent = 0
        self.statuses: Counter[str] = Counter()  # "200", "429", ..., "error"
        self.broken_answers = 0  # billed answers whose body failed or was dropped part-read
        self._answer_ms: list[float] = []
        self._lock = threading.Lock()

    @contextmanager
    def for_key(self, key: str | None) -> Iterator[None]:
        """Attribute requests sent by this thread to ``key`` until exit (None: unattributed
        but still counted, e.g. a batch of several records)."""
        previous = getattr(_state, "key", _UNMARKED)
        _state.key = key
        try:
            yield
        finally:
            _state.key = previous
            _state.kill_at_next_aws_call = False

    @property
    def transport_errors(self) -> int:
        """Billed requests that failed in transport: before their answer's headers (a
        timeout, a lost connection) or while its body was read (the model call's deadline
        cut it). Each is retried, so each may add one billed request to its key."""
        with self._lock:
            return self.statuses["error"] + self.broken_answers

    def _count_broken_answer(self) -> None:
        with self._lock:
            self.broken_answers += 1

    @property
    def max_billed_per_key(self) -> int:
        """The most billed requests any one record key got (0 without requests)."""
        with self._lock:
            return max(self.billed.values(), default=0)

    def answer_ms(self) -> dict[str, float]:
        """Wall milliseconds from sending a request to its answer's headers: p50, p99, max
        (answers only; requests that failed in transport are not timed)."""
        with self._lock:
            times = sorted(self._answer_ms)
        if not times:
            return {}

        def at(share: float) -> float:
            return round(times[min(len(times) - 1, int(share * len(times)))], 1)

        return {"p50": at(0.5), "p99": at(0.99), "max": round(times[-1], 1)}

    @contextmanager
    def installed(self) -> Iterator[ModelRequests]:
        """Wrap ``httpx2.HTTPTransport.handle_request`` while open."""
        original = httpx2.HTTPTransport.handle_request
        observer = self

        def handle_request(
            transport: httpx2.HTTPTransport, request: httpx2.Request
        ) -> httpx2.Response:
            key = getattr(_state, "key", _UNMARKED)
            if key is not _UNMARKED and _is_batch_create(request):
                created: httpx2.Response = observer._around_batch_create(
                    original, transport, request
                )
                return created
            if key is not _UNMARKED and _is_results_read(request):
                read: httpx2.Response = observer._around_results(original, transport, request)
                return read
            if key is _UNMARKED or _is_batch_call(request):
                return original(transport, request)
            response: httpx2.Response = observer._observe(original, transport, request, key)
            return response

        setattr(httpx2.HTTPTransport, "handle_request", handle_request)  # noqa: B010
        try:
            yield self
        finally:
            setattr(httpx2.HTTPTransport, "handle_request", original)  # noqa: B010

    def _observe(self, original: Any, transport: Any, request: Any, key: str | None) -> Any:
        started = time.monotonic()
        try:
            response = original(transport, request)
        except Exception:
            self._count(key, None, None)
            self._maybe_kill(request, None)
            raise
        status = int(response.status_code)
        error_type = str(response.headers.get("x-amzn-errortype") or "").split(":", 1)[0]
        served = error_type not in UNBILLED_BEDROCK_ERRORS
        self._count(key, status, (time.monotonic() - started) * 1000, served=served)
        self._maybe_kill(request, response)
        if served and status not in UNBILLED_STATUSES:
            response.stream = _WatchedBody(response.stream, self._count_broken_answer)
        return response

    def _around_batch_create(self, original: Any, transport: Any, request: Any) -> Any:
        """A ``messages.batches.create`` of a handler, killed around when ``faults`` says so."""
        point = None if self._faults is None else self._faults.kill_around_batch_create()
        before, after, before_recorded = BATCH_CREATE_KILL_POINTS
        if point == before:
            raise LambdaKilled("killed before the batch create reached the model")
        response = original(transport, request)
        if point == after:
            response.read()  # the model has answered: the batch exists, and will bill
            response.close()
            raise LambdaKilled("killed after the batch create answered, before the handler saw it")
        if point == before_recorded:
            _state.kill_at_next_aws_call = True
        return response

    def _around_results(self, original: Any, transport: Any, request: Any) -> Any:
        """A handler's read of a batch's results, killed partway when ``faults`` says so."""
        response = original(transport, request)
        lines = None if self._faults is None else self._faults.kill_in_batch_results()
        if lines is not None:
            response.stream = _KilledAfterLines(response.stream, lines, self._faults)
        return response

    def before_aws_call(self, model: Any = None, **_: Any) -> None:
        """A botocore ``before-call`` hook: kill the invocation whose batch create answered
        at its next AWS call (the write of the batch id), before the call is made; and a
        handler's Bedrock ``CreateModelInvocationJob`` (issue 37), killed around as a
        Message Batches create is: before it is sent, or, after it made the job, at the
        handler's next AWS call (the write of the job's ARN: for a boto3 call the answer
        and that write are back to back, so ``after_create`` and
        ``before_batch_id_recorded`` both leave a job made and never recorded)."""
        if getattr(_state, "kill_at_next_aws_call", False):
            _state.kill_at_next_aws_call = False
            raise LambdaKilled("killed after the batch create answered, before its id was recorded")
        if getattr(model, "name", None) != "CreateModelInvocationJob" or self._faults is None:
            return
        if getattr(_state, "key", _UNMARKED) is _UNMARKED:
            return
        point = self._faults.kill_around_batch_create()
        if point == BATCH_CREATE_KILL_POINTS[0]:
            raise LambdaKilled("killed before the job create reached Bedrock")
        if point is not None:
            _state.kill_at_next_aws_call = True

    def _count(
        self, key: str | None, status: int | None, answer_ms: float | None, served: bool = True
    ) -> None:
        with self._lock:
            self.sent += 1
            self.statuses["error" if status is None else str(status)] += 1
            if answer_ms is not None:
                self._answer_ms.append(answer_ms)
            if key is not None and served and status not in UNBILLED_STATUSES:
                self.billed[key] += 1

    def _maybe_kill(self, request: Any, response: Any) -> None:
        if self._faults is None or not self._faults.kill_after_request(bytes(request.content)):
            return
        if response is not None:
            response.close()
        raise LambdaKilled("killed after the model request was sent, before its answer was read")


_UNMARKED: Any = object()
#: The Message Batches endpoints (issue 19): a create carries many rows and is billed per
#: succeeded result, not per call, so the model (``MessageBatchStore.billed``) counts it.
BATCHES_PATH = "/v1/messages/batches"


def _is_batch_call(request: Any) -> bool:
    return str(request.url.path).startswith(BATCHES_PATH)


def _is_results_read(request: Any) -> bool:
    path = str(request.url.path)
    return request.method == "GET" and path.startswith(BATCHES_PATH) and path.endswith("/results")


class _KilledAfterLines(httpx2.SyncByteStream):
    """A response body that kills the invocation once it has handed over ``lines`` whole
    lines (the SDK's line decoder may still hold the last), then dies with nothing cleaned
    up."""

    def __init__(self, stream: Any, lines: int, faults: LambdaFaults | None) -> None:
        self._stream = stream
        self._lines = lines
        self._faults = faults

    def __iter__(self) -> Iterator[bytes]:
        left = self._lines
        for chunk in self._stream:
            newlines = chunk.count(b"\n")
            if newlines < left:
                left -= newlines
                yield chunk
                continue
            end = -1
            for _ in range(left):
                end = chunk.index(b"\n", end + 1)
            yield chunk[: end + 1]
            self._stream.close()
            if self._faults is not None:
                self._faults.record_kill()
            raise LambdaKilled(f"killed after reading {self._lines} batch result lines")

    def close(self) -> None:
        self._stream.close()


class _WatchedBody(httpx2.SyncByteStream):
    """An answer's body that reports, once, when it fails or is closed before its end."""

    def __init__(self, stream: Any, broken: Any) -> None:
        self._stream = stream
        self._broken = broken
        self._settled = False

    def _settle(self, whole: bool) -> None:
        if not self._settled:
            self._settled = True
            if not whole:
                self._broken()

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._stream
        except BaseException:
            self._settle(whole=False)
            raise
        self._settle(whole=True)

    def close(self) -> None:
        self._settle(whole=False)  # no-op when the body was read to its end
        self._stream.close()


def _is_batch_create(request: Any) -> bool:
    return request.method == "POST" and str(request.url.path).rstrip("/") == BATCHES_PATH


def record_key_of(event: Any, key_expression: str | None) -> str | None:
    """The record key an invocation's ``event`` stands for, as the model step builds it: the
    business key (``key_expression``, JMESPath over the detail), the detail's
    ``replay_generation`` and the ``dead_letter.id`` of an operator's redrive. An SQS batch
    of one record is its body's event; a larger batch has no single key (None)."""
    if isinstance(event, Mapping) and isinstance(event.get("Records"), list):
        records = event["Records"]
        if len(records) != 1:
            return None
        try:
            event = json.loads(str(records[0].get("body") or ""))
        except ValueError:
            return None
    if not isinstance(event, Mapping) or not isinstance(event.get("detail"), Mapping):
        return None
    detail = event["detail"]
    if key_expression:
        import jmespath

        business: Any = jmespath.search(key_expression, dict(detail))
    else:
        business = {k: v for k, v in detail.items() if k != REPLAY_GENERATION_FIELD}
    marker = event.get(DEAD_LETTER_FIELD)
    parts = [
        _canonical(business),
        detail.get(REPLAY_GENERATION_FIELD),
        marker.get("id") if isinstance(marker, Mapping) else None,
    ]
    return json.dumps(parts, sort_keys=True, default=str)


def _canonical(value: Any) -> Any:
    """Numbers by value (``1`` and ``1.0`` are one key part) and strings in Unicode NFC, as
    the model step compares key parts (``model_step.key.canonical``)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_canonical(item) for item in value]
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    return value
