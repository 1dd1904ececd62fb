"""moto's DynamoDB under the local run's fixes: a cancelled transaction still rolls back
every write it made, but no longer by copying whole tables; and a read never overlaps a
write of another thread."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from constructs_lib.local_engine.moto_fixes import atomic_dynamodb_writes


@pytest.fixture
def dynamodb():
    with mock_aws(), atomic_dynamodb_writes():
        client = boto3.client("dynamodb", region_name="us-east-1")
        for name in ("rows", "totals"):
            client.create_table(
                TableName=name,
                KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )
        yield client


def test_a_cancelled_transaction_undoes_the_writes_it_made_before_the_failure(dynamodb):
    # GIVEN an existing total and a transaction whose last part fails its condition
    dynamodb.put_item(TableName="totals", Item={"id": {"S": "u"}, "n": {"N": "1"}})
    items = [
        {"Put": {"TableName": "rows", "Item": {"id": {"S": "row-1"}}}},
        {
            "Update": {
                "TableName": "totals",
                "Key": {"id": {"S": "u"}},
                "UpdateExpression": "ADD n :one",
                "ExpressionAttributeValues": {":one": {"N": "1"}},
            }
        },
        {
            "ConditionCheck": {
                "TableName": "totals",
                "Key": {"id": {"S": "absent"}},
                "ConditionExpression": "attribute_exists(id)",
            }
        },
    ]
    # WHEN it runs THEN it is cancelled, and neither the new row nor the added 1 remains
    with pytest.raises(ClientError) as raised:
        dynamodb.transact_write_items(TransactItems=items)
    assert raised.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert "Item" not in dynamodb.get_item(TableName="rows", Key={"id": {"S": "row-1"}})
    total = dynamodb.get_item(TableName="totals", Key={"id": {"S": "u"}})["Item"]
    assert total["n"] == {"N": "1"}
    # ... and a transaction that holds commits all of it
    dynamodb.transact_write_items(TransactItems=items[:2])
    assert dynamodb.get_item(TableName="totals", Key={"id": {"S": "u"}})["Item"]["n"] == {"N": "2"}


def test_a_transaction_costs_the_same_on_a_large_table(dynamodb, monkeypatch):
    # GIVEN a table of 1,000 rows beside an empty one (moto alone deep-copies every row of a
    # table a transaction names, each time: a local run of 2,000 rows took over 10 minutes)
    for n in range(1_000):
        dynamodb.put_item(TableName="rows", Item={"id": {"S": f"r{n}"}, "pad": {"S": "x" * 50}})
    # The cost is counted in the rows (moto Items) deep-copied, not timed: the same on any
    # machine, and the copies are what made a large table's transactions slow.
    from moto.dynamodb.models.dynamo_type import Item

    copied = [0]
    deepcopy_item = Item.__deepcopy__

    def counted_deepcopy(self, memo):
        copied[0] += 1
        return deepcopy_item(self, memo)

    monkeypatch.setattr(Item, "__deepcopy__", counted_deepcopy)

    def rows_copied(table: str) -> tuple[int, int]:
        """Rows copied by a transaction that puts a new row, then by one that updates it."""
        before = copied[0]
        dynamodb.transact_write_items(
            TransactItems=[{"Put": {"TableName": table, "Item": {"id": {"S": "new"}}}}]
        )
        put = copied[0] - before
        update = {
            "TableName": table,
            "Key": {"id": {"S": "new"}},
            "UpdateExpression": "ADD n :one",
            "ExpressionAttributeValues": {":one": {"N": "1"}},
        }
        dynamodb.transact_write_items(TransactItems=[{"Update": update}])
        return put, copied[0] - before - put

    # WHEN the same transactions run on each table THEN they copy as many rows on the large
    # table as on the empty one: the row they write, never the table (moto alone: 1,000+)
    small, large = rows_copied("totals"), rows_copied("rows")
    assert large == small, (small, large)
    assert dynamodb.get_item(TableName="rows", Key={"id": {"S": "new"}})["Item"]["n"] == {"N": "1"}


def test_a_read_never_overlaps_a_write_of_another_thread(dynamodb, monkeypatch):
    # GIVEN a stored item and a Query that, while it walks that item, lets another thread
    # update it (moto changes the stored item's attributes in place; the Query sizes each
    # item by walking them: "dictionary changed size during iteration", a 500 to the caller)
    import threading

    from moto.dynamodb.models.dynamo_type import Item

    dynamodb.put_item(TableName="rows", Item={"id": {"S": "row-1"}, "n": {"N": "1"}})
    order: list[str] = []
    written = threading.Event()

    def write() -> None:
        dynamodb.update_item(
            TableName="rows",
            Key={"id": {"S": "row-1"}},
            UpdateExpression="SET retried_at = :at",
            ExpressionAttributeValues={":at": {"S": "2026-12-07T00:00:00Z"}},
        )
        order.append("write")
        written.set()

    size = Item.size
    writer = threading.Thread(target=write)

    def size_during_a_write(self: Item) -> int:
        if writer.ident is None:  # the first item this Query sizes
            writer.start()
            # Time for the write to land inside this read, had it not waited for the lock.
            written.wait(timeout=1.0)
        return size(self)

    monkeypatch.setattr(Item, "size", size_during_a_write)
    # WHEN the Query runs
    page = dynamodb.query(
        TableName="rows",
        KeyConditionExpression="id = :id",
        ExpressionAttributeValues={":id": {"S": "row-1"}},
    )
    order.append("read")
    writer.join()
    # THEN the write waited for the read, as DynamoDB's reads never see a write half-applied
    assert order == ["read", "write"]
    assert page["Items"] == [{"id": {"S": "row-1"}, "n": {"N": "1"}}]
    stored = dynamodb.get_item(TableName="rows", Key={"id": {"S": "row-1"}})["Item"]
    assert stored["retried_at"] == {"S": "2026-12-07T00:00:00Z"}
