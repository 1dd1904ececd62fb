"""The persistence layer is a drop-in for Powertools' DynamoDBPersistenceLayer (issue 35).

It takes every constructor argument of the pinned Powertools, in the parent's order and with
its defaults, and its own releases honour them (attribute names, a sort key). Powertools'
whole idempotency suite runs against it too: scripts/powertools_idempotency_suite.py.
"""

from __future__ import annotations

import inspect

import boto3
import pytest
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
)
from botocore.config import Config
from model_step.persistence import ReleasingDynamoDBPersistenceLayer
from model_step.tracing import NO_TRACING
from moto import mock_aws

from .conftest import REGION


def test_every_parent_argument_is_accepted_in_its_place_with_its_default():
    parent = list(inspect.signature(DynamoDBPersistenceLayer.__init__).parameters.values())
    ours = list(inspect.signature(ReleasingDynamoDBPersistenceLayer.__init__).parameters.values())
    # The parent's parameters first, same names, kinds and defaults; ours only after them,
    # keyword-only, each with a default (so no caller of the parent must change).
    assert [(p.name, p.kind, p.default) for p in ours[: len(parent)]] == [
        (p.name, p.kind, p.default) for p in parent
    ]
    extra = ours[len(parent) :]
    assert [p.name for p in extra] == ["tracer"]
    assert all(p.kind is p.KEYWORD_ONLY and p.default is NO_TRACING for p in extra)


def test_powertools_positional_and_config_arguments_reach_the_parent(aws_env):
    # GIVEN the arguments Powertools' own fixtures pass (a table name, a botocore Config)
    layer = ReleasingDynamoDBPersistenceLayer("TEST_TABLE", boto_config=Config(region_name=REGION))
    # THEN the parent built its client from them, as DynamoDBPersistenceLayer would
    assert layer.table_name == "TEST_TABLE"
    assert layer.client.meta.region_name == REGION
    assert layer.key_attr == "id" and layer.sort_key_attr is None


@pytest.fixture
def sort_key_table(aws_env):
    with mock_aws():
        client = boto3.client("dynamodb", region_name=REGION)
        client.create_table(
            TableName="custom",
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client


def _custom_layer(client) -> ReleasingDynamoDBPersistenceLayer:
    layer = ReleasingDynamoDBPersistenceLayer(
        "custom",
        key_attr="pk",
        static_pk_value="idempotency#custom",
        sort_key_attr="sk",
        status_attr="state",
        in_progress_expiry_attr="lock_until",
        boto3_client=client,
    )
    layer.configure(IdempotencyConfig(event_key_jmespath="key"), key_prefix="p")
    return layer


def test_a_release_honours_custom_attribute_names_and_a_sort_key(sort_key_table):
    # GIVEN a table keyed pk + sk, and a layer with Powertools' naming arguments
    layer = _custom_layer(sort_key_table)
    data = {"key": ["upload-1", 7]}
    layer.save_inprogress(data=data, remaining_time_in_millis=30_000)
    [item] = sort_key_table.scan(TableName="custom")["Items"]
    assert item["pk"]["S"] == "idempotency#custom" and item["state"]["S"] == "INPROGRESS"
    assert "lock_until" in item
    # WHEN the function fails THEN its own lock is released under those names
    layer.delete_record(data=data, exception=RuntimeError("transient"))
    assert sort_key_table.scan(TableName="custom")["Items"] == []


def test_a_completed_record_under_custom_names_is_never_released(sort_key_table):
    # GIVEN a save that was applied (the record is COMPLETED) though the caller saw an error
    layer = _custom_layer(sort_key_table)
    data = {"key": ["upload-1", 8]}
    layer.save_inprogress(data=data, remaining_time_in_millis=30_000)
    layer.save_success(data=data, result={"label": "hot"})
    # WHEN the caller releases anyway THEN the stored outcome stays: no second bill
    layer.delete_record(data=data, exception=RuntimeError("the save's answer was lost"))
    [item] = sort_key_table.scan(TableName="custom")["Items"]
    assert item["state"]["S"] == "COMPLETED"
    assert layer.stored_result(data) == {"label": "hot"}
