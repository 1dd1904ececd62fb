"""SQS's documented rules that moto 5.2 does not keep, kept by the lab instead.

A fake kinder than the documented API hides bugs, so the lab adds what moto lacks:

- **Message size in bytes.** SQS refuses a message whose body (UTF-8) plus its attributes'
  names, types and values exceed the queue's ``MaximumMessageSize``, with
  ``InvalidParameterValue``. moto compares the body's length in *characters*, so a body of
  150 KB of non-ASCII text, or one ASCII-escaped to three times that, passes it.
- **Retention.** SQS deletes a message ``MessageRetentionPeriod`` after it was first sent (a
  message moved to a dead-letter queue keeps its first enqueue time) and tells no one: a
  silent loss. moto skips such a message on receive but leaves it in the queue and stops
  the receive there, so the queue never drains. :func:`expire` deletes them as SQS does and
  hands them to the lab, which counts a row lost that way.

It also reads what the lab's clock needs: when the next message becomes visible, and every
body a queue still holds (in flight or delayed included).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from botocore.awsrequest import AWSResponse
from moto.sqs import models as sqs_models

ACCOUNT = "123456789012"
REGION = "us-east-1"


def moto_queue(url: str) -> Any:
    """moto's queue object behind ``url``."""
    return sqs_models.sqs_backends[ACCOUNT][REGION].queues[url.rsplit("/", 1)[-1]]


def message_bytes(body: str, attributes: Mapping[str, Mapping[str, Any]] | None) -> int:
    """A message's size as SQS counts it: the body's UTF-8 bytes plus each attribute's
    name, data type and value."""
    size = len(body.encode("utf-8"))
    for name, value in (attributes or {}).items():
        size += len(name.encode()) + len(str(value.get("DataType", "")).encode())
        raw = value.get("StringValue")
        if raw is None:
            raw = value.get("BinaryValue", b"")
        size += len(raw.encode() if isinstance(raw, str) else bytes(raw))
    return size


def refuse_oversized(params: Mapping[str, Any]) -> tuple[AWSResponse, dict[str, Any]] | None:
    """SQS's answer to a ``SendMessage`` over its queue's ``MaximumMessageSize`` (None for one
    that fits): the error SQS documents, ``InvalidParameterValue``."""
    url = str(params.get("QueueUrl", ""))
    limit = int(moto_queue(url).maximum_message_size)
    size = message_bytes(str(params.get("MessageBody", "")), params.get("MessageAttributes"))
    if size <= limit:
        return None
    message = (
        f"One or more parameters are invalid. Reason: Message must be shorter than {limit} bytes."
    )
    return AWSResponse(url, 400, {}, None), {
        "Error": {"Code": "InvalidParameterValue", "Message": message, "Type": "Sender"},
        "ResponseMetadata": {"HTTPStatusCode": 400},
    }


def expire(url: str, now: float) -> list[str]:
    """Delete every message of ``url`` past the queue's retention, as SQS does; return their
    bodies."""
    queue = moto_queue(url)
    retention = float(queue.message_retention_period)
    gone = [m for m in list(queue._messages) if m.sent_timestamp / 1000 + retention <= now]
    for message in gone:
        queue._messages.remove(message)
        queue.pending_messages.discard(message)
    return [message.body for message in gone]


def next_visible_at(urls: Iterable[str]) -> float | None:
    """The clock time the earliest message of ``urls`` becomes receivable (None: empty)."""
    moments = [
        max(message.visible_at, message.delayed_until) / 1000
        for url in urls
        for message in moto_queue(url)._messages
    ]
    return min(moments) if moments else None


def held_bodies(urls: Iterable[str]) -> list[str]:
    """The body of every message ``urls`` hold: visible, in flight or delayed."""
    return [message.body for url in urls for message in moto_queue(url)._messages]


def oldest_sent_at(urls: Iterable[str]) -> float | None:
    """When the oldest message ``urls`` hold was first sent (None: empty)."""
    sent = [message.sent_timestamp / 1000 for url in urls for message in moto_queue(url)._messages]
    return min(sent) if sent else None
