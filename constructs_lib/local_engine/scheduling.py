"""Timers and quiescence tracking for the emulated asynchronous world.

Lambda's async retries wait minutes; locally they wait a compressed delay. A single timer
thread holds them (instead of a sleeping worker), so a retry that waits never takes a
worker away from events that are ready to run.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable

#: Wall seconds an engine run may take to settle (``WorkTracker.wait_idle``) before it fails,
#: when its caller gives no bound. ``prospect-uploader run`` always gives one, derived from
#: the work (:mod:`.run_bound`).
DEFAULT_RUN_TIMEOUT_SECONDS = 300.0


class Scheduler:
    """Runs callbacks after a delay on one daemon thread. ``call_later(seconds, fn)``."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._wakeup = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="local-run-timer", daemon=True)
        self._thread.start()

    def call_later(self, seconds: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the timer thread after ``seconds`` (it should only hand work
        to a pool, never block)."""
        with self._wakeup:
            heapq.heappush(
                self._heap, (time.monotonic() + max(0.0, seconds), next(self._order), callback)
            )
            self._wakeup.notify()

    def stop(self) -> None:
        """Stop the thread; callbacks not yet due are dropped."""
        with self._wakeup:
            self._stopped = True
            self._wakeup.notify()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while True:
            with self._wakeup:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._wakeup.wait(timeout)
                if self._stopped:
                    return
                _, _, callback = heapq.heappop(self._heap)
            callback()


class WorkTracker:
    """Counts work in flight (queued, running, or waiting for a retry) so the pipeline knows
    when everything has settled; also collects failures of the emulator itself."""

    def __init__(self) -> None:
        self._pending = 0
        self._idle = threading.Condition()
        self.errors: list[BaseException] = []

    def begin(self) -> None:
        """One more unit of work exists."""
        with self._idle:
            self._pending += 1

    def end(self) -> None:
        """One unit of work is finished (successfully or not)."""
        with self._idle:
            self._pending -= 1
            if self._pending <= 0:
                self._idle.notify_all()

    def fail(self, error: BaseException) -> None:
        """Record an emulator bug; :meth:`wait_idle` callers re-raise it."""
        with self._idle:
            self.errors.append(error)
            self._idle.notify_all()

    @property
    def pending(self) -> int:
        """Units of work not yet finished."""
        with self._idle:
            return self._pending

    def wait_idle(self, timeout: float, tick: Callable[[], None] | None = None) -> bool:
        """Block until nothing is pending or an error was recorded; True when idle.

        ``tick`` is called about ten times a second (progress display); without one the wait
        only wakes when the work ends, an error is recorded or ``timeout`` has passed.
        """
        deadline = time.monotonic() + timeout
        period = 0.1 if tick is not None else None
        while True:
            with self._idle:
                if self._pending <= 0 or self.errors:
                    return not self.errors
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(remaining if period is None else min(period, remaining))
            if tick is not None:
                tick()  # Outside the lock: rendering must not hold up workers.
