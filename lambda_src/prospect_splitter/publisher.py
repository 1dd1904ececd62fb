"""The splitter's bounded-parallel publisher: a CSV's rows, streamed into PutEvents calls.

Requests, limits and retries are ``prospect_contract.put_events``'s (the pipeline's one
PutEvents implementation); this module adds what a streaming split needs: a worker pool, and
back-pressure so memory stays flat however large the file.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from prospect_contract.events import ROW_VALIDATED
from prospect_contract.put_events import (
    Batcher,
    Bus,
    Entry,
    RetryPolicy,
    detail_json,
    send_batch,
)
from prospect_contract.rows import WRITE_BATCH, RowWriter


@dataclass
class EventPublisher:
    """Buffers entries into PutEvents calls within the bus's entry and byte limits, and
    sends up to ``concurrency`` calls at once.

    Call ``add`` per event, ``flush`` to wait until everything added so far is published
    (raises ``PutEventsError`` if an entry could not be, or the call's own error), and
    ``close`` (or use ``with``) to stop the worker threads. ``concurrency=1`` sends inline
    on the caller's thread.

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
    _batcher: Batcher = field(init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _slots: threading.BoundedSemaphore | None = field(default=None, repr=False)
    _pool: ThreadPoolExecutor | None = field(default=None, repr=False)
    _in_flight: set[Future[None]] = field(default_factory=set, repr=False)
    _error: Exception | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        self._batcher = Batcher(self.bus)

    def __enter__(self) -> EventPublisher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def add(
        self, detail_type: str, detail: Mapping[str, Any], deduplication_id: str | None = None
    ) -> None:
        """Queue one event; sends the current batch first when this one would not fit.

        Raises ``PutEventsError`` (``EntryTooLarge``) for an event no request could carry.
        """
        self._raise_pending_error()
        entry = self.bus.entry(detail_type, detail_json(detail), deduplication_id)
        full = self._batcher.add(entry)
        if full:
            self._submit(full)

    def flush(self) -> None:
        """Send whatever is buffered and wait for every call in flight."""
        self._raise_pending_error()
        self._submit(self._batcher.take())
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

    def _submit(self, batch: list[Entry]) -> None:
        if not batch:
            return
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

    def _run_batch(self, batch: list[Entry]) -> None:
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

    def _send(self, entries: list[Entry]) -> tuple[int, int]:
        """Publish one batch; returns ``(accepted, deduplicated)``; raises when it cannot."""
        result = send_batch(self.bus, entries, retry=self.retry, sleep=self.sleep, rng=self.rng)
        result.raise_for_failures()
        return result.accepted, result.deduplicated


class RowsThenEvents:
    """Row items for RowsTable and the events that name them, in that order (issue 18).

    ``add`` buffers a row's item and, for a valid row, its ``Prospect Row Validated``
    event; every :data:`~prospect_contract.rows.WRITE_BATCH` items (and on ``flush``) the
    items are written, and only then are their events handed to ``publisher``, so no event
    names a row the classifier cannot read yet. ``flush`` does not flush ``publisher``.
    """

    def __init__(self, writer: RowWriter, publisher: EventPublisher) -> None:
        self._writer = writer
        self._publisher = publisher
        self._waiting: list[tuple[Mapping[str, Any], str | None]] = []

    def add(self, item: dict[str, Any], event: tuple[Mapping[str, Any], str | None] | None) -> None:
        """Buffer ``item``; ``event`` is the row's (detail, deduplication id), None for an
        invalid row."""
        self._writer.add(item)
        if event is not None:
            self._waiting.append(event)
        if len(self._writer) >= WRITE_BATCH:
            self.flush()

    def flush(self) -> None:
        """Write every buffered item, then hand their events to the publisher."""
        self._writer.flush()
        for detail, deduplication_id in self._waiting:
            self._publisher.add(ROW_VALIDATED, detail, deduplication_id)
        self._waiting.clear()
