"""moto's DynamoDB under the local run's fixes: a cancelled transaction still rolls back
every write it made, but no longer by copying whole tables."""

from __future__ import annotations

import time

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


def test_a_transaction_costs_the_same_on_a_large_table(dynamodb):
    # GIVEN a table of 1,000 rows beside an empty one (moto alone deep-copies every row of a
    # table a transaction names, each time)
    for n in range(1_000):
        dynamodb.put_item(TableName="rows", Item={"id": {"S": f"r{n}"}, "pad": {"S": "x" * 50}})

    def median_transaction(table: str) -> float:
        times = []
        for n in range(15):
            started = time.perf_counter()
            dynamodb.transact_write_items(
                TransactItems=[{"Put": {"TableName": table, "Item": {"id": {"S": f"new{n}"}}}}]
            )
            times.append(time.perf_counter() - started)
        return sorted(times)[len(times) // 2]

    # THEN a transaction on it costs about what one on the empty table does
    small, large = median_transaction("totals"), median_transaction("rows")
    assert large < 3 * small + 0.005, (small, large)
