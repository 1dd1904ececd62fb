"""RowsTable's writer and reader against a real botocore client, stubbed at the wire:
DynamoDB's ``UnprocessedItems`` / ``UnprocessedKeys`` (which moto never answers) are sent
again until processed, and a table that keeps refusing is an error, never a lost row."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber
from prospect_contract import rows
from prospect_contract.rows import RowReader, RowsUnprocessed, RowWriter, valid_row_item

TABLE = "rows"
VALUES = {"email": "a@example.com", "company": "Acme"}


@pytest.fixture
def dynamodb():
    client = boto3.session.Session().client(
        "dynamodb",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    monkeypatch.setattr(rows.time, "sleep", lambda seconds: None)


def _item(row_number: int) -> dict:
    return valid_row_item("u-1", row_number, VALUES, 2_000_000_000)


def _puts(*row_numbers: int) -> list[dict]:
    return [{"PutRequest": {"Item": _item(n)}} for n in row_numbers]


def test_unprocessed_items_are_written_again_until_none_is_left(dynamodb):
    client, stubber = dynamodb
    stubber.add_response(
        "batch_write_item",
        {"UnprocessedItems": {TABLE: _puts(2)}},
        {"RequestItems": {TABLE: _puts(1, 2, 3)}},
    )
    stubber.add_response(
        "batch_write_item", {"UnprocessedItems": {}}, {"RequestItems": {TABLE: _puts(2)}}
    )
    writer = RowWriter(client, TABLE)
    for n in (1, 2, 3):
        writer.add(_item(n))

    writer.flush()

    assert len(writer) == 0


def test_a_table_that_keeps_items_unprocessed_raises(dynamodb):
    client, stubber = dynamodb
    for _ in range(rows.MAX_UNPROCESSED_ROUNDS):
        stubber.add_response("batch_write_item", {"UnprocessedItems": {TABLE: _puts(1)}})
    writer = RowWriter(client, TABLE)
    writer.add(_item(1))

    with pytest.raises(RowsUnprocessed, match="1 row item"):
        writer.flush()


def test_unprocessed_keys_are_read_again_and_every_found_row_is_returned(dynamodb):
    client, stubber = dynamodb
    key = {"upload_id": {"S": "u-1"}, "row_number": {"N": "2"}}
    stubber.add_response(
        "batch_get_item",
        {"Responses": {TABLE: [_item(1)]}, "UnprocessedKeys": {TABLE: {"Keys": [key]}}},
    )
    stubber.add_response(
        "batch_get_item",
        {"Responses": {TABLE: [_item(2)]}},
        {"RequestItems": {TABLE: {"Keys": [key], "ConsistentRead": True}}},
    )

    found = RowReader(client, TABLE).get_many([("u-1", 1), ("u-1", 2), ("u-1", 3)])

    assert sorted(found) == [("u-1", 1), ("u-1", 2)]
