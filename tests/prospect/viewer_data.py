"""Seed data for the viewer tests."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from tests import stack_tables
from tests.fixture_clients import fixture_table

from .conftest import ROWS_TABLE, create_table

XSS_ROW = '<script>window.__xss = 1</script>,<img src=x onerror="window.__xss=2">,x,Acme,,,'


UPLOADS_TABLE = "prospect-uploads"


def model_event(
    upload_id: str,
    row_number: int,
    detail_type: str = "Prospect Row Validated",
    source: str = "prospect-uploader",
) -> dict[str, Any]:
    return {
        "version": "0",
        "id": f"evt-{row_number}",
        "detail-type": detail_type,
        "source": source,
        "account": "123456789012",
        "time": "2026-11-29T09:00:00Z",
        "region": "us-east-1",
        "resources": [],
        "detail": {"upload_id": upload_id, "row_number": row_number},
    }


def seed(table: Any) -> None:
    """Upload "alpha": 2 validation failures (one XSS), 1 model failure, a summary.
    Upload "beta": 3 validation failures with formula-looking cells, a summary."""
    items: list[dict[str, Any]] = [
        {
            "upload_id": "alpha",
            "failure_id": "row#00000001",
            "kind": "validation",
            "error_code": "InvalidEmail",
            "reason": "email is not a valid address",
            "row_number": 1,
            "raw_row": XSS_ROW,
            "recorded_at": "2026-11-29T09:00:01.000Z",
        },
        {
            "upload_id": "alpha",
            "failure_id": "row#00000004",
            "kind": "validation",
            "error_code": "MissingCompany",
            "reason": "company is blank",
            "row_number": 4,
            "raw_row": "bo@example.com,Bo,Li,,CEO,US,",
            "recorded_at": "2026-11-29T09:00:02.000Z",
        },
        {
            "upload_id": "alpha",
            "failure_id": "model#00000002",
            "kind": "model",
            "error_code": "ModelTimeoutError",
            "reason": "RetriesExhausted: model timed out",
            "row_number": 2,
            "source_shape": "lambda-on-failure",
            "original_event": json.dumps(model_event("alpha", 2)),
            "raw_row": "a@example.com,,,,,,",
            "recorded_at": "2026-11-29T09:00:03.000Z",
        },
        {
            "upload_id": "alpha",
            "failure_id": "summary",
            "kind": "summary",
            "rows": 5,
            "valid": 3,
            "invalid": 2,
            "status": "completed",
        },
        {
            "upload_id": "beta",
            "failure_id": "row#00000001",
            "kind": "validation",
            "error_code": "InvalidEmail",
            "reason": '=HYPERLINK("http://evil.example")',
            "row_number": 1,
            "raw_row": "=1+2,+SUM(A1),-3,@cmd,\tTab,\rCR,ok",
            "recorded_at": "2026-11-29T09:00:04.000Z",
        },
        {
            "upload_id": "beta",
            "failure_id": "row#00000002",
            "kind": "validation",
            "error_code": "FieldTooLong",
            "reason": "notes is 1200 characters (limit 1000)",
            "row_number": 2,
            "raw_row": "x",
            "recorded_at": "2026-11-29T09:00:05.000Z",
        },
        {
            "upload_id": "beta",
            "failure_id": "row#00000003",
            "kind": "validation",
            "error_code": "MissingCompany",
            "reason": "company is blank",
            "row_number": 3,
            "raw_row": "y",
            "recorded_at": "2026-11-29T09:00:06.000Z",
        },
        {
            "upload_id": "beta",
            "failure_id": "summary",
            "kind": "summary",
            "rows": 3,
            "valid": 0,
            "invalid": 3,
            "status": "completed",
        },
    ]
    put_all(table, items)


def model_failure(upload_id: str, row_number: int, **overrides: Any) -> dict[str, Any]:
    """A kind "model" failure as the recorder files it (a retryable row by default)."""
    event = overrides.pop("event", None) or model_event(upload_id, row_number)
    item = {
        "upload_id": upload_id,
        "failure_id": f"model#{row_number:08d}",
        "kind": "model",
        "error_code": "InternalServerError",
        "reason": "RetriesExhausted: 500 from the model",
        "row_number": row_number,
        "source_shape": "lambda-on-failure",
        "original_event": json.dumps(event),
        "raw_row": f"r{row_number}@example.com,,,,,,",
        "recorded_at": "2026-11-29T10:00:00.000Z",
    }
    item.update(overrides)
    return item


def put_all(table: Any, items: list[dict[str, Any]]) -> None:
    """Put failure items as the pipeline keeps them (issue 18): an item's ``raw_row`` goes
    to RowsTable, as the splitter writes the row, and the failure item keeps ids only."""
    rows = fixture_table(ROWS_TABLE)  # one resource for the run: a new one is 10 ms of CPU
    with table.batch_writer() as batch, rows.batch_writer() as row_batch:
        for item in items:
            item = dict(item)
            raw_row = item.pop("raw_row", None)
            batch.put_item(Item=item)
            if raw_row is not None:
                row_batch.put_item(
                    Item={
                        "upload_id": item["upload_id"],
                        "row_number": item["row_number"],
                        "raw_row": raw_row,
                        "error_code": item.get("error_code", ""),
                        "expires_at": 2_000_000_000,
                    }
                )


def quote_heavy_failures(upload_id: str, count: int) -> list[dict[str, Any]]:
    """Validation failures whose cells are all double quotes: 2,000-character raw rows
    (the splitter's and recorder's cap) and 200-character reasons. CSV doubles each
    quote and JSON escapes each again, so one character costs 4 bytes as JSON text."""
    return [
        {
            "upload_id": upload_id,
            "failure_id": f"row#{n:08d}",
            "kind": "validation",
            "error_code": "InvalidEmail",
            "reason": '"' * 200,
            "row_number": n,
            "raw_row": '"' * 2000,
            "recorded_at": "2026-11-29T09:00:00.000Z",
        }
        for n in range(1, count + 1)
    ]


def create_uploads_table() -> Any:
    """The stack's UploadsTable (tests/stack_tables.py), for the viewer's uploads list."""
    return create_table(stack_tables.UPLOADS_TABLE, UPLOADS_TABLE)


def upload_item(upload_id: str, status: str, created_at: str, **counts: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "upload_id": upload_id,
        "status": status,
        "bucket": "prospect-uploads",
        "key": f"incoming/{upload_id}.csv",
        "created_at": created_at,
        "expires_at": 1_900_000_000,
        "rows": 0,
        "valid": 0,
        "invalid": 0,
        "classified": {},
        "failed": {},
        "model_requests": 0,
        "rate_limited": 0,
        "duplicates_suppressed": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "requests_saved": 0,
        "deduplicated": 0,
    }
    item.update(counts)
    return item


def seed_uploads(table: Any) -> None:
    """Uploads alpha (completed) and beta (incomplete) as in ``seed``, plus gamma
    (classifying) and a splitting one, with counts in the contract's shape."""
    put_all(
        table,
        [
            upload_item(
                "alpha", "completed", "2026-11-29T09:00:00.000Z",
                rows=5, valid=3, invalid=2, classified={"hot": 1, "warm": 1},
                failed={"ModelTimeoutError": 1}, model_requests=3, input_tokens=1234,
                output_tokens=56, completed_at="2026-11-29T09:05:00.000Z",
            ),
            upload_item(
                "beta", "incomplete", "2026-11-29T09:10:00.000Z",
                rows=3, valid=0, invalid=3, missing=0,
            ),
            upload_item(
                "gamma", "classifying", "2026-11-29T09:20:00.000Z",
                # Counted a moment ago: in progress, not stalled (issue 36).
                last_activity_at=datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                rows=40, valid=40, classified={"cold": 12}, model_requests=12,
                input_tokens=4800, output_tokens=96, cache_creation_input_tokens=6000,
                cache_read_input_tokens=66000, replayed_cache_read_input_tokens=6000,
            ),
            upload_item("delta", "splitting", "2026-11-29T09:30:00.000Z"),
        ],
    )  # fmt: skip
