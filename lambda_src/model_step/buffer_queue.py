"""The buffer-queue (SQS) path: shape detection, attempt accounting and wait times.

On this path the runtime owns retry timing (contract: rate-limit answers wait and are no
attempt; other transient failures use ``MAX_ATTEMPTS``; concurrent duplicates wait for the
holder). Everything here is pure arithmetic over the SQS record and the SDK error; the
runtime does the SQS calls.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import json
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: SQS ``DelaySeconds`` upper bound.
MAX_DELAY_SECONDS = 900
#: Message attribute: transient attempts used before this message was (re-)enqueued.
ATTEMPTS_ATTRIBUTE = "attempts"
#: Message attribute: rate-limit waits so far (drives the backoff when no retry-after is sent).
RATE_LIMITED_ATTRIBUTE = "rate_limited"
#: Wait of a concurrent duplicate when the holder's in-progress expiry cannot be read.
IN_PROGRESS_DEFAULT_WAIT_SECONDS = 30
#: Visibility timeout per attempt before a transient retry (Lambda async's 1 min / 2 min).
RETRY_SPACING_SECONDS = 60
#: Backoff of a rate-limit answer without retry-after: BASE x 2^waits, capped, with jitter.
BACKOFF_BASE_SECONDS = 5.0


def is_sqs_batch(event: Any) -> bool:
    """True for ``{"Records": [{"eventSource": "aws:sqs", ...}, ...]}``; a bare EventBridge
    event has ``detail`` / ``detail-type`` and no ``Records``."""
    if not isinstance(event, Mapping) or "detail-type" in event:
        return False
    records = event.get("Records")
    return (
        isinstance(records, list)
        and bool(records)
        and all(isinstance(r, Mapping) and r.get("eventSource") == "aws:sqs" for r in records)
    )


@dataclass
class QueueDelivery:
    """One SQS record carrying an EventBridge event."""

    message_id: str
    receipt_handle: str
    event_source_arn: str
    attempts_before: int
    receive_count: int
    rate_limited_before: int
    event_age_seconds: float

    @property
    def attempt(self) -> int:
        """This delivery's transient attempt number if it fails: earlier attempts (carried by
        re-enqueued copies) plus this message's receives."""
        return self.attempts_before + self.receive_count

    @property
    def attempts_used(self) -> int:
        """Attempts used before this receive (what a re-enqueued copy carries on)."""
        return self.attempts_before + self.receive_count - 1

    @classmethod
    def from_record(
        cls, record: Mapping[str, Any], event: Mapping[str, Any], now: dt.datetime
    ) -> QueueDelivery:
        attributes = record.get("attributes") or {}
        return cls(
            message_id=str(record.get("messageId", "")),
            receipt_handle=str(record.get("receiptHandle", "")),
            event_source_arn=str(record.get("eventSourceARN", "")),
            attempts_before=_int_attribute(record, ATTEMPTS_ATTRIBUTE),
            receive_count=max(1, _int(attributes.get("ApproximateReceiveCount"), 1)),
            rate_limited_before=_int_attribute(record, RATE_LIMITED_ATTRIBUTE),
            event_age_seconds=event_age_seconds(event, attributes, now),
        )


def parse_body(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """The EventBridge event in a record's body, or None if it is not a JSON object."""
    try:
        event = json.loads(record.get("body") or "")
    except (TypeError, ValueError):
        return None
    return event if isinstance(event, dict) else None


def event_age_seconds(
    event: Mapping[str, Any], attributes: Mapping[str, Any], now: dt.datetime
) -> float:
    """now - ``event["time"]``; falls back to the message's ``SentTimestamp`` when the event
    has no parseable time (never negative)."""
    raw = event.get("time")
    if isinstance(raw, str) and raw.strip():
        try:
            when = dt.datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
            if when.tzinfo is None:
                when = when.replace(tzinfo=dt.UTC)
            return max(0.0, (now - when).total_seconds())
        except ValueError:
            pass
    sent = _int(attributes.get("SentTimestamp"), 0)
    if sent:
        return max(0.0, now.timestamp() - sent / 1000)
    return 0.0


def retry_after_seconds(exc: BaseException) -> float | None:
    """``retry-after-ms`` (milliseconds) or ``retry-after`` (seconds or an HTTP date) of an
    SDK status error, as the SDK reads them; None when absent or unparseable."""
    headers: Any = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return max(0.0, (when - dt.datetime.now(dt.UTC)).total_seconds())


def backoff_seconds(waits_so_far: int, rng: random.Random | None = None) -> float:
    """Exponential backoff with jitter for a rate-limit answer without retry-after:
    ``BASE x 2^waits`` capped at 900 s, then scaled by a random factor in [0.5, 1]."""
    ceiling = min(float(MAX_DELAY_SECONDS), BACKOFF_BASE_SECONDS * 2 ** min(waits_so_far, 10))
    return ceiling * (rng or random).uniform(0.5, 1.0)


def delay_seconds(wait: float) -> int:
    """An SQS ``DelaySeconds`` for ``wait`` seconds: rounded up, 0-900."""
    return max(0, min(MAX_DELAY_SECONDS, math.ceil(wait)))


def queue_url_from_arn(arn: str) -> tuple[str, str] | None:
    """``arn:aws:sqs:REGION:ACCOUNT:NAME`` -> (NAME, ACCOUNT)."""
    parts = arn.split(":")
    if len(parts) != 6 or parts[2] != "sqs":
        return None
    return parts[5], parts[4]


def _int_attribute(record: Mapping[str, Any], name: str) -> int:
    attribute = (record.get("messageAttributes") or {}).get(name) or {}
    return max(0, _int(attribute.get("stringValue"), 0))


def _int(raw: Any, default: int) -> int:
    try:
        return int(str(raw).strip())
    except (TypeError, ValueError):
        return default
