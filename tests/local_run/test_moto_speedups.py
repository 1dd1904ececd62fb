"""The local engine's caches of moto's per-request parses give moto's own answers: a repeated
expression applies to each request's values, and an expression moto rejects is rejected
every time it is sent, not only the first."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from constructs_lib.local_engine.moto_speedups import install


@pytest.fixture
def table():
    install()
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName="rows",
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client


def _add(client, key: str, amount: int, condition: str | None = None) -> None:
    extra = {"ConditionExpression": condition} if condition else {}
    client.update_item(
        TableName="rows",
        Key={"id": {"S": key}},
        UpdateExpression="ADD #n :amount SET #s = :state",
        ExpressionAttributeNames={"#n": "n", "#s": "state"},
        ExpressionAttributeValues={":amount": {"N": str(amount)}, ":state": {"S": f"s{amount}"}},
        **extra,
    )


def test_a_repeated_update_expression_applies_each_requests_values(table):
    # WHEN one expression is sent three times with different values
    for amount in (1, 2, 4):
        _add(table, "a", amount)
    # THEN each request's values were applied
    item = table.get_item(TableName="rows", Key={"id": {"S": "a"}})["Item"]
    assert item["n"] == {"N": "7"} and item["state"] == {"S": "s4"}


def test_a_repeated_condition_is_evaluated_against_each_item_and_value(table):
    # GIVEN a condition that holds for the first write only
    condition = "attribute_not_exists(#n) OR #n < :amount"
    _add(table, "b", 5, condition)
    # WHEN it is sent again with a value that now fails it THEN it is refused
    with pytest.raises(ClientError, match="ConditionalCheckFailed"):
        _add(table, "b", 3, condition)
    # AND with a value that passes it, it is applied
    _add(table, "b", 9, condition)
    item = table.get_item(TableName="rows", Key={"id": {"S": "b"}})["Item"]
    assert item["n"] == {"N": "14"}


def test_an_update_moto_rejects_is_rejected_every_time(table):
    # WHEN an expression that updates the key attribute is sent twice THEN both are refused
    for _ in range(2):
        with pytest.raises(ClientError, match="ValidationException"):
            table.update_item(
                TableName="rows",
                Key={"id": {"S": "c"}},
                UpdateExpression="SET id = :other",
                ExpressionAttributeValues={":other": {"S": "d"}},
            )
    # AND the same expression on a non-key attribute is applied
    table.update_item(
        TableName="rows",
        Key={"id": {"S": "c"}},
        UpdateExpression="SET note = :other",
        ExpressionAttributeValues={":other": {"S": "d"}},
    )


def test_installing_twice_wraps_nothing_twice():
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser

    install()
    make = UpdateExpressionParser.make
    install()
    assert UpdateExpressionParser.make is make
