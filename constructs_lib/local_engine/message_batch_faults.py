"""Seeded Message Batches faults of a local run: batches canceled, lost and read broken.

What the documented API can do to a batch beyond one request's result, injected into a
:class:`~.message_batches.MessageBatchStore` (results in a new order on every read are the
store's own behaviour, always on):

- **canceled** (``canceled_rate``): someone cancels the batch as it is created; it is
  ``canceling`` for the store's ``cancel_delay_seconds``, then ends with its requests
  ``canceled``, a share of them succeeded despite the cancel;
- **lost** (``lost_rate``): someone deletes the batch at the provider once it has ended (its
  succeeded requests are billed), before the step collected it: every call about it is then
  a 404, and the step must give up on it after its bound;
- **broken reads** (``broken_read_rate``): a results read breaks partway (after 1 to
  :data:`BROKEN_READ_MAX_LINES` lines), and as often, half as likely, a retrieve is answered
  429, 500 or 529.

Each draw is seeded by the run's seed, the batch id and the call's occurrence, so a seed
reproduces which batches meet which fault whatever the thread timing. Standard library
only.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from dataclasses import dataclass

from .message_batches import MessageBatchStore, StoredBatch

#: A broken results read breaks after at most this many lines.
BROKEN_READ_MAX_LINES = 250
#: What a retrieve that fails answers, drawn in turn.
RETRIEVE_FAILURES = (429, 500, 529)


@dataclass(frozen=True)
class BatchFaultRates:
    """The shares of batches canceled and lost, and of reads broken, in [0, 1]."""

    canceled_rate: float = 0.0
    lost_rate: float = 0.0
    broken_read_rate: float = 0.0

    def __post_init__(self) -> None:
        for name in ("canceled_rate", "lost_rate", "broken_read_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value}")

    @property
    def any(self) -> bool:
        return bool(self.canceled_rate or self.lost_rate or self.broken_read_rate)


class BatchFaults:
    """Injects :class:`BatchFaultRates` into a store, and counts what it injected."""

    def __init__(self, rates: BatchFaultRates, seed: int) -> None:
        self.rates = rates
        self.seed = seed
        #: Faults injected: ``canceled``, ``lost``, ``broken_reads``, ``failed_retrieves``.
        self.injected: Counter[str] = Counter()
        self._lost: set[str] = set()
        self._calls: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()
        self._store: MessageBatchStore | None = None

    def install(self, store: MessageBatchStore) -> None:
        """Make ``store`` meet these faults."""
        self._store = store
        store.on_created = self._created
        store.fault_hook = self._fault

    def _draw(self, *parts: object) -> random.Random:
        return random.Random(":".join(str(part) for part in (self.seed, "batch-fault", *parts)))

    def _created(self, batch: StoredBatch) -> None:
        store = self._store
        assert store is not None
        if self._draw(batch.id, "cancel").random() < self.rates.canceled_rate:
            store.cancel(batch.id)
            with self._lock:
                self.injected["canceled"] += 1
        elif self._draw(batch.id, "lost").random() < self.rates.lost_rate:
            with self._lock:
                self._lost.add(batch.id)

    def _fault(self, operation: str, batch_id: str | None) -> int | str | None:
        if batch_id is None:
            return None
        self._delete_if_lost(batch_id)
        with self._lock:
            self._calls[operation, batch_id] += 1
            occurrence = self._calls[operation, batch_id]
        draws = self._draw(batch_id, operation, occurrence)
        rate = self.rates.broken_read_rate
        if operation == "results" and draws.random() < rate:
            with self._lock:
                self.injected["broken_reads"] += 1
            return f"drop_after:{draws.randint(1, BROKEN_READ_MAX_LINES)}"
        if operation == "retrieve" and draws.random() < rate / 2:
            with self._lock:
                self.injected["failed_retrieves"] += 1
            return draws.choice(RETRIEVE_FAILURES)
        return None

    def _delete_if_lost(self, batch_id: str) -> None:
        """A lost batch is deleted by someone the first time it is looked at ended."""
        store = self._store
        batch = store.find(batch_id) if store is not None else None
        if store is None or batch is None or batch_id not in self._lost or batch.deleted:
            return
        if store.body_of(batch, "")["processing_status"] == "ended":  # billed as it ends
            batch.deleted = True
            with self._lock:
                self.injected["lost"] += 1
