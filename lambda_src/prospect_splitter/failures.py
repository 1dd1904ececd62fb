"""Writes invalid rows, whole-upload failures and the upload summary to the failures table.

Every item key is deterministic, so a retried upload overwrites rather than duplicates.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from prospect_contract.failures import KIND_SUMMARY, KIND_UPLOAD, KIND_VALIDATION
from prospect_contract.settings import positive_int

from .s3_event import UploadRef
from .validation import RowError

# A DynamoDB item holds at most 400 KB; an unattributable event is kept for diagnosis only.
ORIGINAL_EVENT_MAX_CHARS = 100_000


def utc_now() -> str:
    """ISO-8601 UTC timestamp with a ``Z`` suffix."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def expires_at() -> int:
    """TTL of a failures-table item: now + FAILURE_RETENTION_DAYS (default 90) days."""
    return int(time.time() + positive_int("FAILURE_RETENTION_DAYS", 90) * 86400)


def row_failure_id(row_number: int) -> str:
    """Sort key of a validation failure, zero-padded so rows sort numerically."""
    return f"row#{row_number:08d}"


class FailureWriter:
    """Batches row-failure puts (BatchWriteItem, 25 per call) and writes single items."""

    def __init__(self, table: Any) -> None:
        self._table = table
        self._batch: Any = None

    def __enter__(self) -> FailureWriter:
        # overwrite_by_pkeys drops an earlier put for the same key inside one batch.
        self._batch = self._table.batch_writer(overwrite_by_pkeys=["upload_id", "failure_id"])
        self._batch.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._batch.__exit__(*exc_info)
        self._batch = None

    def row_failure(self, upload_id: str, row_number: int, error: RowError) -> None:
        """Queue a kind "validation" item for one invalid row: ids, code and reason (the
        reason names fields and lengths, never a value; the row is in RowsTable)."""
        self._batch.put_item(
            Item={
                "upload_id": upload_id,
                "failure_id": row_failure_id(row_number),
                "kind": KIND_VALIDATION,
                "error_code": error.error_code,
                "reason": error.reason,
                "row_number": row_number,
                "recorded_at": utc_now(),
                "expires_at": expires_at(),
            }
        )


def put_upload_failure(
    table: Any,
    upload_id: str,
    error_code: str,
    reason: str,
    original_event: object | None = None,
) -> None:
    """Record why a whole upload was rejected (failure_id "upload", kind "upload")."""
    item: dict[str, Any] = {
        "upload_id": upload_id,
        "failure_id": "upload",
        "kind": KIND_UPLOAD,
        "error_code": error_code,
        "reason": reason,
        "recorded_at": utc_now(),
        "expires_at": expires_at(),
    }
    if original_event is not None:
        item["original_event"] = json.dumps(original_event, default=str, ensure_ascii=False)[
            :ORIGINAL_EVENT_MAX_CHARS
        ]
    table.put_item(Item=item)


def put_summary(table: Any, ref: UploadRef | None, summary: dict[str, Any]) -> None:
    """Write the upload's summary item (failure_id "summary", kind "summary")."""
    now = utc_now()
    item: dict[str, Any] = {
        "failure_id": "summary",
        "kind": KIND_SUMMARY,
        "bucket": ref.bucket if ref else "",
        "key": ref.key if ref else "",
        "created_at": now,
        "recorded_at": now,
        "expires_at": expires_at(),
        **{name: value for name, value in summary.items() if value is not None},
    }
    table.put_item(Item=item)
