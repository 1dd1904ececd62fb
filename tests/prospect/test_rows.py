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


# -- issue 34: a row past its expires_at is absent, though DynamoDB has not swept it ------------
def test_an_expired_row_is_absent_to_get_and_get_many(aws):
    from .conftest import ROWS_TABLE

    client = aws.session.client("dynamodb")
    # GIVEN row 1 that expired a second ago and row 2 that expires in an hour, both still
    # in the table (moto, like DynamoDB for up to days, does not delete on time)
    now = 1_900_000_000.0
    writer = RowWriter(client, ROWS_TABLE)
    writer.add(valid_row_item("u-1", 1, VALUES, int(now) - 1))
    writer.add(valid_row_item("u-1", 2, VALUES, int(now) + 3600))
    writer.flush()
    reader = RowReader(client, ROWS_TABLE, clock=lambda: now)
    # WHEN they are read  THEN the expired one is absent to both reads, the other is there
    assert reader.get("u-1", 1) is None
    assert reader.get("u-1", 2) is not None
    assert list(reader.get_many([("u-1", 1), ("u-1", 2)])) == [("u-1", 2)]
    # and an hour later, both are gone
    later = RowReader(client, ROWS_TABLE, clock=lambda: now + 3600 + 1)
    assert later.get("u-1", 2) is None and later.get_many([("u-1", 2)]) == {}
