"""The Message Batches API the Anthropic SDK uses, held in memory for the fake and the local model.

Standard library only. :class:`MessageBatchStore` answers ``messages.batches.create /
retrieve / list / results / cancel / delete`` (served over HTTP by
:mod:`.message_batches_http`) with the wire shapes of the installed SDK
(``anthropic.types.messages.MessageBatch``, ``MessageBatchIndividualResponse``,
``DeletedMessageBatch``), at least as strictly as the documented API (the facts and their
sources are in the project's FIELD_NOTES, "Message Batches API" and "Message Batches, more"):

- **create**: ``custom_id`` must match ``^[a-zA-Z0-9_-]{1,64}$`` and be unique in the batch
  (400 ``invalid_request_error``); more than ``max_requests`` requests or ``max_bytes`` of
  body is a 413 ``request_too_large``, as the API answers above 100,000 requests or 256 MB.
- **processing**: each request finishes at its own seeded moment within the batch's
  ``processing_delay``, so ``request_counts`` progress while the batch is ``in_progress``
  (their sum always equals the requests); the batch ends ``processing_delay`` seconds after
  its creation on ``clock``, or when ``lifetime_seconds`` (24 h) pass: every unfinished
  request then ends ``expired``.
- **cancel**: the batch is ``canceling`` for ``cancel_delay_seconds``, then ends. Requests
  finished before the cancel keep their result; of the others, a seeded share
  (``cancel_survivor_rate``: non-interruptible requests already running) still ends with
  its own result, "succeeded despite cancel", and the rest end ``canceled``.
- **results**: JSONL, one line a request, in a new seeded order on every read
  (``shuffle_results``; the API promises no order: "use custom_id"); 404 before the batch
  ended, after it is deleted, and once it is archived (``archive_after_seconds``, 29 days
  after creation; ``archived_at`` is then set).
- **delete**: only once the batch ended (else 400 ``invalid_request_error``, "cancel it
  first"); afterwards every call on the batch is a 404 and ``list`` leaves it out.
- **auth and Workspaces**: a call without an API key, or with one in :attr:`revoked_keys`,
  is a 401 ``authentication_error``. A batch belongs to the Workspace of the key that made it
  (:attr:`workspaces`, key -> Workspace; :data:`DEFAULT_WORKSPACE` otherwise): a key of
  another Workspace gets 404 for it and never lists it (move a key to see a batch vanish).
- **list**: newest first, ``limit`` 1-1000, ``has_more`` / ``first_id`` / ``last_id``,
  ``after_id`` / ``before_id``; a batch appears ``list_lag_seconds`` after its creation
  (eventual consistency; default 0).
- **faults** (:attr:`faults`, per operation ``create``, ``retrieve``, ``list``, ``results``,
  ``cancel``, ``delete``, consumed in order; or :attr:`fault_hook`): an HTTP status (429 and
  529 carry ``retry-after``), ``"disconnect"`` (closed unanswered), for ``results``
  ``"drop_after:N"`` (N lines, then the stream breaks), for ``create``
  ``"disconnect_after_create"`` / ``"error_after_create"`` (the batch IS created, then the
  connection closes / a 500 answers).

Each request's result type comes from ``decide(custom_id, params)``, asked once, when the
request finishes: ``"succeeded"``, ``"expired"``, ``"canceled"``, one of the nine
:data:`ERROR_TYPES` (an ``errored`` result of that type), or ``"errored"`` (``api_error``).
With ``answer_once`` a succeeded request is answered once, when its results are first read,
and a later read (a collection that resumes) streams the same Message. Only ``succeeded``
results are billed (:attr:`billed`, per custom_id in :attr:`billed_by_custom_id`), as the
API bills.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import json
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

#: Requests per batch the API allows.
MAX_BATCH_REQUESTS = 100_000
#: Bytes of a create body the API allows (256 MB).
MAX_BATCH_BYTES = 256 * 1024 * 1024
#: A batch expires this long after its creation.
BATCH_LIFETIME_SECONDS = 24 * 3600
#: Results stay downloadable this long after a batch's creation, then it is archived.
ARCHIVE_AFTER_SECONDS = 29 * 86_400
CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
#: The nine error types of an ``errored`` result (``anthropic.types.shared.ErrorObject``).
ERROR_TYPES = (
    "invalid_request_error",
    "authentication_error",
    "billing_error",
    "permission_error",
    "not_found_error",
    "rate_limit_error",
    "timeout_error",
    "api_error",
    "overloaded_error",
)
RESULT_TYPES = ("succeeded", "errored", "expired", "canceled", *ERROR_TYPES)
BATCHES_PATH = "/v1/messages/batches"
#: The Workspace of a key :attr:`MessageBatchStore.workspaces` does not name.
DEFAULT_WORKSPACE = "wrkspc_default"
#: The operations faults can be injected into.
OPERATIONS = ("create", "retrieve", "list", "results", "cancel", "delete")

Decide = Callable[[str, dict[str, Any]], str]
Answer = Callable[[dict[str, Any], str], dict[str, Any]]
#: ``(operation, batch id or None) -> fault entry or None``.
FaultHook = Callable[[str, str | None], int | str | None]


def _iso(seconds: float) -> str:
    moment = dt.datetime.fromtimestamp(seconds, dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _fraction(*parts: object) -> float:
    """A seeded number in (0, 1] from ``parts``, the same in every process."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return (int.from_bytes(digest[:8], "big") + 1) / 2**64


@dataclass
class StoredBatch:
    """One batch as the store keeps it."""

    id: str
    created_at: float
    #: ``(custom_id, params)`` in request order.
    requests: list[tuple[str, dict[str, Any]]]
    workspace: str = DEFAULT_WORKSPACE
    cancel_initiated_at: float | None = None
    ended_at: float | None = None
    deleted: bool = False
    #: custom_id -> result type, set as each request finishes.
    outcomes: dict[str, str] = field(default_factory=dict)
    #: Processing delay of this batch (seconds on the store's clock).
    delay: float = 0.0
    #: custom_id -> the succeeded request's Message, as JSON: made once, when its result is
    #: first read, and read back by any later read of the results (a resumed collection).
    answers: dict[str, bytes] = field(default_factory=dict)
    #: When each request finishes (by request index), unless the batch is canceled or
    #: expires first: seeded moments within ``delay``, the last one at ``delay``.
    finish_times: list[float] = field(default_factory=list)
    #: Request indexes in the order they finish, and how many of them have finished.
    finish_order: list[int] = field(default_factory=list)
    finished: int = 0
    #: Results reads so far (each read has its own order).
    reads: int = 0

    def schedule(self, seed: int) -> None:
        """Draw each request's finishing moment (seeded by ``seed`` and the batch id)."""
        draws = [_fraction(seed, self.id, index) for index in range(len(self.requests))]
        last = max(draws, default=1.0)
        self.finish_times = [self.created_at + self.delay * d / last for d in draws]
        self.finish_order = sorted(range(len(draws)), key=draws.__getitem__)


@dataclass
class CreateFault:
    """What the store answered to a create fault: an HTTP reply, or a closed connection."""

    status: int | None = None
    close: bool = False


class ApiError(Exception):
    """An API error answer (``status``), or a connection closed unanswered (``close``)."""

    def __init__(self, status: int, message: str = "", *, close: bool = False) -> None:
        super().__init__(message or f"fake {status}")
        self.status = status
        self.close = close


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
    :param seed: the seed of finishing moments, cancel survivors and result orders.
        Default 0.
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
        seed: int = 0,
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
        self.seed = seed
        self._documented_behaviour()
        #: Close the results stream after this many lines (once). Default None.
        self.results_drop_after: int | None = None
        #: Every batch, by id, in creation order (deleted ones too, marked).
        self.batches: dict[str, StoredBatch] = {}
        #: Calls received per operation (whatever their answer).
        self.calls: Counter[str] = Counter()
        #: Billed requests (succeeded results), in total and per custom_id.
        self.billed = 0
        self.billed_by_custom_id: Counter[str] = Counter()
        #: Results by type, over every finished request.
        self.result_counts: Counter[str] = Counter()
        self._lock = threading.RLock()
        self._answer_lock = threading.Lock()
        self._ids = itertools.count(1)
        #: Distinct ``system`` values of the requests held: a batch's requests share one
        #: system prompt, kept once instead of once a request (10,000 copies of a 24 KB
        #: prompt are 240 MB).
        self._systems: list[Any] = []

    def _documented_behaviour(self) -> None:
        """The knobs of the API's documented behaviour and of the injected faults, each at
        its default (change them on a store to script a test)."""
        #: Faults of the next calls of each operation, consumed in order.
        self.faults: dict[str, list[int | str]] = {name: [] for name in OPERATIONS}
        #: Asked for a fault on every call after :attr:`faults` (None: no fault).
        self.fault_hook: FaultHook | None = None
        #: Called with each batch just created (a local run's injected faults).
        self.on_created: Callable[[StoredBatch], None] | None = None
        #: A batch not ended this long after creation ends with every unfinished request
        #: ``expired`` (the API's 24 h); a test may raise it to imitate a batch stuck open.
        self.lifetime_seconds: float = BATCH_LIFETIME_SECONDS
        #: Seconds a canceled batch stays ``canceling``. Default 60.
        self.cancel_delay_seconds: float = 60.0
        #: Share of the unfinished requests of a canceled batch that still finish with
        #: their own result ("succeeded despite cancel"). Default 0.1.
        self.cancel_survivor_rate: float = 0.1
        #: Results are streamed in a new seeded order on every read. Default True.
        self.shuffle_results = True
        #: Results are archived (404) this long after creation. Default 29 days.
        self.archive_after_seconds: float = ARCHIVE_AFTER_SECONDS
        #: A batch is listed this long after its creation. Default 0.
        self.list_lag_seconds: float = 0.0
        #: API key -> Workspace id; a key not named is in :data:`DEFAULT_WORKSPACE`.
        self.workspaces: dict[str, str] = {}
        #: API keys answered 401 (a rotated or revoked key).
        self.revoked_keys: set[str] = set()

    # -- compatibility ---------------------------------------------------------------------
    @property
    def create_faults(self) -> list[int | str]:
        """The faults of the next creates (``faults["create"]``)."""
        return self.faults["create"]

    @create_faults.setter
    def create_faults(self, faults: list[int | str]) -> None:
        self.faults["create"] = list(faults)

    @property
    def create_calls(self) -> int:
        """Create calls received (whatever their answer)."""
        return self.calls["create"]

    # -- faults, auth and visibility -------------------------------------------------------
    def fault(self, operation: str, batch_id: str | None = None) -> int | str | None:
        """Count a call of ``operation`` and take its fault, if any."""
        with self._lock:
            self.calls[operation] += 1
            queued = self.faults.setdefault(operation, [])
            if queued:
                return queued.pop(0)
        return self.fault_hook(operation, batch_id) if self.fault_hook is not None else None

    def workspace_of(self, api_key: str | None) -> str:
        """The Workspace of ``api_key``; raises :class:`ApiError` 401 for none or a revoked
        one."""
        if not api_key:
            raise ApiError(401, "missing API key")
        if api_key in self.revoked_keys:
            raise ApiError(401, "invalid x-api-key")
        return self.workspaces.get(api_key, DEFAULT_WORKSPACE)

    def visible(self, batch_id: str, workspace: str) -> StoredBatch:
        """The batch ``batch_id`` as ``workspace`` sees it; raises :class:`ApiError` 404
        when it does not exist, is deleted or belongs to another Workspace."""
        with self._lock:
            batch = self.batches.get(batch_id)
        if batch is None or batch.deleted or batch.workspace != workspace:
            raise ApiError(404, f"message batch {batch_id} not found")
        return batch

    # -- state -----------------------------------------------------------------------------
    def _settle(self, batch: StoredBatch) -> None:
        """Finish the requests whose time came, and end ``batch`` if its time came (lock
        held)."""
        if batch.ended_at is not None:
            return
        now = self.clock()
        expires = batch.created_at + self.lifetime_seconds
        if batch.cancel_initiated_at is not None:
            stop = batch.cancel_initiated_at + self.cancel_delay_seconds
            if now >= stop:
                self._end_canceled(batch, min(stop, expires))
            return
        self._finish_due(batch, min(now, expires))
        if batch.finished == len(batch.requests):
            batch.ended_at = batch.created_at + batch.delay
        elif now >= expires:
            for index in batch.finish_order[batch.finished :]:
                self._record(batch, index, "expired")
            batch.finished = len(batch.requests)
            batch.ended_at = expires

    def _finish_due(self, batch: StoredBatch, until: float) -> None:
        while batch.finished < len(batch.requests):
            index = batch.finish_order[batch.finished]
            if batch.finish_times[index] > until:
                return
            custom_id, params = batch.requests[index]
            self._record(batch, index, self.decide(custom_id, params))
            batch.finished += 1

    def _end_canceled(self, batch: StoredBatch, at: float) -> None:
        for index in batch.finish_order[batch.finished :]:
            custom_id, params = batch.requests[index]
            survives = _fraction(self.seed, batch.id, index, "cancel") <= self.cancel_survivor_rate
            self._record(batch, index, self.decide(custom_id, params) if survives else "canceled")
        batch.finished = len(batch.requests)
        batch.ended_at = at

    def _record(self, batch: StoredBatch, index: int, kind: str) -> None:
        if kind not in RESULT_TYPES:
            raise ValueError(f"unknown batch result type {kind!r}")
        custom_id = batch.requests[index][0]
        batch.outcomes[custom_id] = kind
        self.result_counts[kind] += 1
        if kind == "succeeded":
            self.billed += 1
            self.billed_by_custom_id[custom_id] += 1

    def body_of(self, batch: StoredBatch, base_url: str) -> dict[str, Any]:
        """The ``MessageBatch`` JSON of ``batch``."""
        with self._lock:
            self._settle(batch)
            counts = dict.fromkeys(("succeeded", "errored", "canceled", "expired"), 0)
            for kind in batch.outcomes.values():
                counts[kind if kind in counts else "errored"] += 1
            counts["processing"] = len(batch.requests) - len(batch.outcomes)
            if batch.ended_at is not None:
                status = "ended"
            elif batch.cancel_initiated_at is not None:
                status = "canceling"
            else:
                status = "in_progress"
            archived = batch.created_at + self.archive_after_seconds
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
                "archived_at": _iso(archived) if self.clock() >= archived else None,
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
    def create(
        self, raw: bytes, workspace: str = DEFAULT_WORKSPACE
    ) -> tuple[int, dict[str, Any] | None, CreateFault | None]:
        """``(status, body, fault)`` of a create; ``fault.close`` means close unanswered."""
        fault = self.fault("create")
        if isinstance(fault, int):
            return fault, None, CreateFault(status=fault)
        if fault == "disconnect":
            return 0, None, CreateFault(close=True)
        parsed = self._parse_requests(raw)
        if isinstance(parsed, int):
            return parsed, None, CreateFault(status=parsed)
        with self._lock:
            batch_id = f"msgbatch_fake_{next(self._ids):06d}"
            batch = StoredBatch(
                batch_id, self.clock(), parsed, workspace=workspace, delay=self.processing_delay
            )
            batch.schedule(self.seed)
            self.batches[batch_id] = batch
        if self.on_created is not None:
            self.on_created(batch)
        if fault == "disconnect_after_create":
            return 0, None, CreateFault(close=True)
        if fault == "error_after_create":
            return 500, None, CreateFault(status=500)
        return 200, {"batch": batch_id}, None

    def _parse_requests(self, raw: bytes) -> list[tuple[str, dict[str, Any]]] | int:
        """The requests of a create body, or the status that refuses it."""
        if len(raw) > self.max_bytes:
            return 413
        try:
            requests = json.loads(raw or b"{}").get("requests")
        except (ValueError, AttributeError):
            requests = None
        if not isinstance(requests, list) or not requests:
            return 400
        if len(requests) > self.max_requests:
            return 413
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
                return 400
            seen.add(custom_id)
            if "system" in params:
                params["system"] = self._shared_system(params["system"])
            parsed.append((custom_id, params))
        return parsed

    def _shared_system(self, system: Any) -> Any:
        """The held value equal to ``system`` (kept from now on if none is)."""
        with self._lock:
            for known in self._systems:
                if known == system:
                    return known
            self._systems.append(system)
            return system

    def find(self, batch_id: str) -> StoredBatch | None:
        """The batch of ``batch_id`` (deleted or not), or None."""
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

    def delete(self, batch: StoredBatch) -> dict[str, Any]:
        """Delete an ended batch; raises :class:`ApiError` 400 for one still processing."""
        with self._lock:
            self._settle(batch)
            if batch.ended_at is None:
                raise ApiError(400, "a Message Batch can only be deleted once it ended")
            batch.deleted = True
        return {"id": batch.id, "type": "message_batch_deleted"}

    def page(self, query: str, base_url: str, workspace: str = DEFAULT_WORKSPACE) -> dict[str, Any]:
        """One ``list`` page (newest first) of the batches ``workspace`` sees."""
        params = {name: values[-1] for name, values in parse_qs(query).items()}
        limit = max(1, min(1000, int(params.get("limit") or 20)))
        listed_before = self.clock() - self.list_lag_seconds
        with self._lock:
            newest_first = [
                b
                for b in reversed(self.batches.values())
                if not b.deleted and b.workspace == workspace and b.created_at <= listed_before
            ]
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

    def readable(self, batch: StoredBatch) -> None:
        """Raise :class:`ApiError` 404 unless ``batch``'s results can be read now: it
        ended and is not archived."""
        with self._lock:
            self._settle(batch)
            if batch.ended_at is None:
                raise ApiError(404, f"message batch {batch.id} has not ended")
            if self.clock() >= batch.created_at + self.archive_after_seconds:
                raise ApiError(404, f"message batch {batch.id} is archived")

    def result_lines(self, batch: StoredBatch, request_id: str) -> Iterator[bytes]:
        """The JSONL lines of an ended batch, one by one, in this read's order (nothing
        is built up front but the order)."""
        with self._lock:
            batch.reads += 1
            order = list(range(len(batch.requests)))
            if self.shuffle_results:
                random.Random(f"{self.seed}:{batch.id}:read:{batch.reads}").shuffle(order)
        for index in order:
            custom_id, params = batch.requests[index]
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
        elif kind in ("errored", *ERROR_TYPES):
            error_type = "api_error" if kind == "errored" else kind
            result = {
                "type": "errored",
                "error": {
                    "type": "error",
                    "error": {"type": error_type, "message": f"fake batch {error_type}"},
                    "request_id": f"req_fake_batch_{custom_id}",
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
