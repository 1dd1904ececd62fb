"""Lambda entry point: ``failure_recorder.handler.handler``.

SQS event source mapping on the model step's dead-letter queue, with
``ReportBatchItemFailures`` enabled. Environment: FAILURES_TABLE_NAME (required).
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

import boto3

from .shapes import normalise
from .store import upsert_failure

logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)


def record_batch(records: list[dict[str, Any]], table: Any) -> dict[str, list[dict[str, str]]]:
    """Store every record; return the SQS partial-batch response.

    Only records whose write failed are listed, so SQS redelivers exactly those and a
    record is never acknowledged before it is stored.
    """
    failures: list[dict[str, str]] = []
    for record in records:
        message_id = str(record.get("messageId", ""))
        try:
            upsert_failure(table, normalise(record))
        except Exception:  # Any failure, of any type, must leave this message on the queue.
            logger.exception("could not store dead letter %s", message_id)
            failures.append({"itemIdentifier": message_id})
    return {"batchItemFailures": failures}


@functools.lru_cache(maxsize=4)
def _table(table_name: str) -> Any:
    # One client per execution environment, not per invocation.
    return boto3.resource("dynamodb").Table(table_name)


def handler(event: dict[str, Any], context: object) -> dict[str, list[dict[str, str]]]:
    """Record each dead-lettered message; report the ones that could not be stored."""
    return record_batch(event.get("Records", []), _table(os.environ["FAILURES_TABLE_NAME"]))
