"""Emulation of an SQS event source mapping: poll, invoke synchronously, delete.

As Lambda's poller does: receive up to ``BatchSize`` messages, invoke the function with an
SQS event, and delete the messages the function took. With ``ReportBatchItemFailures`` the
ones listed in ``batchItemFailures`` stay on the queue; without it, or when the function
raises, the whole batch stays. A message that stays is not redelivered within the run (it
stays invisible for the visibility timeout); it is counted in ``DrainResult.left``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .assembly import EventSourceMappingSpec
from .intrinsics import LOCAL_REGION

# Long enough that a message the function failed on is not received again during the drain.
VISIBILITY_TIMEOUT_SECONDS = 300


@dataclass
class DrainResult:
    """Counts of one drain: batches invoked, messages received, deleted and left."""

    batches: int = 0
    received: int = 0
    deleted: int = 0
    left: int = 0
    errors: list[str] = field(default_factory=list)


def lambda_sqs_record(message: dict[str, Any], queue_arn: str) -> dict[str, Any]:
    """One record of the SQS event Lambda sends, built from a ReceiveMessage entry."""
    attributes = {
        name: {
            "stringValue": value.get("StringValue"),
            "binaryValue": value.get("BinaryValue"),
            "stringListValues": [],
            "binaryListValues": [],
            "dataType": value.get("DataType", "String"),
        }
        for name, value in (message.get("MessageAttributes") or {}).items()
    }
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message.get("Body", ""),
        "attributes": dict(message.get("Attributes") or {}),
        "messageAttributes": attributes,
        "md5OfBody": message.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": LOCAL_REGION,
    }


def drain_queue(
    sqs: Any,
    queue_url: str,
    queue_arn: str,
    mapping: EventSourceMappingSpec,
    invoke: Callable[[dict[str, Any]], Any],
) -> DrainResult:
    """Feed every visible message of the queue to ``invoke(event)`` in batches."""
    result = DrainResult()
    while True:
        messages = sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=min(10, mapping.batch_size),
            MessageAttributeNames=["All"],
            AttributeNames=["All"],
            VisibilityTimeout=VISIBILITY_TIMEOUT_SECONDS,
            WaitTimeSeconds=0,
        ).get("Messages", [])
        if not messages:
            return result
        result.batches += 1
        result.received += len(messages)
        records = [lambda_sqs_record(message, queue_arn) for message in messages]
        try:
            response = invoke({"Records": records})
        except Exception as exc:  # A function error: Lambda leaves the whole batch.
            result.errors.append(f"{type(exc).__name__}: {exc}")
            result.left += len(messages)
            continue
        failed: set[str] = set()
        if mapping.report_batch_item_failures and isinstance(response, dict):
            failed = {
                str(item.get("itemIdentifier"))
                for item in response.get("batchItemFailures") or []
                if isinstance(item, dict)
            }
        done = [m for m in messages if m["MessageId"] not in failed]
        if done:
            sqs.delete_message_batch(
                QueueUrl=queue_url,
                Entries=[
                    {"Id": str(index), "ReceiptHandle": m["ReceiptHandle"]}
                    for index, m in enumerate(done)
                ],
            )
        result.deleted += len(done)
        result.left += len(messages) - len(done)
