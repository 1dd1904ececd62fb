"""Fixtures for the Prospect Uploader runtime tests: moto resources and event helpers.

Everything runs in-process against moto; nothing leaves the machine.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from botocore.config import Config

from constructs_lib.local_engine.moto_fixes import atomic_dynamodb_writes
from tests import moto_per_module, stack_tables
from tests.fixture_clients import (
    fixture_client,
    fixture_table,
    fresh_moto_account,
    restored,
    unsigned_moto_requests,
)

REGION = "us-east-1"
BUCKET = "prospect-uploads"
FAILURES_TABLE = "prospect-failures"
ROWS_TABLE = "prospect-rows"
IDEMPOTENCY_TABLE = "prospect-idempotency"
BUS = "prospect-bus"
HEADER = "email,first_name,last_name,company,title,country,notes"


@dataclass
class FakeLambdaContext:
    """The attributes Powertools reads from a Lambda context."""

    function_name: str = "prospect-splitter"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = f"arn:aws:lambda:{REGION}:123456789012:function:prospect-splitter"
    aws_request_id: str = "00000000-0000-0000-0000-000000000001"
    remaining_ms: int = 60_000

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@dataclass
class ProspectAws:
    """moto-backed resources plus helpers to upload files and read what was published.

    ``session`` is the test's own (hooks a test registers on it reach the clients made from
    it afterwards, the handlers' included); the helpers use the fixtures' clients."""

    capture_queue_url: str
    _etags: dict[str, str] = field(default_factory=dict)
    _session: boto3.session.Session | None = None

    @property
    def session(self) -> boto3.session.Session:
        """The test's own session, made on first use: a session costs about 9 ms of CPU
        (botocore registers its few hundred handlers), and most tests never ask for one."""
        if self._session is None:
            self._session = boto3.session.Session(region_name=REGION)
        return self._session

    @property
    def s3(self) -> Any:
        return fixture_client("s3")

    @property
    def failures_table(self) -> Any:
        return fixture_table(FAILURES_TABLE)

    @property
    def rows_table(self) -> Any:
        """RowsTable: each row's values, as the splitter writes them (issue 18)."""
        return fixture_table(ROWS_TABLE)

    def put_csv(self, key: str, data: bytes | str, *, size: int | None = -1) -> dict[str, Any]:
        """Upload ``data`` and return the EventBridge S3 "Object Created" event for it.

        ``size=-1`` uses the real size; ``None`` omits it; anything else is sent as is.
        """
        body = data.encode("utf-8") if isinstance(data, str) else data
        etag = _uploader().put_object(Bucket=BUCKET, Key=key, Body=body)["ETag"].strip('"')
        return s3_event(BUCKET, key, etag, len(body) if size == -1 else size)

    def drain_published(self) -> list[dict[str, Any]]:
        """Every event the bus delivered to the capture queue since the last drain."""
        sqs = fixture_client("sqs")
        events: list[dict[str, Any]] = []
        while True:
            messages = sqs.receive_message(
                QueueUrl=self.capture_queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0
            ).get("Messages", [])
            if not messages:
                return events
            for message in messages:
                events.append(json.loads(message["Body"]))
            sqs.delete_message_batch(
                QueueUrl=self.capture_queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                    for i, m in enumerate(messages)
                ],
            )

    def rows(self, upload_id: str) -> dict[int, dict[str, Any]]:
        """RowsTable's items of one upload (each row's values), keyed by row number."""
        table = self.rows_table
        condition = boto3.dynamodb.conditions.Key("upload_id").eq(upload_id)
        items: dict[int, dict[str, Any]] = {}
        start: dict[str, Any] = {}
        while True:
            page = table.query(KeyConditionExpression=condition, **start)
            items.update((int(item["row_number"]), item) for item in page["Items"])
            if "LastEvaluatedKey" not in page:
                return items
            start = {"ExclusiveStartKey": page["LastEvaluatedKey"]}

    def failures(self, upload_id: str) -> dict[str, dict[str, Any]]:
        """All items of one upload, keyed by failure_id."""
        items = self.failures_table.query(
            KeyConditionExpression=boto3.dynamodb.conditions.Key("upload_id").eq(upload_id)
        )["Items"]
        return {item["failure_id"]: item for item in items}


@functools.cache
def _uploader() -> Any:
    """The uploads' S3 client: one for the run, sending a body as it is.

    botocore's default (``request_checksum_calculation="when_supported"``) sends every
    PutObject body ``aws-chunked`` with a CRC32 trailer, framed in Python, and moto unframes
    it in Python too: for the 50 MiB uploads of the limits tests, most of their CPU. PutObject
    requires no checksum, so ``when_required`` sends the plain body (a client or a browser
    may); the object stored, its ETag and the event are the same."""
    session = boto3.session.Session(region_name=REGION)
    return session.client("s3", config=Config(request_checksum_calculation="when_required"))


def s3_event(
    bucket: str | None,
    key: str | None,
    etag: str | None,
    size: int | None,
    version_id: str | None = None,
) -> dict[str, Any]:
    """An S3 "Object Created" event as EventBridge delivers it."""
    obj: dict[str, Any] = {"sequencer": "0062E99A88DC407460"}
    for name, value in (("key", key), ("etag", etag), ("size", size), ("version-id", version_id)):
        if value is not None:
            obj[name] = value
    detail: dict[str, Any] = {"version": "0", "object": obj, "reason": "PutObject"}
    if bucket is not None:
        detail["bucket"] = {"name": bucket}
    digest = hashlib.sha256(json.dumps(detail, sort_keys=True).encode()).hexdigest()
    return {
        "version": "0",
        "id": f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}",
        "detail-type": "Object Created",
        "source": "aws.s3",
        "account": "123456789012",
        "time": "2026-11-29T09:00:00Z",
        "region": REGION,
        "resources": [f"arn:aws:s3:::{bucket}"],
        "detail": detail,
    }


def create_table(construct_path: str, name: str) -> Any:
    """``tests.stack_tables.create_stack_table`` through the fixtures' client (moto's tables
    belong to the account, not to a client): its ``Table`` resource, one for the run."""
    stack_tables.create_stack_table_with(fixture_client("dynamodb"), construct_path, name)
    return fixture_table(name)


def _create_resources() -> str:
    fixture_client("s3").create_bucket(Bucket=BUCKET)
    # Laid out as the stack defines them (tests/stack_tables.py).
    create_table(stack_tables.FAILURES_TABLE, FAILURES_TABLE)
    create_table(stack_tables.ROWS_TABLE, ROWS_TABLE)
    create_table(stack_tables.PROSPECT_IDEMPOTENCY_TABLE, IDEMPOTENCY_TABLE)
    events = fixture_client("events")
    events.create_event_bus(Name=BUS)
    sqs = fixture_client("sqs")
    queue_url = sqs.create_queue(QueueName="prospect-capture")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    events.put_rule(
        Name="capture-all",
        EventBusName=BUS,
        EventPattern=json.dumps({"source": ["prospect-uploader"]}),
    )
    events.put_targets(
        Rule="capture-all", EventBusName=BUS, Targets=[{"Id": "capture", "Arn": queue_arn}]
    )
    return queue_url


#: moto, started once for the module (tests/moto_per_module.py).
moto_patching = moto_per_module.moto_patching


@pytest.fixture(scope="module")
def unsigned_moto(moto_patching: None) -> Iterator[None]:
    """Requests to moto go unsigned for the module (``tests.fixture_clients.
    unsigned_moto_requests``): the tests' sessions and the handlers' are all made inside it,
    and the uploads' S3 client signs as before."""
    with unsigned_moto_requests():
        yield


@pytest.fixture
def aws(
    monkeypatch: pytest.MonkeyPatch, moto_patching: None, unsigned_moto: None
) -> Iterator[ProspectAws]:
    """Fresh moto account with the stack's resources (``_create_resources``, made once and
    restored for each test: ``tests.fixture_clients.restored``) and the Lambda env vars set."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "EVENT_BUS_NAME": BUS,
        "FAILURES_TABLE_NAME": FAILURES_TABLE,
        "ROWS_TABLE_NAME": ROWS_TABLE,
        "IDEMPOTENCY_TABLE_NAME": IDEMPOTENCY_TABLE,
        "POWERTOOLS_SERVICE_NAME": "prospect-tests",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }.items():
        monkeypatch.setenv(name, value)
    for name in (
        "AWS_PROFILE",
        "AWS_ENDPOINT_URL",
        "MAX_UPLOAD_BYTES",
        "EVENT_SOURCE",
        "PAGE_SIZE",
    ):
        monkeypatch.delenv(name, raising=False)
    with fresh_moto_account(), atomic_dynamodb_writes():
        yield ProspectAws(capture_queue_url=restored(_create_resources))


@pytest.fixture
def lambda_context() -> FakeLambdaContext:
    return FakeLambdaContext()
