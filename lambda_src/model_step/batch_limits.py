"""The times and sizes of the batch path, in one place (standard library only).

Every batch module reads these as ``batch_limits.NAME`` when it needs one, so a test (or the
local run, whose clock is compressed) can change one by setting it on this module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
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


# -- per provider ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProviderQuotas:
    """What one provider's batch API allows a batch (a Bedrock job): the fewest and most
    requests, the largest body (the create body, or Bedrock's input file), the batches in
    progress at once (None: no quota per model), and how long one stays open before the
    provider ends it (``expired``)."""

    min_requests: int
    max_requests: int
    max_bytes: int
    in_progress: int | None
    lifetime_seconds: float


#: The Claude API's Message Batches (FIELD_NOTES, "Message Batches API"): 100,000 requests or
#: 256 MB per batch, no minimum, ended within 24 h.
ANTHROPIC_QUOTAS = ProviderQuotas(
    min_requests=1,
    max_requests=100_000,
    max_bytes=256 * 1024 * 1024,
    in_progress=None,
    lifetime_seconds=24 * 3600.0,
)
#: Amazon Bedrock batch inference, the default quotas per model and region of the Service
#: Quotas console ("Amazon Bedrock" service, read 2026-12; each is adjustable there, and an
#: account's own value is refused by the service, never guessed here):
#: "Minimum number of records per batch inference job" 100, "Records per batch inference job"
#: 50,000, "Batch inference input file size" 1 GB, "Sum of in-progress and submitted batch
#: inference jobs using a base model" 20. A job's ``timeoutDurationInHours`` is 24-168
#: (``CreateModelInvocationJob`` API reference); the lifetime is the job's own.
BEDROCK_MIN_REQUESTS = 100
BEDROCK_MAX_REQUESTS = 50_000
BEDROCK_MAX_INPUT_BYTES = 1024**3
BEDROCK_JOBS_IN_PROGRESS = 20
BEDROCK_MIN_TIMEOUT_HOURS = 24
BEDROCK_MAX_TIMEOUT_HOURS = 168


def bedrock_timeout_hours(max_event_age_seconds: int) -> int:
    """The job's ``timeoutDurationInHours`` for a step's ``MAX_EVENT_AGE_SECONDS``: the age
    in whole hours, at least Bedrock's 24 (a row waits no longer in a job than Bedrock
    allows; under 24 h, as long as a Message Batch). Raises ``ValueError`` above 168 h,
    which Bedrock cannot honour (the construct refuses it at synth)."""
    hours = max(BEDROCK_MIN_TIMEOUT_HOURS, math.ceil(max_event_age_seconds / 3600))
    if hours > BEDROCK_MAX_TIMEOUT_HOURS:
        raise ValueError(
            f"a Bedrock batch job runs at most {BEDROCK_MAX_TIMEOUT_HOURS} h, and "
            f"MAX_EVENT_AGE_SECONDS={max_event_age_seconds} asks for {hours} h"
        )
    return hours


def bedrock_quotas(max_event_age_seconds: int) -> ProviderQuotas:
    """Bedrock batch inference's quotas for a step (its jobs' lifetime follows the age)."""
    return ProviderQuotas(
        min_requests=BEDROCK_MIN_REQUESTS,
        max_requests=BEDROCK_MAX_REQUESTS,
        max_bytes=BEDROCK_MAX_INPUT_BYTES,
        in_progress=BEDROCK_JOBS_IN_PROGRESS,
        lifetime_seconds=bedrock_timeout_hours(max_event_age_seconds) * 3600.0,
    )


def cancel_after(lifetime_seconds: float) -> float:
    """A batch this step created still open this long after its creation is canceled: the
    provider's own lifetime plus the half hour :data:`CANCEL_AFTER_SECONDS` allows a
    Message Batch."""
    return lifetime_seconds + (CANCEL_AFTER_SECONDS - ANTHROPIC_QUOTAS.lifetime_seconds)


def lost_open_after(lifetime_seconds: float) -> float:
    """A batch still open this long after its creation is lost: the provider's lifetime plus
    the 12 h :data:`LOST_OPEN_SECONDS` allows a Message Batch."""
    return lifetime_seconds + (LOST_OPEN_SECONDS - ANTHROPIC_QUOTAS.lifetime_seconds)
