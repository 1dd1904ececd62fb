"""moto tables for the upload ledger, laid out as the stack creates them."""

from __future__ import annotations

from typing import Any

import boto3

UPLOADS_TABLE = "prospect-uploads"
UPLOAD_ROWS_TABLE = "prospect-upload-rows"


def create_upload_tables(session: boto3.session.Session) -> None:
    ddb = session.client("dynamodb")
    ddb.create_table(
        TableName=UPLOADS_TABLE,
        KeySchema=[{"AttributeName": "upload_id", "KeyType": "HASH"}],
        AttributeDefinitions=[
            {"AttributeName": "upload_id", "AttributeType": "S"},
            {"AttributeName": "sweep_shard", "AttributeType": "S"},
            {"AttributeName": "sweep_after", "AttributeType": "N"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "OpenUploads",
                "KeySchema": [
                    {"AttributeName": "sweep_shard", "KeyType": "HASH"},
                    {"AttributeName": "sweep_after", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.create_table(
        TableName=UPLOAD_ROWS_TABLE,
        KeySchema=[
            {"AttributeName": "upload_id", "KeyType": "HASH"},
            {"AttributeName": "row_number", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "upload_id", "AttributeType": "S"},
            {"AttributeName": "row_number", "AttributeType": "N"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )


def upload_item(session: boto3.session.Session, upload_id: str) -> dict[str, Any] | None:
    table = session.resource("dynamodb").Table(UPLOADS_TABLE)
    return table.get_item(Key={"upload_id": upload_id}, ConsistentRead=True).get("Item")


def completed_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["detail-type"] == "Prospect Upload Completed"]
