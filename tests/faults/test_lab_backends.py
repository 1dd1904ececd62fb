"""The lab's direct moto calls (:mod:`.backends`) answer what boto3 parses from moto's answer
to the same call: a newer moto that changes either side fails here, not in a schedule."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tests.stack_tables import PROSPECT_IDEMPOTENCY_TABLE, create_stack_table

from . import backends
from .harness import TABLE

ATTRIBUTES = {
    "VisibilityTimeout": "40",
    "MessageRetentionPeriod": "345600",
    "MaximumMessageSize": "262144",
}
MESSAGE_ATTRIBUTES = {
    "ERROR_CODE": {"DataType": "String", "StringValue": "RateLimitExhausted"},
    "RAW": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
}


@pytest.fixture
def session(monkeypatch: pytest.MonkeyPatch) -> Iterator[boto3.session.Session]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield boto3.session.Session(region_name="us-east-1")


def _without(message: dict[str, Any], *names: str) -> dict[str, Any]:
    return {name: value for name, value in message.items() if name not in names}


def test_queues_messages_and_depths_match_boto3(session) -> None:
    sqs = session.client("sqs")
    dlq = sqs.create_queue(QueueName="made-by-boto3", Attributes=ATTRIBUTES)["QueueUrl"]
    url, arn = backends.create_queue("made-directly", ATTRIBUTES)
    assert url == dlq.replace("made-by-boto3", "made-directly")
    assert sqs.get_queue_url(QueueName="made-directly")["QueueUrl"] == url
    given = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert given["QueueArn"] == arn
    assert {name: given[name] for name in ATTRIBUTES} == ATTRIBUTES

    # Sent either way, received either way: the same message, as boto3 parses it.
    backends.send_message(url, "direct", MESSAGE_ATTRIBUTES)
    sqs.send_message(QueueUrl=url, MessageBody="boto3", MessageAttributes=MESSAGE_ATTRIBUTES)
    waiting = [message.id for message in backends.receivable(url)]
    [first] = backends.receive_message(url)
    [second] = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=1, AttributeNames=["All"],
        MessageAttributeNames=["All"],
    )["Messages"]  # fmt: skip
    assert (first["Body"], second["Body"]) == ("direct", "boto3")
    assert sorted(first) == sorted(second)
    assert sorted(first["Attributes"]) == sorted(second["Attributes"])
    assert first["MessageAttributes"] == second["MessageAttributes"] == MESSAGE_ATTRIBUTES
    assert first["MD5OfMessageAttributes"] == second["MD5OfMessageAttributes"]
    assert backends.queue_counts(url) == (0, 2)
    assert waiting == [first["MessageId"], second["MessageId"]]
    assert backends.receivable(url) == []

    # Back after the visibility timeout (moto reads the time itself): received by boto3.
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"],
                                  VisibilityTimeout=0)  # fmt: skip
    [again] = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=1, AttributeNames=["All"],
        MessageAttributeNames=["All"],
    )["Messages"]  # fmt: skip
    assert _without(again, "ReceiptHandle", "Attributes") == _without(
        first, "ReceiptHandle", "Attributes"
    )
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
    for name in ("SenderId", "SentTimestamp", "ApproximateFirstReceiveTimestamp"):
        assert again["Attributes"][name] == first["Attributes"][name]

    backends.delete_message(url, again["ReceiptHandle"])
    sqs.delete_message(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"])
    assert backends.receive_message(url) == []
    counts = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    assert backends.queue_counts(url) == (0, 0)
    assert counts == {
        "ApproximateNumberOfMessages": "0",
        "ApproximateNumberOfMessagesNotVisible": "0",
    }


def test_items_match_boto3(session) -> None:
    create_stack_table(session, PROSPECT_IDEMPOTENCY_TABLE, TABLE)
    dynamodb = session.client("dynamodb")
    stored = {
        "status": {"S": "COMPLETED"},
        "expiration": {"N": "1796557064"},
        "data": {"S": '{"label": "hot"}'},
        "tokens": {"M": {"in": {"N": "12"}, "kinds": {"L": [{"S": "a"}, {"BOOL": True}]}}},
    }
    for item_id in ("lab1#aaa", "lab1#aaa#budget", "lab12#aaa", "lab2#bbb"):
        dynamodb.put_item(TableName=TABLE, Item={"id": {"S": item_id}, **stored})
    read = dynamodb.get_item(TableName=TABLE, Key={"id": {"S": "lab1#aaa"}}, ConsistentRead=True)
    assert backends.get_item(TABLE, "lab1#aaa") == read["Item"]
    assert backends.get_item(TABLE, "lab1#zzz") is None
    scanned = dynamodb.scan(
        TableName=TABLE,
        FilterExpression="begins_with(id, :p)",
        ExpressionAttributeValues={":p": {"S": "lab1#"}},
    )["Items"]
    key = lambda item: item["id"]["S"]  # noqa: E731
    assert sorted(backends.items(TABLE, "lab1#"), key=key) == sorted(scanned, key=key)
