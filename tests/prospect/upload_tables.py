"""moto tables for the upload ledger, laid out as the stack creates them."""

from __future__ import annotations

from typing import Any

from tests import stack_tables
from tests.fixture_clients import fixture_table

from .conftest import create_table

UPLOADS_TABLE = "prospect-uploads"
UPLOAD_ROWS_TABLE = "prospect-upload-rows"


def create_upload_tables() -> None:
    """The uploads and upload-rows tables, through the fixtures' client (see ``conftest``)."""
    create_table(stack_tables.UPLOADS_TABLE, UPLOADS_TABLE)
    create_table(stack_tables.UPLOAD_ROWS_TABLE, UPLOAD_ROWS_TABLE)


def upload_item(upload_id: str) -> dict[str, Any] | None:
    """The upload's item, read consistently through the fixtures' ``Table`` resource."""
    table = fixture_table(UPLOADS_TABLE)
    return table.get_item(Key={"upload_id": upload_id}, ConsistentRead=True).get("Item")


def completed_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["detail-type"] == "Prospect Upload Completed"]
