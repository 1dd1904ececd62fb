"""The Message Batches endpoints the Anthropic SDK uses, for the fake and the local model.

Standard library only. :class:`MessageBatchStore` holds the batches and answers
``messages.batches.create / retrieve / list / results / cancel`` with the wire shapes of the
installed SDK (``anthropic.types.messages.MessageBatch``, ``MessageBatchIndividualResponse``):

- ``POST /v1/messages/batches`` with ``{"requests": [{"custom_id", "params"}]}``: a
  ``MessageBatch`` (``processing_status`` ``in_progress``). ``custom_id`` must match
  ``^[a-zA-Z0-9_-]{1,64}$`` and be unique in the batch (400 ``invalid_request_error``
  otherwise); more than ``max_requests`` requests or ``max_bytes`` of body is a 413
  ``request_too_large``, as the API answers above 100,000 requests or 256 MB.
- ``GET /v1/messages/batches/{id}``: the batch; it ends ``processing_delay`` seconds after its
  creation on ``clock``, or 24 h after it (every unfinished request ``expired``).
- ``GET /v1/messages/batches?limit&after_id&before_id``: newest first, paged as the SDK's
  ``SyncPage`` reads it (``data``, ``has_more``, ``first_id``, ``last_id``).
- ``GET /v1/messages/batches/{id}/results``: the JSONL results, streamed (chunked), one line
  per request; decided when the batch ends, in request order or shuffled.
- ``POST /v1/messages/batches/{id}/cancel``: ``canceling``; the batch then ends with every
  request ``canceled``.

Each request's result type comes from ``decide(custom_id, params)``: ``"succeeded"``,
``"errored"`` (``api_error``), ``"invalid_request_error"``, ``"api_error"``, ``"expired"`` or
``"canceled"``. With ``answer_once`` a succeeded request is answered once, when its results
are first read, and a later read (a collection that resumes) streams the same Message. Only
``succeeded`` results are billed (:attr:`billed`, per custom_id in
:attr:`billed_by_custom_id`), as the API bills.

Create faults (``create_faults``, one entry consumed per create call, then every create
succeeds): an HTTP status (413, 429, 500, ...: nothing created), ``"disconnect"`` (the
connection closes before the batch exists), ``"disconnect_after_create"`` and
``"error_after_create"`` (the batch IS created, then the connection closes / a 500 answers),
as a network blip or a server fault around a create that went through.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

#: Requests per batch the API allows.
MAX_BATCH_REQUESTS = 100_000
#: Bytes of a create body the API allows (256 MB).
MAX_BATCH_BYTES = 256 * 1024 * 1024
#: A batch expires this long after its creation.
BATCH_LIFETIME_SECONDS = 24 * 3600
CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
RESULT_TYPES = (
    "succeeded",
    "errored",
    "invalid_request_error",
    "api_error",
    "expired",
    "canceled",
)
BATCHES_PATH = "/v1/messages/batches"

Decide = Callable[[str, dict[str, Any]], str]
Answer = Callable[[dict[str, Any], str], dict[str, Any]]


def _iso(seconds: float) -> str:
    moment = dt.datetime.fromtimestamp(seconds, dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class StoredBatch:
    """One batch as the store keeps it."""

    id: str
    created_at: float
    requests: list[tuple[str, dict[str, Any]]]
    cancel_initiated_at: float | None = None
    ended_at: float | None = None
    #: custom_id -> result type, decided when the batch ends.
    outcomes: dict[str, str] = field(default_factory=dict)
    #: Processing delay of this batch (seconds on the store's clock).
    delay: float = 0.0
    #: custom_id -> the succeeded request's Message, as JSON: made once, when its result is
    #: first read, and read back by any later read of the results (a resumed collection).
    answers: dict[str, bytes] = field(default_factory=dict)


@dataclass
class CreateFault:
    """What the store answered to a create fault: an HTTP reply, or a closed connection."""

    status: int | None = None
    close: bool = False


class MessageBatchStore:
    """The batches of one server. Thread-safe.

    :param answer: ``(params, request_id) -> Message body`` of a succeeded request, called
        each time its result is read, or once with ``answer_once``.
    :param decide: the result type of each request (see the module docstring). Default: all
        ``succeeded``.
    :param processing_delay: seconds on ``clock`` from creation to the end. Default 0.
    :param clock: seconds since the epoch. Default ``time.time``.
    :param max_requests: requests per batch before a 413. Default 100,000.
    :param max_bytes: create body bytes before a 413. Default 256 MB.
    :param answer_once: keep each succeeded request's Message when its result is first
        read, and stream that one on every later read (a collection that resumes), for an
        ``answer`` that counts what it bills or whose answers change (the local model's
        prompt cache). It costs the Messages' JSON in memory. Default False.
    """

    def __init__(
        self,
        answer: Answer,
        *,
        decide: Decide | None = None,
        processing_delay: float = 0.0,
        clock: Callable[[], float] = time.time,
        max_requests: int = MAX_BATCH_REQUESTS,
        max_bytes: int = MAX_BATCH_BYTES,
        answer_once: bool = False,
    ) -> None:
        self.answer = answer
        #: The result type of each request; change it between batches.
        self.decide: Decide = decide or (lambda custom_id, params: "succeeded")
        #: Seconds from creation to the end, for batches created from now on.
        self.processing_delay = processing_delay
        self.clock = clock
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.answer_once = answer_once
        #: Faults of the next create calls, consumed in order (see the module docstring).
        self.create_faults: list[int | str] = []
        #: A batch not ended this long after creation ends with every request ``expired``
        #: (the API's 24 h); a test may raise it to imitate a batch stuck open.
        self.lifetime_seconds: float = BATCH_LIFETIME_SECONDS
        #: Close the results stream after this many lines (once). Default None.
        self.results_drop_after: int | None = None
        #: Every batch, by id, in creation order.
        self.batches: dict[str, StoredBatch] = {}
        #: Create calls received (whatever their answer).
        self.create_calls = 0
        #: Billed requests (succeeded results), in total and per custom_id.
        self.billed = 0
        self.billed_by_custom_id: Counter[str] = Counter()
        #: Results by type, over every ended batch.
        self.result_counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._answer_lock = threading.Lock()
        self._ids = itertools.count(1)
        #: Distinct ``system`` values of the requests held: a batch's requests share one
        #: system prompt, kept once instead of once a request (10,000 copies of a 24 KB
        #: prompt are 240 MB).
        self._systems: list[Any] = []

    # -- state -----------------------------------------------------------------------------
    def _settle(self, batch: StoredBatch) -> None:
        """End ``batch`` if its time came (lock held)."""
        if batch.ended_at is not None:
            return
        now = self.clock()
        if batch.cancel_initiated_at is not None:
            final = "canceled"
        elif now >= batch.created_at + self.lifetime_seconds:
            final = "expired"
        elif now >= batch.created_at + batch.delay:
            final = ""
        else:
            return
        for custom_id, params in batch.requests:
            kind = final or self.decide(custom_id, params)
            if kind not in RESULT_TYPES:
                raise ValueError(f"unknown batch result type {kind!r}")
            batch.outcomes[custom_id] = kind
            self.result_counts[kind] += 1
            if kind == "succeeded":
                self.billed += 1
                self.billed_by_custom_id[custom_id] += 1
        batch.ended_at = now

    def body_of(self, batch: StoredBatch, base_url: str) -> dict[str, Any]:
        """The ``MessageBatch`` JSON of ``batch``."""
        with self._lock:
            self._settle(batch)
            counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
            if batch.ended_at is None:
                counts["processing"] = len(batch.requests)
                status = "in_progress" if batch.cancel_initiated_at is None else "canceling"
            else:
                status = "ended"
                for kind in batch.outcomes.values():
                    counts["errored" if kind.endswith("error") else kind] += 1
            return {
                "id": batch.id,
                "type": "message_batch",
                "processing_status": status,
                "request_counts": counts,
                "created_at": _iso(batch.created_at),
                "expires_at": _iso(batch.created_at + BATCH_LIFETIME_SECONDS),
                "ended_at": None if batch.ended_at is None else _iso(batch.ended_at),
                "cancel_initiated_at": None
                if batch.cancel_initiated_at is None
                else _iso(batch.cancel_initiated_at),
                "archived_at": None,
                "results_url": None
                if batch.ended_at is None
                else f"{base_url}{BATCHES_PATH}/{batch.id}/results",
            }

    def open_batches(self) -> list[StoredBatch]:
        """Batches not ended yet."""
        with self._lock:
            for batch in self.batches.values():
                self._settle(batch)
            return [b for b in self.batches.values() if b.ended_at is None]

    # -- endpoints -------------------------------------------------------------------------
    def create(self, raw: bytes) -> tuple[int, dict[str, Any] | None, CreateFault | None]:
        """``(status, body, fault)`` of a create; ``fault.close`` means close unanswered."""
        with self._lock:
            self.create_calls += 1
            fault = self.create_faults.pop(0) if self.create_faults else None
        if isinstance(fault, int):
            return fault, None, CreateFault(status=fault)
        if fault == "disconnect":
            return 0, None, CreateFault(close=True)
        if len(raw) > self.max_bytes:
            return 413, None, CreateFault(status=413)
        try:
            requests = json.loads(raw or b"{}").get("requests")
        except (ValueError, AttributeError):
            requests = None
        if not isinstance(requests, list) or not requests:
            return 400, None, CreateFault(status=400)
        if len(requests) > self.max_requests:
            return 413, None, CreateFault(status=413)
        seen: set[str] = set()
        parsed: list[tuple[str, dict[str, Any]]] = []
        for request in requests:
            custom_id = request.get("custom_id") if isinstance(request, dict) else None
            params = request.get("params") if isinstance(request, dict) else None
            if (
                not isinstance(custom_id, str)
                or not CUSTOM_ID.match(custom_id)
                or custom_id in seen
                or not isinstance(params, dict)
                or not params.get("messages")
                or "max_tokens" not in params
            ):
                return 400, None, CreateFault(status=400)
            seen.add(custom_id)
            if "system" in params:
                params["system"] = self._shared_system(params["system"])
            parsed.append((custom_id, params))
        with self._lock:
            batch_id = f"msgbatch_fake_{next(self._ids):06d}"
            batch = StoredBatch(batch_id, self.clock(), parsed, delay=self.processing_delay)
            self.batches[batch_id] = batch
        if fault == "disconnect_after_create":
            return 0, None, CreateFault(close=True)
        if fault == "error_after_create":
            return 500, None, CreateFault(status=500)
        return 200, {"batch": batch_id}, None

    def _shared_system(self, system: Any) -> Any:
        """The held value equal to ``system`` (kept from now on if none is)."""
        with self._lock:
            for known in self._systems:
                if known == system:
                    return known
            self._systems.append(system)
            return system

    def find(self, batch_id: str) -> StoredBatch | None:
        """The batch of ``batch_id``, or None."""
        with self._lock:
            return self.batches.get(batch_id)

    def cancel(self, batch_id: str) -> StoredBatch | None:
        """Start canceling ``batch_id`` (no effect once ended)."""
        with self._lock:
            batch = self.batches.get(batch_id)
            if batch is not None:
                self._settle(batch)
                if batch.ended_at is None and batch.cancel_initiated_at is None:
                    batch.cancel_initiated_at = self.clock()
            return batch

    def page(self, query: str, base_url: str) -> dict[str, Any]:
        """One ``list`` page (newest first)."""
        params = {name: values[-1] for name, values in parse_qs(query).items()}
        limit = max(1, min(1000, int(params.get("limit") or 20)))
        with self._lock:
            newest_first = list(reversed(self.batches.values()))
        ids = [b.id for b in newest_first]
        if "after_id" in params and params["after_id"] in ids:
            start = ids.index(params["after_id"]) + 1
            chosen = newest_first[start : start + limit]
            has_more = start + limit < len(newest_first)
        elif "before_id" in params and params["before_id"] in ids:
            end = ids.index(params["before_id"])
            chosen = newest_first[max(0, end - limit) : end]
            has_more = end - limit > 0
        else:
            chosen = newest_first[:limit]
            has_more = limit < len(newest_first)
        data = [self.body_of(b, base_url) for b in chosen]
        return {
            "data": data,
            "has_more": has_more,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }

    def result_lines(self, batch: StoredBatch, request_id: str) -> Iterator[bytes]:
        """The JSONL lines of an ended batch, one by one (nothing is built up front)."""
        for custom_id, params in batch.requests:
            yield (json.dumps(self.result_of(custom_id, params, batch, request_id)) + "\n").encode()

    def result_of(
        self, custom_id: str, params: dict[str, Any], batch: StoredBatch, request_id: str
    ) -> dict[str, Any]:
        """One ``MessageBatchIndividualResponse``."""
        kind = batch.outcomes[custom_id]
        result: dict[str, Any]
        if kind == "succeeded":
            result = {
                "type": "succeeded",
                "message": self._answer_once(custom_id, params, batch, request_id),
            }
        elif kind in ("errored", "api_error", "invalid_request_error"):
            error_type = "api_error" if kind == "errored" else kind
            result = {
                "type": "errored",
                "error": {
                    "type": "error",
                    "error": {"type": error_type, "message": f"fake batch {error_type}"},
                },
            }
        else:
            result = {"type": kind}
        return {"custom_id": custom_id, "result": result}

    def _answer_once(
        self, custom_id: str, params: dict[str, Any], batch: StoredBatch, request_id: str
    ) -> dict[str, Any]:
        """The Message of a succeeded request: ``answer`` is called once per request (it
        counts the billed tokens), and every later read of the results gets the same one;
        without ``answer_once``, ``answer`` is asked every time."""
        if not self.answer_once:
            return self.answer(params, request_id)
        with self._answer_lock:
            made = batch.answers.get(custom_id)
            if made is None:
                message = self.answer(params, request_id)
                batch.answers[custom_id] = json.dumps(message).encode()
                return message
        loaded: dict[str, Any] = json.loads(made)
        return loaded


def route(
    store: MessageBatchStore,
    handler: Any,
    method: str,
    raw: bytes,
    base_url: str,
    request_id: str,
) -> bool:
    """Answer a Message Batches request on ``handler`` (a ``BaseHTTPRequestHandler``);
    False when the path is not one of them. ``handler.send_json(status, body, request_id,
    headers)`` sends a JSON answer."""
    parts = urlsplit(handler.path)
    path = parts.path.rstrip("/")
    if not path.startswith(BATCHES_PATH):
        return False
    rest = path[len(BATCHES_PATH) :].strip("/").split("/") if path != BATCHES_PATH else []
    if method == "POST" and not rest:
        status, body, fault = store.create(raw)
        if fault is not None and fault.close:
            handler.close_connection = True
            return True
        if fault is not None:
            headers = {"retry-after": "1"} if status == 429 else {}
            handler.send_json(status, error_body(status), request_id, headers)
            return True
        assert body is not None
        batch = store.find(body["batch"])
        assert batch is not None
        handler.send_json(200, store.body_of(batch, base_url), request_id, {})
        return True
    if method == "GET" and not rest:
        handler.send_json(200, store.page(parts.query, base_url), request_id, {})
        return True
    batch = store.find(rest[0]) if rest else None
    if batch is None:
        handler.send_json(404, error_body(404), request_id, {})
        return True
    if method == "GET" and len(rest) == 1:
        handler.send_json(200, store.body_of(batch, base_url), request_id, {})
        return True
    if method == "POST" and rest[1:] == ["cancel"]:
        store.cancel(batch.id)
        handler.send_json(200, store.body_of(batch, base_url), request_id, {})
        return True
    if method == "GET" and rest[1:] == ["results"]:
        if store.body_of(batch, base_url)["processing_status"] != "ended":
            handler.send_json(404, error_body(404), request_id, {})
            return True
        stream_results(store, handler, batch, request_id)
        return True
    handler.send_json(404, error_body(404), request_id, {})
    return True


def stream_results(
    store: MessageBatchStore, handler: Any, batch: StoredBatch, request_id: str
) -> None:
    """Send the results as a chunked JSONL stream (optionally dropped halfway)."""
    handler.send_response(200)
    handler.send_header("content-type", "application/binary")
    handler.send_header("transfer-encoding", "chunked")
    handler.send_header("request-id", request_id)
    handler.end_headers()
    drop_after = store.results_drop_after
    store.results_drop_after = None
    try:
        pending: list[bytes] = []
        for count, line in enumerate(store.result_lines(batch, request_id), start=1):
            pending.append(line)
            if drop_after is not None and count >= drop_after:
                _chunk(handler, b"".join(pending))
                handler.close_connection = True
                return
            if len(pending) >= 64:
                _chunk(handler, b"".join(pending))
                pending = []
        if pending:
            _chunk(handler, b"".join(pending))
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()
    except (BrokenPipeError, ConnectionResetError):
        handler.close_connection = True


def _chunk(handler: Any, data: bytes) -> None:
    handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    handler.wfile.flush()


ERROR_TYPES = {
    400: "invalid_request_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def error_body(status: int) -> dict[str, Any]:
    """An API error body for ``status``."""
    error_type = ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": error_type, "message": f"fake {status}"}}
