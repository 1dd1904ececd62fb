"""Seed data for the viewer tests."""

from __future__ import annotations

import json
from typing import Any

XSS_ROW = '<script>window.__xss = 1</script>,<img src=x onerror="window.__xss=2">,x,Acme,,,'


def model_event(upload_id: str, row_number: int) -> dict[str, Any]:
    return {
        "version": "0",
        "id": f"evt-{row_number}",
        "detail-type": "Prospect Row Validated",
        "source": "prospect-uploader",
        "account": "123456789012",
        "time": "2026-11-29T09:00:00Z",
        "region": "us-east-1",
        "resources": [],
        "detail": {"upload_id": upload_id, "row_number": row_number, "email": "a@example.com"},
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
    with table.batch_writer() as batch:
        for item in items:
            batch.put_item(Item=item)
