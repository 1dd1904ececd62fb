"""The lab's own reads and writes, made straight on moto's in-process backends.

The step's AWS calls are real boto3 calls into moto: that is what the fault lab tests. What
the lab does for itself (Lambda's SQS poller receiving and deleting, EventBridge handing a
copy to the buffer queue, creating a schedule's queues, reading a stored record, a queue's
depth) needs no HTTP round trip through botocore and moto's dispatcher: each function here
calls the moto backend method that moto's own request handler would call with the same
parameters, and hands back what boto3 would parse from moto's answer
(``test_lab_backends.py`` compares them). A boto3 call costs about 8 ms of CPU here; the
lab made over a third of a schedule module's calls itself.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from moto.dynamodb import models as dynamodb_models
from moto.sqs import models as sqs_models

from .rows import ACCOUNT, REGION

#: What moto's SQS answers for ``AttributeNames=["All"]`` (moto's own order).
_SYSTEM_ATTRIBUTES = (
    "SenderId",
    "SentTimestamp",
    "ApproximateReceiveCount",
    "ApproximateFirstReceiveTimestamp",
)


def _sqs() -> Any:
    return sqs_models.sqs_backends[ACCOUNT][REGION]


def _queue_name(url: str) -> str:
    return url.rsplit("/", 1)[-1]


def queue_url(name: str) -> str:
    """The URL boto3's ``CreateQueue`` answers for queue ``name`` in the lab's region."""
    return f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{name}"


def create_queue(name: str, attributes: Mapping[str, str]) -> tuple[str, str]:
    """``CreateQueue`` with ``attributes`` (as boto3 takes them); the queue's URL and ARN."""
    queue = _sqs().create_queue(name, None, **attributes)
    return queue_url(name), str(queue.queue_arn)


def send_message(
    url: str, body: str, attributes: Mapping[str, Mapping[str, Any]] | None = None
) -> str:
    """``SendMessage`` of ``body`` (and message ``attributes``); the new message's id."""
    message = _sqs().send_message(_queue_name(url), body, message_attributes=dict(attributes or {}))
    return str(message.id)


def receive_message(url: str, count: int = 1) -> list[dict[str, Any]]:
    """``ReceiveMessage`` with ``AttributeNames=["All"]``, ``MessageAttributeNames=["All"]``,
    the queue's own wait time and visibility timeout: the messages as boto3 parses them."""
    name = _queue_name(url)
    backend = _sqs()
    queue = backend.get_queue(name)
    messages = backend.receive_message(
        name,
        count,
        int(queue.receive_message_wait_time_seconds or 0),
        queue.visibility_timeout,
        ["All"],
    )
    received = []
    for message in messages:
        shaped: dict[str, Any] = {
            "MessageId": message.id,
            "ReceiptHandle": message.receipt_handle,
            "MD5OfBody": message.body_md5,
            "Body": message.body,
            "Attributes": {
                "SenderId": message.sender_id,
                "SentTimestamp": str(message.sent_timestamp),
                "ApproximateReceiveCount": str(message.approximate_receive_count),
                "ApproximateFirstReceiveTimestamp": str(
                    message.approximate_first_receive_timestamp
                ),
            },
        }
        if message.deduplication_id is not None:
            shaped["Attributes"]["MessageDeduplicationId"] = message.deduplication_id
        if message.group_id is not None:
            shaped["Attributes"]["MessageGroupId"] = message.group_id
        trace = (message.system_attributes or {}).get("AWSTraceHeader")
        if trace:
            shaped["Attributes"]["AWSTraceHeader"] = trace.get("StringValue")
        if message.sequence_number is not None:
            shaped["Attributes"]["SequenceNumber"] = message.sequence_number
        if message.message_attributes:
            shaped["MD5OfMessageAttributes"] = message.attribute_md5
            shaped["MessageAttributes"] = message.message_attributes
        received.append(shaped)
    return received


def receivable(url: str) -> list[Any]:
    """moto's messages of ``url`` that receives would hand out, in the order they would:
    visible, not delayed, within the queue's retention (moto skips an older one), without
    receiving them."""
    queue = _sqs().get_queue(_queue_name(url))
    retention = float(queue.message_retention_period)
    now = sqs_models.unix_time()
    return [m for m in queue.messages if m.sent_timestamp / 1000 + retention > now]


def delete_message(url: str, receipt_handle: str) -> None:
    """``DeleteMessage``."""
    _sqs().delete_message(_queue_name(url), receipt_handle)


def queue_counts(url: str) -> tuple[int, int]:
    """``GetQueueAttributes``' ``ApproximateNumberOfMessages`` (neither in flight nor
    delayed) and ``ApproximateNumberOfMessagesNotVisible`` (in flight)."""
    queue = _sqs().get_queue(_queue_name(url))
    return (
        int(queue.approximate_number_of_messages),
        int(queue.approximate_number_of_messages_not_visible),
    )


def get_item(table: str, item_id: str) -> dict[str, Any] | None:
    """``GetItem`` of the item whose ``id`` is ``item_id``: its attributes in DynamoDB's
    JSON, as boto3's ``Item``, or None."""
    backend = dynamodb_models.dynamodb_backends[ACCOUNT][REGION]
    item = backend.get_item(table, {"id": {"S": item_id}})
    if item is None:
        return None
    attributes: dict[str, Any] = item.to_json()["Attributes"]
    return attributes


def items(table: str, id_prefix: str) -> Iterator[dict[str, Any]]:
    """Every item of ``table`` whose ``id`` begins with ``id_prefix`` (a ``Scan`` with
    ``begins_with(id, :p)``, every page), in DynamoDB's JSON."""
    found = dynamodb_models.dynamodb_backends[ACCOUNT][REGION].get_table(table)
    for entry in list(found.items.values()):
        for item in entry.values() if found.range_key_attr else (entry,):
            if str(item.hash_key.value).startswith(id_prefix):
                yield item.to_json()["Attributes"]
