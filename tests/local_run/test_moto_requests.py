"""moto answers every request the same with the local engine's request plumbing as with its
own: one script of a few hundred DynamoDB, SQS, EventBridge, S3 and Secrets Manager calls,
about a third of them rejected (bad parameters moto checks, missing tables, queues, buses,
buckets and secrets, failed conditions), gives the same status, headers and body for every
request, and each request's WSGI environ is the one werkzeug's builder writes."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSPreparedRequest
from botocore.config import Config
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.core import botocore_stubber
from moto.core import request as moto_request
from moto.moto_api._internal import mock_random

from constructs_lib.local_engine.moto_requests import install

#: Response headers that carry the clock (moto stamps each response with the time).
_CLOCK_HEADERS = {"date", "last-modified"}
#: Times in bodies: ISO and HTTP dates, and epoch seconds (moto's creation times).
_TIMES = re.compile(
    rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)?"
    rb"|\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT"
    rb"|\b1[7-9]\d{8}(\.\d+)?\b"
)
_IDS = re.compile(
    rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[A-Za-z0-9+/=]{60,}"
)


def _fast_and_original() -> tuple[Any, Any]:
    install()
    fast = moto_request.Request.__dict__["from_primitives"]
    return fast, classmethod(fast.__func__.__wrapped__)


def _comparable(response: Any) -> tuple[Any, ...]:
    status, headers, body = response
    raw = body.encode() if isinstance(body, str) else bytes(body)
    kept = sorted(
        (str(name).lower(), _mask(str(value).encode()))
        for name, value in dict(headers).items()
        if str(name).lower() not in _CLOCK_HEADERS and str(name).lower() != "x-amz-crc32"
    )
    return status, kept, _mask(raw)


def _mask(raw: bytes) -> bytes:
    return _IDS.sub(b"<id>", _TIMES.sub(b"<time>", raw))


def _stubber_pair() -> tuple[Any, Any]:
    """The installed ``process_request`` and moto's own."""
    install()
    fast = botocore_stubber.BotocoreStubber.__dict__["process_request"]
    return fast, fast.__wrapped__


def _recording(process: Any, seen: list[tuple[Any, ...]]) -> Any:
    """``process`` (a ``process_request``), keeping each response it gives in ``seen``."""

    def recorded(self: Any, request: Any) -> Any:
        response = process(self, request)
        if response is not None:
            seen.append(_comparable(response))
        return response

    return recorded


def _calls(session: boto3.session.Session) -> Iterator[Callable[[], Any]]:
    """The script: each item one call, a third of them ones moto rejects."""
    loose = Config(parameter_validation=False)
    ddb = session.client("dynamodb")
    ddb_loose = session.client("dynamodb", config=loose)
    sqs = session.client("sqs")
    events = session.client("events")
    s3 = session.client("s3")
    secrets = session.client("secretsmanager")

    yield lambda: ddb.create_table(
        TableName="rows",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    yield lambda: sqs.create_queue(QueueName="work", Attributes={"VisibilityTimeout": "30"})
    yield lambda: events.create_event_bus(Name="labels")
    yield lambda: s3.create_bucket(Bucket="uploads")
    yield lambda: secrets.create_secret(Name="api-key", SecretString="s3cr3t")
    queue = "https://sqs.us-east-1.amazonaws.com/123456789012/work"
    for n in range(40):
        key = {"id": {"S": f"row-{n % 7}"}}
        yield lambda n=n, key=key: ddb.update_item(
            TableName="rows",
            Key=key,
            UpdateExpression="ADD #n :one SET #s = :state",
            ConditionExpression="attribute_not_exists(#s) OR #s <> :done",
            ExpressionAttributeNames={"#n": "n", "#s": "state"},
            ExpressionAttributeValues={
                ":one": {"N": "1"},
                ":state": {"S": "done" if n % 5 == 0 else f"s{n}"},
                ":done": {"S": "done"},
            },
            ReturnValues="ALL_NEW",
        )
        yield lambda key=key: ddb.get_item(TableName="rows", Key=key, ConsistentRead=True)
        yield lambda n=n: ddb.put_item(
            TableName="rows",
            Item={"id": {"S": f"new-{n % 3}"}, "body": {"S": "ünïcode ✓ " * (n % 4)}},
            ConditionExpression="attribute_not_exists(id)",
        )
        yield lambda n=n: sqs.send_message(
            QueueUrl=queue, MessageBody=json.dumps({"n": n}), DelaySeconds=0
        )
        yield lambda: sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=2)
        yield lambda n=n: events.put_events(
            Entries=[
                {
                    "Source": "labels",
                    "DetailType": "Stored",
                    "Detail": json.dumps({"n": n}),
                    "EventBusName": "labels" if n % 2 else "missing-bus",
                }
            ]
        )
        if n % 4 == 0:
            yield lambda n=n: s3.put_object(Bucket="uploads", Key=f"in/{n}.csv", Body=b"a,b\n")
            yield lambda n=n: s3.get_object(Bucket="uploads", Key=f"in/{n + 1}.csv")
            yield lambda n=n: secrets.get_secret_value(SecretId="api-key" if n % 8 else "nope")
            # Rejected: a missing table, a key of the wrong type, an update to the key, a
            # malformed expression, a missing queue, a bad attribute, a missing bucket.
            yield lambda: ddb.get_item(TableName="missing", Key={"id": {"S": "x"}})
            yield lambda: ddb.get_item(TableName="rows", Key={"id": {"N": "1"}})
            yield lambda: ddb.update_item(
                TableName="rows",
                Key={"id": {"S": "row-1"}},
                UpdateExpression="SET id = :v",
                ExpressionAttributeValues={":v": {"S": "other"}},
            )
            yield lambda: ddb.update_item(
                TableName="rows",
                Key={"id": {"S": "row-1"}},
                UpdateExpression="SET #a = = :v",
                ExpressionAttributeNames={"#a": "a"},
                ExpressionAttributeValues={":v": {"S": "x"}},
            )
            yield lambda: ddb_loose.put_item(TableName="rows", Item={"id": {"S": 7}})
            yield lambda: sqs.send_message(QueueUrl=queue + "-gone", MessageBody="x")
            yield lambda: sqs.set_queue_attributes(
                QueueUrl=queue, Attributes={"VisibilityTimeout": "-5"}
            )
            yield lambda: s3.get_object(Bucket="no-such-bucket", Key="k")


def _run(
    monkeypatch: pytest.MonkeyPatch,
    from_primitives: Any,
    process_request: Any,
    seen: list[tuple[Any, ...]] | None = None,
) -> list[str]:
    """The script's outcomes (the error code of each rejected call) under ``from_primitives``
    and ``process_request``, each response kept in ``seen``. Nothing installs while it
    runs: each test takes both pairs first."""
    monkeypatch.setattr(moto_request.Request, "from_primitives", from_primitives)
    monkeypatch.setattr(
        botocore_stubber.BotocoreStubber,
        "process_request",
        _recording(process_request, [] if seen is None else seen),
    )
    mock_random.seed(35)
    outcomes: list[str] = []
    with mock_aws():
        session = boto3.session.Session(region_name="us-east-1")
        for call in _calls(session):
            try:
                call()
                outcomes.append("ok")
            except ClientError as error:
                outcomes.append(error.response["Error"]["Code"])
    return outcomes


def test_the_script_gets_the_same_responses_with_the_plumbing_as_without(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN moto's own request building and service lookup, and the local engine's
    fast, original = _fast_and_original()
    fast_lookup, moto_lookup = _stubber_pair()
    # WHEN the script runs under each
    moto_answers: list[tuple[Any, ...]] = []
    answers: list[tuple[Any, ...]] = []
    before = _run(monkeypatch, original, moto_lookup, moto_answers)
    after = _run(monkeypatch, fast, fast_lookup, answers)
    # THEN every call has the same outcome, and every response the same status, headers, body
    assert after == before
    assert answers == moto_answers
    # AND the script is a few hundred calls, a third of them rejected
    rejected = sum(outcome != "ok" for outcome in before)
    assert len(before) > 300 and 0.25 < rejected / len(before) < 0.45


def _environ(request: Any) -> list[tuple[str, Any]]:
    """The request's environ, with its body stream as (position, content) and its link
    back to the request as the request's class."""
    stream = request.environ["wsgi.input"]
    seen = {"wsgi.input": (stream.tell(), stream.getvalue()), "werkzeug.request": type(request)}
    return [(key, seen.get(key, value)) for key, value in request.environ.items()]


def test_each_request_gets_the_environ_werkzeug_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN both builders, checked side by side for every request of the script
    fast, original = _fast_and_original()
    fast_lookup, _ = _stubber_pair()
    compared: list[str] = []

    def both(cls: Any, method: str, url: str, headers: Any, body: Any = None) -> Any:
        if isinstance(body, moto_request.AwsChunkedWrapper):  # a stream: read it once for both
            body = body.read()
        expected = original.__func__(cls, method, url, headers, body)
        built = fast.__func__(cls, method, url, headers, body)
        # THEN the environ holds the same keys in the same order with the same values
        assert _environ(built) == _environ(expected)
        assert list(built.headers) == list(expected.headers)
        compared.append(method)
        return built

    # WHEN the script runs
    _run(monkeypatch, classmethod(both), fast_lookup)
    assert len(compared) > 300


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ({"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "T"}, b"{}"),
        ({"content-type": "a", "Content-Type": "b", "Content-Length": "99"}, "ünï"),
        ({"X-Amz-Meta-My_Key": "v", "x-amz-meta-my_key": "w", "Host": "other:8080"}, b"x"),
        ({"Transfer-Encoding": "chunked", "Content-Length": "x"}, b"y"),
        ({"X-Count": 3}, b"{}"),  # a value werkzeug converts
        ({"X-Bad": "a\r\nb"}, b"{}"),  # a value werkzeug refuses
        ({"Content-Type": "application/x-www-form-urlencoded"}, b""),
        ({"Content-Type": "text/plain", "Content-Length": "4"}, None),
        ({}, bytearray(b"z")),
    ],
)
@pytest.mark.parametrize(
    "url",
    [
        "https://dynamodb.us-east-1.amazonaws.com/",
        "https://uploads.s3.amazonaws.com/in/a%2Fb%20c.csv?versionId=1&x=%C3%BC",
        "http://localhost:5000/p;params?q",
        "https://s3.amazonaws.com/ünï/kéy",
    ],
)
def test_an_unusual_request_gets_what_moto_builds(url: str, headers: Any, body: Any) -> None:
    # GIVEN a request botocore would not usually send
    fast, original = _fast_and_original()
    cls = moto_request.Request

    def outcome(builder: Any) -> Any:
        try:
            return _environ(builder.__func__(cls, "PUT", url, dict(headers), body))
        except Exception as error:  # the refusal itself is compared
            return repr(error)

    # WHEN each builds it THEN both agree (or both refuse it the same way)
    assert outcome(fast) == outcome(original)


@pytest.mark.parametrize(
    "url",
    [
        "https://no-such-service.us-east-1.amazonaws.com/x",  # moto's 404
        "http://localhost:1/x",  # not AWS: passed on (None)
        "https://sqs.us-east-1.amazonaws.com/123456789012/missing?Action=GetQueueUrl",
    ],
)
def test_a_url_gets_what_moto_answers_for_it(url: str) -> None:
    # GIVEN a request for a URL no service or an unknown resource answers
    fast, moto_lookup = _stubber_pair()
    request = AWSPreparedRequest("GET", url, {}, None, stream_output=False)
    stubber = botocore_stubber.BotocoreStubber()
    # WHEN both look it up THEN both answer the same, twice (the second from the cache)
    answers = []
    with mock_aws():
        for lookup in (moto_lookup, fast, fast):
            mock_random.seed(35)  # the same request id for each
            answer = lookup(stubber, request)
            answers.append(None if answer is None else _comparable(answer))
    assert answers[1:] == answers[:1] * 2
