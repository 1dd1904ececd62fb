"""Faults of Lambda itself, injected into a local run: kills and throttles, seeded.

- A **kill** (``kill_rate``) ends an invocation right after its model request was sent: the
  model received, counted and answered it, and the handler never sees the answer (a timeout
  or out-of-memory kill while the answer was on its way). It is raised on the handler's
  thread as :class:`LambdaKilled`, a ``BaseException``: no ``except Exception`` and no
  Powertools cleanup runs, as nothing runs in a real sandbox after a kill. So the
  idempotency record's lock is left to expire at the invocation's (capped) deadline. The
  engine's Lambda treats the invocation as killed: an SQS batch is not deleted and comes back
  after its visibility timeout; an async invocation is a function error and is retried.
- A **throttle** (``throttle_rate``) is a receive that Lambda's SQS poller made without
  invoking the function (the function's concurrency was used up). The batch comes back after
  its visibility timeout with a higher receive count. SQS event source mappings only: an
  async invocation Lambda throttles is kept and retried by Lambda without using an attempt,
  which no handler can observe.

Every decision is seeded and made per *content and occurrence*, not per arrival: the n-th
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


class LambdaKilled(BaseException):
    """The invocation was killed; nothing after this point runs in its sandbox."""


@dataclass(frozen=True)
class FaultRates:
    """Rates of the injected Lambda faults, each in [0, 1], and their seed."""

    kill_rate: float = 0.0
    throttle_rate: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("kill_rate", "throttle_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value}")


class LambdaFaults:
    """Decides, and counts, the kills and throttles of one run (thread-safe)."""

    def __init__(self, rates: FaultRates) -> None:
        self.rates = rates
        self.injected: Counter[str] = Counter()  # KILL / THROTTLE -> count
        self._seen: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    @property
    def kills(self) -> int:
        """Invocations killed after their model request was sent."""
        with self._lock:
            return self.injected[KILL]

    @property
    def throttles(self) -> int:
        """Receives whose batch Lambda never handed to the function."""
        with self._lock:
            return self.injected[THROTTLE]

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
        if rate <= 0.0:
            return False
        with self._lock:
            occurrence = self._seen[kind, digest]
            self._seen[kind, digest] += 1
        chosen = random.Random(f"{self.rates.seed}:{kind}:{digest}:{occurrence}").random() < rate
        if chosen:
            with self._lock:
                self.injected[kind] += 1
        return chosen


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
