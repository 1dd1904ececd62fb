"""The times and sizes of the batch path, in one place (standard library only).

Every batch module reads these as ``batch_limits.NAME`` when it needs one, so a test (or the
local run, whose clock is compressed) can change one by setting it on this module.
"""

from __future__ import annotations

import math
from typing import Any

#: Seconds between schedule ticks (the rule's ``rate(1 minute)``).
TICK_PERIOD_SECONDS = 60.0
#: Total deadline of one create call (seconds).
CREATE_TIMEOUT_SECONDS = 60.0
#: Grace after a create's deadline before its submission is reconciled: the provider may
#: still be processing a create whose answer was lost.
RECONCILE_GRACE_SECONDS = 120.0
RECONCILE_AFTER_SECONDS = CREATE_TIMEOUT_SECONDS + RECONCILE_GRACE_SECONDS
#: A reconciliation that finds no batch looks again this long later before the submission
#: is sent again: a provider's list is eventually consistent, and a batch it has not listed
#: yet sent again would be billed twice.
UNSEEN_CONFIRM_SECONDS = 600.0
#: Allowance between the provider's ``created_at`` and this runtime's clock.
CLOCK_SKEW_SECONDS = 300.0
#: A batch this step created still open this long after its creation is canceled (the API
#: ends every batch within 24 h; this is the "stuck" case).
CANCEL_AFTER_SECONDS = 24 * 3600 + 1800.0
#: A batch the provider answers "not found" for this long (deleted by someone, or its API
#: key moved to another Workspace) is lost: its rows go back within their budget.
LOST_UNKNOWN_SECONDS = 6 * 3600.0
#: A batch still open this long after its creation (not ended, even once canceled) is lost.
LOST_OPEN_SECONDS = 36 * 3600.0
#: A lost batch is still looked at, every ``LATE_POLL_SECONDS``, while its results could be
#: read (29 days after its creation): a billed answer that arrives late is still stored.
LATE_POLL_SECONDS = 3600.0
RESULTS_KEPT_SECONDS = 29 * 86_400.0
#: A call to the provider about one batch that failed (429, 5xx, a dropped connection) is
#: tried again on that batch's own schedule: ``BACKOFF_SECONDS * 2**(failures - 1)``, at
#: most ``BACKOFF_MAX_SECONDS`` (or the provider's ``retry-after`` when longer).
BACKOFF_SECONDS = 60.0
BACKOFF_MAX_SECONDS = 1800.0
#: Times one result line may fail to apply (``on_outcome``, a hand-off, a save) before its
#: key is dead-lettered ``BatchResultUnapplied``; each try is a tick apart.
MAX_APPLY_FAILURES = 5
#: An index entry whose submission was never written is dropped this long after its id was
#: made (longer than any invocation runs).
ABANDONED_AFTER_SECONDS = 1800.0
#: Result lines read ahead of the collector, whose rows are read with one BatchGetItem.
ROWS_PAGE = 100
#: Milliseconds of the invocation kept free when collecting: stop, and resume later.
RESERVE_MILLIS = 30_000
#: The create body stays under the API's 256 MB with this margin.
MAX_CREATE_BYTES = 256 * 1024 * 1024 - 1024 * 1024
#: Megabytes of the function's memory kept for the runtime itself (Python, boto3, the SDK,
#: Powertools: about 150 MB resident) when a create body is sized.
RUNTIME_RESERVE_MB = 160
#: Bytes of create body per megabyte left: the SDK holds the body about twice while it is
#: sent (the JSON text and its encoded bytes), and a third share is margin.
CREATE_BYTES_PER_MB = 2**20 // 3
#: The least create body an invocation sends, however little memory it has.
MIN_CREATE_BYTES = 2**20
#: The most rows one submission holds: the API's most requests a batch (a submission of
#: more than ``batch_store.IDS_PER_ITEM`` keeps its custom_ids in parts).
SUBMISSION_ROWS = 100_000
#: The tick's lease (seconds) when the context has no deadline; else the invocation's
#: remaining time, so a killed tick's lease ends with it.
LEASE_SECONDS = 900.0


def create_bytes_limit(context: Any) -> int:
    """The largest create body this invocation sends: :data:`MAX_CREATE_BYTES`, or less
    when the function's memory (``context.memory_limit_in_mb``) cannot hold it while it is
    sent: ``(memory - RUNTIME_RESERVE_MB) * CREATE_BYTES_PER_MB``, at least
    :data:`MIN_CREATE_BYTES`. 512 MB sends up to 117 MB, 1,024 MB the API's whole 256 MB.
    Without a memory size (a test double), :data:`MAX_CREATE_BYTES`."""
    try:
        memory = int(getattr(context, "memory_limit_in_mb", None) or 0)
    except (TypeError, ValueError):
        memory = 0
    if memory <= 0:
        return MAX_CREATE_BYTES
    room = (memory - RUNTIME_RESERVE_MB) * CREATE_BYTES_PER_MB
    return max(MIN_CREATE_BYTES, min(MAX_CREATE_BYTES, room))


def out_of_time(context: Any) -> bool:
    """True when the invocation has less than :data:`RESERVE_MILLIS` left."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    return remaining is not None and float(remaining()) < RESERVE_MILLIS


def backoff_seconds(failures: int, retry_after: float | None = None) -> float:
    """Seconds before a batch whose provider calls failed ``failures`` times in a row is
    tried again: the provider's ``retry-after`` when it asks for longer."""
    wait = min(BACKOFF_MAX_SECONDS, BACKOFF_SECONDS * float(2 ** max(0, failures - 1)))
    return max(wait, retry_after or 0.0)


def halves(ids: list[str]) -> list[list[str]]:
    """``ids`` in two halves (the first the longer), for a create refused as a whole."""
    half = max(1, math.ceil(len(ids) / 2))
    return [part for part in (ids[:half], ids[half:]) if part]
