"""Lambda entry point: ``failure_recorder.handler.handler``.

SQS event source mapping on the pipeline's dead-letter queue, with
``ReportBatchItemFailures`` enabled. Environment: FAILURES_TABLE_NAME (required),
FAILURE_RETENTION_DAYS [90] (TTL ``expires_at`` of each item), and the upload ledger's
settings (``upload_accounting.LedgerSettings``; without UPLOADS_TABLE_NAME no upload is
accounted).
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

import boto3
from prospect_contract.settings import positive_int, required
from upload_accounting import LedgerSettings, UploadLedger

from .shapes import SHAPE_MODEL_STEP, normalise, replay_generation_of, row_attribution
from .store import append_attempt, upsert_failure

logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)

DEFAULT_RETENTION_DAYS = 90


def record_batch(
    records: list[dict[str, Any]],
    table: Any,
    *,
    ledger: UploadLedger | None = None,
    retention_days: int = DEFAULT_RETENTION_DAYS,
    clock: Any = time.time,
) -> dict[str, list[dict[str, str]]]:
    """Store every record, count each row failure on its upload; return the SQS
    partial-batch response.

    A row's failure also gets this attempt appended to its history (``attempts``: code,
    generation, attempt, time and request id), once per dead letter.

    Only records whose write failed are listed, so SQS redelivers exactly those and a
    record is never acknowledged before it is stored and counted. Both writes converge
    on a redelivery: the item is upserted, and the ledger counts a row once.
    """
    failures: list[dict[str, str]] = []
    for record in records:
        message_id = str(record.get("messageId", ""))
        try:
            item = normalise(record)
            item["expires_at"] = int(clock() + retention_days * 86400)
            upsert_failure(table, item)
            row = row_attribution(item)
            if row is not None:
                # The row's history: each failed attempt once, the retries' included.
                append_attempt(table, item, replay_generation_of(item))
            if ledger is not None and row is not None:
                # The model step's own dead letter: the step reports the row with its key's
                # billed totals, and that report closes the upload (its summary is whole).
                ledger.row_failed(
                    row[0],
                    row[1],
                    str(item["error_code"]),
                    step_reports=item.get("source_shape") == SHAPE_MODEL_STEP,
                )
        except Exception:  # Any failure, of any type, must leave this message on the queue.
            logger.exception("could not store dead letter %s", message_id)
            failures.append({"itemIdentifier": message_id})
    return {"batchItemFailures": failures}


@functools.lru_cache(maxsize=4)
def _table(table_name: str) -> Any:
    # One client per execution environment, not per invocation.
    return boto3.resource("dynamodb").Table(table_name)


@functools.lru_cache(maxsize=1)
def _ledger() -> UploadLedger | None:
    return UploadLedger.from_environment() if LedgerSettings.configured() else None


def _retention_days() -> int:
    return positive_int("FAILURE_RETENTION_DAYS", DEFAULT_RETENTION_DAYS)


def handler(event: dict[str, Any], context: object) -> dict[str, list[dict[str, str]]]:
    """Record each dead-lettered message; report the ones that could not be stored."""
    return record_batch(
        event.get("Records", []),
        _table(required("FAILURES_TABLE_NAME")),
        ledger=_ledger(),
        retention_days=_retention_days(),
    )
