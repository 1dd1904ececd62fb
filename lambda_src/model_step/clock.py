"""The runtime's one source of wall-clock time.

Every expiry, lock, rate-limit window and timestamp the runtime writes is computed from
:func:`now`, so a test (or the local run's compressed clock) can move time by patching this one
function instead of the whole ``time`` module. Durations of the model call itself use
``time.monotonic`` (see :mod:`.deadline`), which no test needs to move.
"""

from __future__ import annotations

import datetime as dt
import time


def now() -> float:
    """Seconds since the epoch (``time.time()``)."""
    return time.time()


def utc_iso(seconds: float | None = None) -> str:
    """``seconds`` (default :func:`now`) as an ISO-8601 UTC timestamp, second precision."""
    moment = dt.datetime.fromtimestamp(now() if seconds is None else seconds, dt.UTC)
    return moment.isoformat(timespec="seconds")
