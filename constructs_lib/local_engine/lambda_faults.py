"""Faults of Lambda itself, injected into a local run: kills and throttles, seeded.

- A **kill** (``kill_rate``) ends an invocation right after its model request was sent: the
  model received, counted and answered it, and the handler never sees the answer (a timeout
  or out-of-memory kill while the answer was on its way). It is raised on the handler's
  thread as :class:`LambdaKilled`, a ``BaseException``: no ``except Exception`` and no
  Powertools cleanup runs, as nothing runs in a real sandbox after a kill. So the
  idempotency record's lock is left to expire at the invocation's (capped) deadline. The
  engine's Lambda treats the invocation as killed: an SQS batch is not deleted and comes back
  after its visibility timeout; an async invocation is a function error and is retried.
  Under Message Batches the same rate kills a read of a batch's results partway
  (:meth:`LambdaFaults.kill_in_batch_results`): the collector's next tick resumes
  from its last checkpoint, and a line applied before the kill bills nothing more.
- A **throttle** (``throttle_rate``) is a receive that Lambda's SQS poller made without
  invoking the function (the function's concurrency was used up). The batch comes back after
  its visibility timeout with a higher receive count. SQS event source mappings only: an
  async invocation Lambda throttles is kept and retried by Lambda without using an attempt,
  which no handler can observe.
- A **kill around a batch create** (``batch_create_kill_rate``, issue 19) ends an
  invocation at one of :data:`BATCH_CREATE_KILL_POINTS` of a ``messages.batches.create``
  call, the crash points ``tests/runtime/test_batch_crash_points.py`` proves on the
  handler: ``before_create`` (the request never reaches the model: nothing is created),
  ``after_create`` (the model created the batch, which will bill, and the answer never
  reaches the handler) and ``before_batch_id_recorded`` (the handler has the answer and dies
  before its next AWS call, the write of the batch id). All three leave the submission
  ``creating``: the tick's reconcile sends it again or adopts the batch. Decided per create
  call in the run's order (see :meth:`LambdaFaults.kill_around_batch_create`).

Every other decision is seeded and made per *content and occurrence*, not per arrival: the n-th
request with a given body (the n-th receive of a given event) is killed (throttled) or not
whatever the thread timing, so a seed reproduces which rows meet a fault, as the local
model's fault plans do. Event ids and timestamps are left out of an event's content, so two
copies of one event are the same content and their occurrences are counted together.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

KILL = "kill"
THROTTLE = "throttle"
BATCH_CREATE_KILL = "batch_create_kill"
#: Where a batch create kill strikes, in the order of the call (see the module docstring).
BATCH_CREATE_KILL_POINTS = ("before_create", "after_create", "before_batch_id_recorded")
BATCH_RESULTS_KILL = "batch_results_kill"
#: A kill in a batch results stream strikes once the invocation has read between 1 and this
#: many lines: 2.5 of the collector's pages (``model_step.batch_limits.ROWS_PAGE``, 100
#: lines), so some kills land inside a page's lines and some between pages.
RESULTS_KILL_MAX_LINES = 250


class LambdaKilled(BaseException):
    """The invocation was killed; nothing after this point runs in its sandbox."""


@dataclass(frozen=True)
class FaultRates:
    """Rates of the injected Lambda faults, each in [0, 1], and their seed."""

    kill_rate: float = 0.0
    throttle_rate: float = 0.0
    seed: int = 0
    batch_create_kill_rate: float = 0.0

    def __post_init__(self) -> None:
        for name in ("kill_rate", "throttle_rate", "batch_create_kill_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value}")


class LambdaFaults:
    """Decides, and counts, the kills and throttles of one run (thread-safe)."""

    def __init__(self, rates: FaultRates) -> None:
        self.rates = rates
        self.injected: Counter[str] = Counter()  # KILL / THROTTLE / a kill point -> count
        self._seen: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    @property
    def kills(self) -> int:
        """Invocations killed after their model request was sent, or partway through a
        batch results stream."""
        with self._lock:
            return self.injected[KILL]

    @property
    def throttles(self) -> int:
        """Receives whose batch Lambda never handed to the function."""
        with self._lock:
            return self.injected[THROTTLE]

    @property
    def batch_create_kills(self) -> dict[str, int]:
        """Invocations killed around a batch create, by kill point (every point listed)."""
        with self._lock:
            return {point: self.injected[point] for point in BATCH_CREATE_KILL_POINTS}

    @property
    def batch_creates(self) -> int:
        """Batch create calls decided so far, killed or not (0 while the rate is 0)."""
        with self._lock:
            return self._seen[BATCH_CREATE_KILL, ""]

    def kill_around_batch_create(self) -> str | None:
        """The point at which the invocation making the run's next batch create dies, or
        None. Decided per create call in the run's order, not per content: a create's body
        names its rows by custom_id, which hashes the upload id, and that differs in every
        run (moto's object version ids), so a seed would reproduce nothing."""
        draws = self._strikes(BATCH_CREATE_KILL, self.rates.batch_create_kill_rate, "")
        if draws is None:
            return None
        point = draws.choice(BATCH_CREATE_KILL_POINTS)
        with self._lock:
            self.injected[point] += 1
        return point

    def kill_in_batch_results(self) -> int | None:
        """The number of lines after which the invocation reading the run's next batch
        results stream dies, or None: ``kill_rate`` per results read, in the run's order (a
        read has no body to key the draw on, and a resumed read asks for the same URL)."""
        draws = self._strikes(BATCH_RESULTS_KILL, self.rates.kill_rate, "")
        return None if draws is None else draws.randint(1, RESULTS_KILL_MAX_LINES)

    def record_kill(self) -> None:
        """Count a kill decided earlier that has now struck (a results stream read far
        enough: a shorter stream ends before its kill, and is not counted)."""
        with self._lock:
            self.injected[KILL] += 1

    def kill_after_request(self, body: bytes) -> bool:
        """Whether the invocation that just sent a request with ``body`` dies now."""
        return self._decide(KILL, self.rates.kill_rate, hashlib.sha256(body).hexdigest())

    def throttle_receive(self, bodies: Sequence[str]) -> bool:
        """Whether Lambda throttles the batch of messages with ``bodies`` it just received."""
        digest = hashlib.sha256()
        for body in bodies:
            digest.update(stable_content(body).encode())
            digest.update(b"\0")
        return self._decide(THROTTLE, self.rates.throttle_rate, digest.hexdigest())

    def _decide(self, kind: str, rate: float, digest: str) -> bool:
        chosen = self._strikes(kind, rate, digest) is not None
        if chosen:
            with self._lock:
                self.injected[kind] += 1
        return chosen

    def _strikes(self, kind: str, rate: float, digest: str) -> random.Random | None:
        """Count one more occurrence of ``kind`` for ``digest`` and draw whether it strikes:
        the seeded generator that drew it (for any further choice), or None. An empty
        ``digest`` keys the draw on the occurrence alone."""
        if rate <= 0.0:
            return None
        with self._lock:
            occurrence = self._seen[kind, digest]
            self._seen[kind, digest] += 1
        parts = [str(self.rates.seed), kind, *([digest] if digest else []), str(occurrence)]
        draws = random.Random(":".join(parts))
        return draws if draws.random() < rate else None


#: Members of an EventBridge event that differ between copies of the same event.
_PER_COPY_MEMBERS = ("id", "time")


def stable_content(body: str) -> str:
    """What identifies a message's event across copies: an EventBridge event without its
    ``id`` and ``time`` (sorted JSON); any other body as it is."""
    try:
        event = json.loads(body)
    except (TypeError, ValueError):
        return body
    if not isinstance(event, Mapping) or "detail" not in event:
        return body
    kept: dict[str, Any] = {k: v for k, v in event.items() if k not in _PER_COPY_MEMBERS}
    return json.dumps(kept, sort_keys=True, default=str)
