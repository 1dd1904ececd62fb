"""moto tables for the upload ledger, laid out as the stack creates them."""

from __future__ import annotations

from typing import Any

import boto3

from tests import stack_tables
from tests.stack_tables import create_stack_table

UPLOADS_TABLE = "prospect-uploads"
UPLOAD_ROWS_TABLE = "prospect-upload-rows"


def create_upload_tables(session: boto3.session.Session) -> None:
    create_stack_table(session, stack_tables.UPLOADS_TABLE, UPLOADS_TABLE)
    create_stack_table(session, stack_tables.UPLOAD_ROWS_TABLE, UPLOAD_ROWS_TABLE)


def upload_item(session: boto3.session.Session, upload_id: str) -> dict[str, Any] | None:
    table = session.resource("dynamodb").Table(UPLOADS_TABLE)
    return table.get_item(Key={"upload_id": upload_id}, ConsistentRead=True).get("Item")


def completed_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["detail-type"] == "Prospect Upload Completed"]
