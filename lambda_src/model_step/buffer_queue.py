"""The buffer-queue (SQS) path: records, wait times and the SQS calls the runtime makes.

On this path the runtime owns retry timing. A rate-limit answer (429/529) re-enqueues a
delayed copy and is no attempt; a concurrent duplicate re-enqueues to wait for the holder; any
other transient failure is reported as a batch item failure, spaced by a visibility change,
and its retry spends the key's budget (see :mod:`.budget`), never a count of this message.
Records from the step's redrive queue (rows SQS gave up on after ``maxReceiveCount``
receives) are told apart by ``eventSourceARN``.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import json
import logging
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .dead_letter import MAX_MESSAGE_BYTES, json_body
from .errors import ConfigurationError
from .key import json_number
from .lifetime import FIRST_SEEN_FIELD

logger = logging.getLogger(__name__)

#: SQS ``DelaySeconds`` upper bound.
MAX_DELAY_SECONDS = 900
#: Wait of a concurrent duplicate when the holder's in-progress expiry cannot be read.
IN_PROGRESS_DEFAULT_WAIT_SECONDS = 30
#: Visibility timeout per spent attempt before a transient retry (Lambda async's 1 min /
#: 2 min spacing).
RETRY_SPACING_SECONDS = 60
#: Backoff of a rate-limit answer without retry-after: BASE x 2^waits, capped, with jitter.
BACKOFF_BASE_SECONDS = 5.0
#: SQS's ``ChangeMessageVisibility`` upper bound (12 hours).
MAX_VISIBILITY_SECONDS = 43_200

Source = Literal["buffer", "redrive"]


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


@dataclass(frozen=True)
class QueueDelivery:
    """One SQS record carrying an EventBridge event."""

    message_id: str
    receipt_handle: str
    event_source_arn: str
    receive_count: int
    source: Source

    @classmethod
    def from_record(cls, record: Mapping[str, Any], redrive_queue_arn: str | None) -> QueueDelivery:
        attributes = record.get("attributes") or {}
        arn = str(record.get("eventSourceARN", ""))
        return cls(
            message_id=str(record.get("messageId", "")),
            receipt_handle=str(record.get("receiptHandle", "")),
            event_source_arn=arn,
            receive_count=max(1, _int(attributes.get("ApproximateReceiveCount"), 1)),
            source="redrive" if redrive_queue_arn and arn == redrive_queue_arn else "buffer",
        )


def parse_body(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """The EventBridge event in a record's body, or None if it is not a JSON object. Numbers
    keep their exact value (:func:`.key.json_number`): ``9007199254740993.0`` is read as the
    integer it is, not rounded to a float first."""
    try:
        event = json.loads(record.get("body") or "", parse_float=json_number)
    except (TypeError, ValueError):
        return None
    return event if isinstance(event, dict) else None


def retry_after_seconds(exc: BaseException) -> float | None:
    """``retry-after-ms`` (milliseconds) or ``retry-after`` (seconds or an HTTP date) of an
    SDK status error, as the SDK reads them; None when absent or unparseable."""
    headers: Mapping[str, str] | None = getattr(getattr(exc, "response", None), "headers", None)
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
        return max(0.0, float(str(raw)))
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
    ceiling = min(float(MAX_DELAY_SECONDS), BACKOFF_BASE_SECONDS * 2.0 ** min(waits_so_far, 10))
    factor = rng.uniform(0.5, 1.0) if rng is not None else random.uniform(0.5, 1.0)
    return ceiling * factor


def delay_seconds(wait: float) -> int:
    """An SQS ``DelaySeconds`` for ``wait`` seconds: rounded up, 0-900."""
    return max(0, min(MAX_DELAY_SECONDS, math.ceil(wait)))


def queue_url_from_arn(arn: str) -> tuple[str, str] | None:
    """``arn:aws:sqs:REGION:ACCOUNT:NAME`` -> (NAME, ACCOUNT)."""
    parts = arn.split(":")
    if len(parts) != 6 or parts[2] != "sqs":
        return None
    return parts[5], parts[4]


class BufferQueue:
    """The SQS calls of the buffer path: re-enqueue a delayed copy, space a retry."""

    def __init__(self, configured_url: str | None, sqs_client: Callable[[], Any]) -> None:
        self._configured_url = configured_url
        self._sqs_client = sqs_client

    def requeue(
        self,
        event: Mapping[str, Any],
        queue: QueueDelivery,
        wait: float,
        stamp: Mapping[str, Any] | None = None,
    ) -> None:
        """A copy of ``event`` on the buffer queue, visible after ``wait`` seconds (at most
        15 minutes). It carries nothing of this message (the key's budget is on the key),
        only, when ``stamp`` is given, the key's first-seen time (:mod:`.lifetime`), left
        out of a copy it would take past the size every queue accepts (the key's budget
        item has the time too). The body is UTF-8 JSON, as the event came: escaped ASCII
        would make a non-ASCII row up to twice as large as the message it came in."""
        document = {name: value for name, value in event.items() if name != FIRST_SEEN_FIELD}
        body = json_body(document)
        if stamp is not None:
            stamped = json_body({**document, FIRST_SEEN_FIELD: dict(stamp)})
            body = stamped if len(stamped.encode()) <= MAX_MESSAGE_BYTES else body
        self._sqs_client().send_message(
            QueueUrl=self._url(queue), MessageBody=body, DelaySeconds=delay_seconds(wait)
        )

    def space_retry(self, queue: QueueDelivery, attempts_spent: int) -> None:
        """Space the next transient retry of a buffered row like Lambda async (1 min, then
        2 min). Best effort: if it fails, the queue's visibility timeout applies."""
        self.hold(queue, RETRY_SPACING_SECONDS * max(1, attempts_spent))

    def hold(self, queue: QueueDelivery, seconds: int) -> None:
        """Keep a buffered record invisible ``seconds`` (at most 12 hours) before its next
        receive. Best effort: if it fails, the queue's visibility timeout applies."""
        try:
            self._sqs_client().change_message_visibility(
                QueueUrl=self._url(queue),
                ReceiptHandle=queue.receipt_handle,
                VisibilityTimeout=min(MAX_VISIBILITY_SECONDS, seconds),
            )
        except Exception:
            logger.exception("could not delay the retry")

    def _url(self, queue: QueueDelivery) -> str:
        if self._configured_url:
            return self._configured_url
        if queue.source == "redrive":
            # The record's own queue is the redrive queue: a row goes back to the BUFFER.
            raise ConfigurationError("BUFFER_QUEUE_URL is required with REDRIVE_QUEUE_ARN")
        return self._url_of(queue.event_source_arn)

    def _url_of(self, arn: str) -> str:
        parsed = queue_url_from_arn(arn)
        if parsed is None:
            raise RuntimeError(f"cannot find the queue of record source {arn!r}")
        name, account = parsed
        url: str = self._sqs_client().get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)[
            "QueueUrl"
        ]
        return url


def _int(raw: Any, default: int) -> int:
    try:
        return int(str(raw).strip())
    except (TypeError, ValueError):
        return default
