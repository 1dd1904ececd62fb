"""How long a step must remember a key: the one lifetime rule of both delivery paths.

What the step remembers about a record key (its attempt budget and first-seen time, its
stored outcome, its dead-letter and result-event hand-offs, a row waiting in a batch) must
outlive every way a copy of the key can still come back:

- EventBridge retries the hand-off to the buffer queue for up to ``max_event_age`` after the
  event, and the runtime waits out rate limits and puts back rows the buffer queue gave up on
  for up to ``max_event_age`` after it first saw the row;
- a copy then waits in the buffer or redrive queue for up to the queue's retention (a mapping
  an operator paused, a concurrency cap, a throttled function), every re-enqueued copy with a
  retention of its own;
- on the direct path (no buffer queue) Lambda's async queue holds an event up to 6 hours;
- under batch delivery a staged row waits for its Message Batch: submitted within
  ``BATCH_MAX_WAIT_SECONDS``, ended by the API within 24 h, a stuck batch canceled at 24.5 h,
  then collected (:data:`BATCH_HORIZON_SECONDS`).

So the key's memory lifetime (``IDEMPOTENCY_EXPIRES_AFTER_SECONDS``) is at least
:func:`minimum_key_lifetime`: ``max_event_age`` plus the longest of those holds, plus
:data:`LIFETIME_MARGIN_SECONDS`. ``IdempotentModelStep`` derives it from its own template
(``max_event_age``, ``queue_retention``, ``delivery``) and refuses an ``expires_after`` below
it at synth, naming the props. The runtime checks what it can see itself (``max_event_age``
and the delivery) when it reads its settings.

Every write to a key's budget item sets its expiry to the lifetime after that write, and the
stored outcome expires the lifetime after it is saved, which comes after the budget's last
write: a key's outcome is never forgotten while its budget is remembered. A copy of a key
that the runtime re-enqueues carries the key's first-seen time (:data:`FIRST_SEEN_FIELD`),
so its first-seen time never resets, and a copy that comes back after the key's memory is
gone is refused as a coded dead letter (:data:`MEMORY_EXPIRED`), never billed again.

Standard library only: the construct loads this file by its path, as it loads
``environment.py``.

Example::

    minimum_key_lifetime(max_event_age=86_400, queue_retention=14 * 86_400)  # 1_299_600
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

#: Slack on top of every lifetime: the last invocation's timeout, a schedule tick, clock skew
#: between the Lambda fleet and DynamoDB's TTL.
LIFETIME_MARGIN_SECONDS: Final = 3_600
#: The longest Lambda's asynchronous queue holds an event (EventInvokeConfig's maximum): the
#: direct path's own hold.
LAMBDA_ASYNC_MAX_EVENT_AGE_SECONDS: Final = 21_600
#: SQS's longest retention, the buffer and redrive queues' default.
MAX_QUEUE_RETENTION_SECONDS: Final = 14 * 86_400
#: The longest a staged row waits for its Message Batch after its last (re)submission: up to
#: an hour before it is submitted (``BATCH_MAX_WAIT_SECONDS``), 24 h until the API ends the
#: batch (a stuck one is canceled at 24.5 h and ends ``canceled``), and a day to collect it
#: (results read with retries, a batch the API no longer knows waited for before its rows
#: go back).
BATCH_HORIZON_SECONDS: Final = 2 * 86_400 + 3_600
#: How long a Message Batch stays open: the lifetime :data:`BATCH_HORIZON_SECONDS` allows.
BATCH_LIFETIME_SECONDS: Final = 86_400
#: Top-level member of an event the runtime re-enqueues on its buffer queue:
#: ``{"first_seen": <epoch seconds>, "record": <the key's record id hash>}``.
FIRST_SEEN_FIELD: Final = "model_step_key"
#: Error code of a copy that came back after its key's memory expired.
MEMORY_EXPIRED: Final = "KeyMemoryExpired"


def minimum_key_lifetime(
    *,
    max_event_age: int,
    queue_retention: int,
    batch: bool = False,
    batch_lifetime: int = BATCH_LIFETIME_SECONDS,
) -> int:
    """The shortest memory (seconds) that outlives every path that can bring a key back:
    ``max_event_age`` + the longest hold (``queue_retention``, Lambda async's 6 h, and with
    ``batch`` the batch's hold, :func:`batch_horizon`) + :data:`LIFETIME_MARGIN_SECONDS`."""
    hold = max(queue_retention, LAMBDA_ASYNC_MAX_EVENT_AGE_SECONDS)
    if batch:
        hold = max(hold, batch_horizon(batch_lifetime))
    return max_event_age + hold + LIFETIME_MARGIN_SECONDS


def batch_horizon(batch_lifetime: int = BATCH_LIFETIME_SECONDS) -> int:
    """:data:`BATCH_HORIZON_SECONDS` for a provider whose batches stay open
    ``batch_lifetime`` seconds (a Bedrock job's ``timeoutDurationInHours``, 24-168 h)
    instead of a Message Batch's 24 h."""
    return BATCH_HORIZON_SECONDS + max(0, batch_lifetime - BATCH_LIFETIME_SECONDS)


def runtime_minimum(
    *, max_event_age: int, batch: bool, batch_lifetime: int = BATCH_LIFETIME_SECONDS
) -> int:
    """The part of :func:`minimum_key_lifetime` the runtime can check on its own (it does not
    know its queues' retention): ``max_event_age`` + the direct path's or the batch's hold +
    the margin."""
    return minimum_key_lifetime(
        max_event_age=max_event_age, queue_retention=0, batch=batch, batch_lifetime=batch_lifetime
    )


def stamp(first_seen: float, record: str) -> dict[str, Any]:
    """The :data:`FIRST_SEEN_FIELD` value a re-enqueued copy of ``record``'s key carries."""
    return {"first_seen": round(first_seen, 3), "record": record}


def stamped_first_seen(event: Mapping[str, Any], record: str) -> float | None:
    """The first-seen time a copy of ``record``'s key carries, or None (no stamp, a stamp of
    another key, e.g. an operator's redrive of a dead letter, or a malformed one)."""
    value = event.get(FIRST_SEEN_FIELD)
    if not isinstance(value, Mapping) or value.get("record") != record:
        return None
    first_seen = value.get("first_seen")
    if isinstance(first_seen, bool) or not isinstance(first_seen, int | float):
        return None
    return float(first_seen)
