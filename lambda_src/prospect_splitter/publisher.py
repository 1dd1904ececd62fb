"""Batched, retrying, bounded-parallel EventBridge PutEvents (classic or v2 bus).

A bus kind (``ClassicBus`` or ``V2Bus``) knows its request shape and limits; the
``EventPublisher`` owns batching, retries of failed entries and the worker pool.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

# Classic PutEvents: 1-10 entries and at most 256 KB per request.
CLASSIC_MAX_ENTRIES = 10
CLASSIC_MAX_REQUEST_BYTES = 256 * 1024
# eventbridgev2 PutEvents: 1-100 entries (botocore's model: PutEventsRequestEntryList max 100)
# and "the total size of all event entries in a request must not exceed 1 MB (1,048,576
# bytes)". We keep a margin because how the service sizes SystemMetadata is not documented.
V2_MAX_ENTRIES = 100
V2_MAX_REQUEST_BYTES = 1_000_000
# Kept for callers that imported the classic limits by these names.
MAX_ENTRIES_PER_CALL = CLASSIC_MAX_ENTRIES
MAX_REQUEST_BYTES = CLASSIC_MAX_REQUEST_BYTES

DEDUPLICATED = "DEDUPLICATED"
# Entry codes that mean "try again later"; anything else (e.g. a malformed detail) will
# fail the same way on every attempt, so retrying it only delays the error.
RETRYABLE_ERROR_CODES = frozenset(
    {
        "ThrottlingException",
        "InternalFailure",
        "InternalException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
    }
)


class EventPublishError(RuntimeError):
    """Some entries could not be published; raised so the whole upload is retried.

    ``failures`` holds ``(error_code, error_message)`` per entry that was not accepted.
    """

    def __init__(self, message: str, failures: list[tuple[str, str]]) -> None:
        super().__init__(message)
        self.failures = failures


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff for failed entries: full jitter, ``base_delay * 2**(attempt-1)`` capped.

    Defaults: 5 attempts in all, 0.2 s base delay, 5 s cap.
    """

    max_attempts: int = 5
    base_delay: float = 0.2
    max_delay: float = 5.0

    def delay(self, attempt: int, rng: Callable[[], float]) -> float:
        """Sleep before attempt ``attempt + 1``."""
        return rng() * min(self.max_delay, self.base_delay * 2 ** (attempt - 1))


def entry_size(entry: dict[str, Any]) -> int:
    """PutEvents size of one entry, computed as the EventBridge documentation describes.

    For a v2 entry the SystemMetadata ids are counted too (conservative: the v2 sizing
    rule is not documented beyond "total size of all event entries").
    """
    size = 14 if "Time" in entry else 0
    for name in ("Source", "DetailType", "Detail"):
        size += len(entry.get(name, "").encode("utf-8"))
    size += sum(len(resource.encode("utf-8")) for resource in entry.get("Resources", []))
    for value in entry.get("SystemMetadata", {}).values():
        size += len(value.encode("utf-8"))
    return size


class Bus(Protocol):
    """One kind of event bus: its request limits, its entry shape and its PutEvents call."""

    max_entries: int
    max_request_bytes: int

    def entry(self, detail_type: str, detail: str, deduplication_id: str | None) -> dict[str, Any]:
        """One PutEvents entry."""

    def put(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Send ``entries``; the result entries, positionally matching the request."""


@dataclass(frozen=True)
class ClassicBus:
    """A classic custom bus (boto3 client ``events``), named by ``EVENT_BUS_NAME``.

    Classic PutEvents has no deduplication field: ``deduplication_id`` is ignored.
    """

    client: Any
    bus_name: str
    source: str
    max_entries: int = CLASSIC_MAX_ENTRIES
    max_request_bytes: int = CLASSIC_MAX_REQUEST_BYTES

    def entry(self, detail_type: str, detail: str, deduplication_id: str | None) -> dict[str, Any]:
        return {
            "EventBusName": self.bus_name,
            "Source": self.source,
            "DetailType": detail_type,
            "Detail": detail,
        }

    def put(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return list(self.client.put_events(Entries=entries)["Entries"])


@dataclass(frozen=True)
class V2Bus:
    """An EventBridge v2 bus (boto3 client ``eventbridgev2``), named by ``EVENT_BUS_ARN``.

    Each entry carries ``SystemMetadata.DeduplicationId``: the bus answers a repeat within
    its 300 s window with ``SuccessCode: DEDUPLICATED`` instead of delivering it again.
    """

    client: Any
    bus_arn: str
    source: str
    max_entries: int = V2_MAX_ENTRIES
    max_request_bytes: int = V2_MAX_REQUEST_BYTES

    def entry(self, detail_type: str, detail: str, deduplication_id: str | None) -> dict[str, Any]:
        entry: dict[str, Any] = {"Source": self.source, "DetailType": detail_type, "Detail": detail}
        if deduplication_id is not None:
            entry["SystemMetadata"] = {"DeduplicationId": deduplication_id}
        return entry

    def put(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        response = self.client.put_events(EventBusArn=self.bus_arn, Entries=entries)
        return list(response["Entries"])


@dataclass
class EventPublisher:
    """Buffers entries into PutEvents calls within the bus's entry and byte limits, and
    sends up to ``concurrency`` calls at once.

    Call ``add`` per event, ``flush`` to wait until everything added so far is published
    (raises EventPublishError if an entry could not be), and ``close`` (or use ``with``)
    to stop the worker threads. ``concurrency=1`` sends inline on the caller's thread.

    Memory stays flat: at most ``2 * concurrency`` batches are in flight or queued; ``add``
    blocks (back-pressure on the CSV reader) until a worker frees a slot. After a batch
    fails, the next ``add`` or ``flush`` raises, so a doomed upload stops early.

    Counters (read after ``flush``): ``published`` (accepted entries, deduplicated ones
    included) and ``deduplicated`` (entries a v2 bus answered with DEDUPLICATED).
    ``sleep`` and ``rng`` are injectable so tests need not wait.
    """

    bus: Bus
    concurrency: int = 1
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Callable[[float], None] = time.sleep
    rng: Callable[[], float] = random.random
    published: int = 0
    deduplicated: int = 0
    _batch: list[dict[str, Any]] = field(default_factory=list)
    _batch_bytes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _slots: threading.BoundedSemaphore | None = field(default=None, repr=False)
    _pool: ThreadPoolExecutor | None = field(default=None, repr=False)
    _in_flight: set[Future[None]] = field(default_factory=set, repr=False)
    _error: Exception | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")

    def __enter__(self) -> EventPublisher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def add(
        self, detail_type: str, detail: dict[str, Any], deduplication_id: str | None = None
    ) -> None:
        """Queue one event; sends the current batch first when this one would not fit."""
        self._raise_pending_error()
        body = json.dumps(detail, ensure_ascii=False, separators=(",", ":"))
        entry = self.bus.entry(detail_type, body, deduplication_id)
        size = entry_size(entry)
        if size > self.bus.max_request_bytes:
            raise EventPublishError(
                f"event of {size} bytes exceeds the PutEvents limit",
                [("EntryTooLarge", detail_type)],
            )
        if (
            len(self._batch) >= self.bus.max_entries
            or self._batch_bytes + size > self.bus.max_request_bytes
        ):
            self._submit()
        self._batch.append(entry)
        self._batch_bytes += size

    def flush(self) -> None:
        """Send whatever is buffered and wait for every call in flight."""
        self._raise_pending_error()
        self._submit()
        with self._lock:
            waiting = list(self._in_flight)
        for future in waiting:
            future.result()  # _run_batch never raises; its outcome is recorded first
        self._raise_pending_error()

    def close(self) -> None:
        """Stop the workers: queued batches are dropped, calls in flight finish.

        After a successful ``flush`` nothing is queued; on an error path (a failed batch,
        an unreadable object) the upload is retried as a whole anyway.
        """
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    # ------------------------------------------------------------------ internals

    def _raise_pending_error(self) -> None:
        with self._lock:
            error = self._error
        if error is not None:
            raise error

    def _submit(self) -> None:
        if not self._batch:
            return
        batch, self._batch, self._batch_bytes = self._batch, [], 0
        if self.concurrency == 1:
            self._count(*self._send(batch))
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=self.concurrency, thread_name_prefix="put-events"
            )
            self._slots = threading.BoundedSemaphore(2 * self.concurrency)
        assert self._slots is not None
        self._slots.acquire()  # back-pressure: bounded batches in memory
        future = self._pool.submit(self._run_batch, batch)
        with self._lock:
            self._in_flight.add(future)

    def _run_batch(self, batch: list[dict[str, Any]]) -> None:
        """Worker: send one batch and record its outcome before the future completes."""
        try:
            accepted, deduplicated = self._send(batch)
        except Exception as error:  # re-raised on the caller's thread by add or flush
            with self._lock:
                if self._error is None:
                    self._error = error
        else:
            self._count(accepted, deduplicated)
        finally:
            with self._lock:
                self._in_flight = {f for f in self._in_flight if not f.done()}
            assert self._slots is not None
            self._slots.release()

    def _count(self, accepted: int, deduplicated: int) -> None:
        with self._lock:
            self.published += accepted
            self.deduplicated += deduplicated

    def _send(self, entries: list[dict[str, Any]]) -> tuple[int, int]:
        """Publish one batch; returns ``(accepted, deduplicated)``; raises when it cannot."""
        pending = entries
        total = len(entries)
        deduplicated = 0
        for attempt in range(1, self.retry.max_attempts + 1):
            results = self.bus.put(pending)
            # Response entries are positional: entry i answers request entry i.
            failed = []
            for entry, result in zip(pending, results, strict=True):
                if result.get("ErrorCode"):
                    failed.append((entry, result))
                elif result.get("SuccessCode") == DEDUPLICATED:
                    deduplicated += 1
            if not failed:
                return total, deduplicated
            codes = [(r["ErrorCode"], r.get("ErrorMessage", "")) for _, r in failed]
            permanent = [code for code in codes if code[0] not in RETRYABLE_ERROR_CODES]
            if permanent:
                raise EventPublishError(
                    f"{len(permanent)} entries rejected with non-retryable errors", codes
                )
            if attempt == self.retry.max_attempts:
                raise EventPublishError(
                    f"{len(failed)} entries still failing after {attempt} attempts", codes
                )
            self.sleep(self.retry.delay(attempt, self.rng))
            pending = [entry for entry, _ in failed]
        raise AssertionError("unreachable: the loop returns or raises")
