"""The moto tables come from the stacks' own definitions, and moto builds them faithfully."""

from __future__ import annotations

import boto3
import pytest

from tests import stack_tables

NAMED = [
    stack_tables.MODEL_STEP_TABLE,
    stack_tables.PROSPECT_IDEMPOTENCY_TABLE,
    stack_tables.FAILURES_TABLE,
    stack_tables.PROSPECTS_TABLE,
    stack_tables.ROWS_TABLE,
    stack_tables.UPLOADS_TABLE,
    stack_tables.UPLOAD_ROWS_TABLE,
]


def test_every_named_table_is_a_table_of_its_stack():
    for path in NAMED:
        assert stack_tables.table_properties(path)["KeySchema"], path


def test_every_prospect_table_is_named_for_the_tests():
    # A table added to the stack shows up here, so its tests get it from this module too.
    assert set(stack_tables.tables("ProspectUploader")) == {p for p in NAMED if "Prospect" in p}


def test_the_request_carries_keys_indexes_and_billing_from_the_template():
    request = stack_tables.create_table_request(stack_tables.UPLOADS_TABLE, "uploads")
    assert request["KeySchema"] == [{"AttributeName": "upload_id", "KeyType": "HASH"}]
    (index,) = request["GlobalSecondaryIndexes"]
    assert index["IndexName"] == "OpenUploads"
    assert request["BillingMode"] == "PAY_PER_REQUEST"


def test_an_unknown_construct_is_named_in_the_error():
    with pytest.raises(KeyError, match="ProspectUploader/NoSuchTable"):
        stack_tables.table_properties("ProspectUploader/NoSuchTable")


@pytest.fixture
def session(monkeypatch):
    from moto import mock_aws

    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield boto3.session.Session(region_name="us-east-1")


@pytest.mark.parametrize("path", NAMED)
def test_moto_builds_each_table_as_the_template_defines_it(session, path):
    props = stack_tables.table_properties(path)
    stack_tables.create_stack_table(session, path, "t")
    client = session.client("dynamodb")
    table = client.describe_table(TableName="t")["Table"]
    assert table["KeySchema"] == props["KeySchema"]
    assert sorted(a["AttributeName"] for a in table["AttributeDefinitions"]) == sorted(
        a["AttributeName"] for a in props["AttributeDefinitions"]
    )
    indexes = {i["IndexName"]: i["KeySchema"] for i in table.get("GlobalSecondaryIndexes", [])}
    assert indexes == {
        i["IndexName"]: i["KeySchema"] for i in props.get("GlobalSecondaryIndexes", [])
    }
    ttl = client.describe_time_to_live(TableName="t")["TimeToLiveDescription"]
    expected = props.get("TimeToLiveSpecification")
    if expected:
        assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == (
            "ENABLED",
            expected["AttributeName"],
        )
    else:
        assert ttl["TimeToLiveStatus"] == "DISABLED"
