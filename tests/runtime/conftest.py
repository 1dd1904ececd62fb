"""Fixtures for the Lambda runtime tests.

Real handler code, real Powertools, the real Anthropic SDK over HTTP to a fake Messages API on
127.0.0.1, and moto for DynamoDB, SQS and Secrets Manager. Nothing reaches AWS or the internet.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from io import StringIO

import boto3
import pytest
from model_step import ModelStep

from constructs_lib.local_engine.moto_fixes import atomic_dynamodb_writes
from constructs_lib.model_prices import PRICE_TABLE
from constructs_lib.testing import FakeLambdaContext
from tests import moto_per_module
from tests.fakes import FakeMessagesAPI
from tests.fixture_clients import (
    fixture_client,
    fresh_moto_account,
    restored,
    unsigned_moto_requests,
)

from .prompts import shipped

REGION = "us-east-1"
TABLE = "idempotency"
PROSPECTS_TABLE = "prospects"
SECRET_NAME = "anthropic-api-key"
SECRET_VALUE = "sk-ant-secret-from-secrets-manager-0123456789"
SYSTEM_PROMPT = "You label prospects. Answer hot, warm or cold."


# One boto3 session for the whole run: a fresh session re-reads every service model from disk
# (~0.1-0.2 s per client), which would dominate the suite's run time. moto intercepts clients
# of any session created after moto is imported.
_BOTO3_SESSION: boto3.session.Session | None = None


def boto3_session() -> boto3.session.Session:
    global _BOTO3_SESSION
    if _BOTO3_SESSION is None:
        _BOTO3_SESSION = boto3.session.Session(region_name=REGION)
    return _BOTO3_SESSION


class ShiftedClock:
    """Moves the runtime's wall clock (``model_step.clock.now``) ahead of real time."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import model_step.clock

        self.offset = 0.0
        monkeypatch.setattr(model_step.clock, "now", lambda: time.time() + self.offset)

    def shift(self, seconds: float) -> None:
        self.offset += seconds


@dataclass
class Aws:
    """The mocked AWS resources of one test."""

    dynamodb: object
    sqs: object
    queue_url: str
    secret_arn: str

    def dead_letters(self) -> list[dict]:
        """Every message on the DLQ: {"body": the event, "marker": the runtime's
        ``dead_letter`` member of the body (or None), "attributes": {name: value}}."""
        found = []
        while True:
            response = self.sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=10,
                MessageAttributeNames=["All"],
                WaitTimeSeconds=0,
            )
            messages = response.get("Messages", [])
            if not messages:
                return found
            for message in messages:
                body = json.loads(message["Body"])
                marker = body.pop("dead_letter", None) if isinstance(body, dict) else None
                found.append(
                    {
                        "body": body,
                        "marker": marker,
                        "attributes": {
                            name: value["StringValue"]
                            for name, value in message.get("MessageAttributes", {}).items()
                        },
                    }
                )
                self.sqs.delete_message(
                    QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"]
                )

    def idempotency_items(self) -> list[dict]:
        """Powertools' records (the keys' budget items left out: see ``budgets``)."""
        return [item for item in self._table_items() if not _is_budget(item)]

    def budgets(self) -> dict[str, dict]:
        """The keys' attempt-budget items, by record id."""
        return {
            item["id"]["S"].removesuffix("#budget"): item
            for item in self._table_items()
            if _is_budget(item)
        }

    def _table_items(self) -> list[dict]:
        return self.dynamodb.scan(TableName=TABLE, ConsistentRead=True)["Items"]


def _is_budget(item: dict) -> bool:
    return item["id"]["S"].endswith("#budget")


@pytest.fixture
def aws_env(monkeypatch):
    """Fake credentials and region; no real AWS or Anthropic settings leak in."""
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "AWS_PROFILE",
        "AWS_ENDPOINT_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "model-step-test")
    # Keeps the SDK from looking for a profile/config file in the developer's home.
    monkeypatch.setenv("HOME", "/nonexistent-home-for-tests")


def create_resources() -> Aws:
    """Create the idempotency table, DLQ and secret (moto must be active). The prospects
    table, which only the classifier writes, is its tests' own (``create_prospects_table``)."""
    from tests import stack_tables  # laid out as the stacks define them

    dynamodb = fixture_client("dynamodb")
    stack_tables.create_stack_table_with(dynamodb, stack_tables.MODEL_STEP_TABLE, TABLE)
    sqs = fixture_client("sqs")
    queue_url = sqs.create_queue(QueueName="model-step-dlq")["QueueUrl"]
    secrets = fixture_client("secretsmanager")
    secret_arn = secrets.create_secret(Name=SECRET_NAME, SecretString=SECRET_VALUE)["ARN"]
    return Aws(dynamodb=dynamodb, sqs=sqs, queue_url=queue_url, secret_arn=secret_arn)


def create_prospects_table() -> None:
    """Create the prospects table the classifier writes labels to, as ``PROSPECTS_TABLE``."""
    from tests import stack_tables

    stack_tables.create_stack_table_with(
        fixture_client("dynamodb"), stack_tables.PROSPECTS_TABLE, PROSPECTS_TABLE
    )


@pytest.fixture
def atomic_moto_put_item():
    """moto's conditional writes made atomic, as DynamoDB's are (see moto_fixes)."""
    with atomic_dynamodb_writes():
        yield


#: moto, started once for the module (tests/moto_per_module.py).
moto_patching = moto_per_module.moto_patching


def _resource_names() -> tuple[str, str]:
    """``create_resources()``'s queue URL and secret ARN."""
    made = create_resources()
    return made.queue_url, made.secret_arn


@pytest.fixture(scope="module")
def unsigned_moto(moto_patching) -> Iterator[None]:
    """Requests to moto go unsigned for the module (``tests.fixture_clients.
    unsigned_moto_requests``); the shared session signs again after it."""
    with unsigned_moto_requests(boto3_session()):
        yield


@pytest.fixture
def aws(aws_env, atomic_moto_put_item, moto_patching, unsigned_moto) -> Iterator[Aws]:
    """An empty moto account with the step's resources (``create_resources``, made once and
    restored for each test: ``tests.fixture_clients.restored``), emptied again after the
    test."""
    with fresh_moto_account():
        queue_url, secret_arn = restored(_resource_names)
        yield Aws(
            dynamodb=fixture_client("dynamodb"),
            sqs=fixture_client("sqs"),
            queue_url=queue_url,
            secret_arn=secret_arn,
        )


@pytest.fixture
def fake_api(monkeypatch) -> Iterator[FakeMessagesAPI]:
    """A started fake Messages API; set ``fake_api.script`` / ``.text`` / ``.delay`` per test."""
    with FakeMessagesAPI(timeout_sleep=3.0) as api:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.base_url)
        yield api


@pytest.fixture
def model_env(aws, fake_api, monkeypatch) -> Aws:
    """The environment the CDK construct sets, pointing at moto and the fake API."""
    monkeypatch.setenv("IDEMPOTENCY_TABLE_NAME", TABLE)
    monkeypatch.setenv("DEAD_LETTER_QUEUE_URL", aws.queue_url)
    monkeypatch.setenv("IDEMPOTENCY_KEY", "[upload_id, row_number]")
    monkeypatch.setenv("PROMPT_VERSION", "v1")
    monkeypatch.setenv("SYSTEM_PROMPT_SHA256", shipped(SYSTEM_PROMPT))
    monkeypatch.setenv("ANTHROPIC_API_KEY_SECRET_ARN", aws.secret_arn)
    monkeypatch.setenv("MODEL_TIMEOUT_SECONDS", "5")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "IdempotentModelStepTest")
    # The default model's price, as the construct sets it from the model catalogue.
    monkeypatch.setenv("MODEL_RATES", PRICE_TABLE["claude-haiku-5-5"].for_step())
    return aws


@pytest.fixture
def make_step(model_env) -> Iterator[Callable[..., ModelStep]]:
    """Build a fresh ``ModelStep`` from the current environment (Powertools objects are
    created per step, so env changes made before the call take effect). The SDK clients of
    the steps it made are closed when the test ends (``close_model_clients``)."""
    made: list[ModelStep] = []

    def make(**kwargs) -> ModelStep:
        kwargs.setdefault("boto3_session", boto3_session())
        step = ModelStep.from_environment(**kwargs)
        made.append(step)
        return step

    yield make
    close_model_clients(made)


def close_model_clients(steps: list[ModelStep]) -> None:
    """Close the model SDK client each of ``steps`` opened, if any.

    A Lambda container keeps its client for its whole life; a test's steps end with the
    test, and their keep-alive sockets to the fake API were left to the garbage collector,
    which warned (``ResourceWarning: unclosed <socket.socket ...>``)."""
    for step in steps:
        parts = step._parts
        client = parts.model_call._clients._client if parts is not None else None
        if client is not None:
            client.close()


@pytest.fixture
def context() -> FakeLambdaContext:
    return FakeLambdaContext()


def make_event(detail: dict | None = None, **overrides) -> dict:
    """An EventBridge event as Lambda receives it."""
    detail = detail if detail is not None else prospect_detail()
    event = {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "ProspectRow",
        "source": "prospects.uploader",
        "account": "123456789012",
        "time": "2026-01-01T00:00:00Z",
        "region": REGION,
        "resources": [],
        "detail": detail,
    }
    event.update(overrides)
    return event


def prospect_detail(row_number: int = 1, **fields) -> dict:
    detail = {
        "upload_id": "upload-001",
        "row_number": row_number,
        "email": f"ada{row_number}@example.com",
        "first_name": "Ada",
        "last_name": "Lovelace",
        "company": "Analytical Engines Ltd",
        "title": "CTO",
        "country": "GB",
        "notes": "Asked for a demo next week.",
    }
    detail.update(fields)
    return detail


class _RecordingHandler(logging.Handler):
    """Writes every record's full attribute dict (message, extras, exception text) as JSON."""

    def __init__(self, buffer: StringIO) -> None:
        super().__init__(level=logging.DEBUG)
        self.buffer = buffer

    def emit(self, record: logging.LogRecord) -> None:
        fields = dict(record.__dict__)
        fields["message"] = record.getMessage()
        if record.exc_info:
            fields["exc_text"] = logging.Formatter().formatException(record.exc_info)
        self.buffer.write(json.dumps(fields, default=str) + "\n")


class _NotTheService(logging.Filter):
    """Passes records of every logger but the step's own (``model-step`` and below)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "model-step" or record.name.startswith("model-step."))


@pytest.fixture
def log_capture() -> Iterator[StringIO]:
    """Capture what any logger emits at INFO+ and the step's Powertools logger at DEBUG+, with
    all structured extras. The step's records are taken on its own logger, not from root:
    under xdist they did not always reach root (seen: none at all in a worker that had run
    other batch tests first), so what was captured depended on test order, and a test
    asserting an absence passed on an empty capture. Root's copy of them is filtered out,
    so each record is written once."""
    buffer = StringIO()
    root = logging.getLogger()
    service = logging.getLogger("model-step")
    others = _RecordingHandler(buffer)
    others.addFilter(_NotTheService())
    own = _RecordingHandler(buffer)
    previous = root.level, service.level
    root.addHandler(others)
    service.addHandler(own)
    root.setLevel(logging.INFO)
    service.setLevel(logging.DEBUG)
    try:
        yield buffer
    finally:
        root.removeHandler(others)
        service.removeHandler(own)
        root.setLevel(previous[0])
        service.setLevel(previous[1])


def log_records(buffer: StringIO) -> list[dict]:
    return [json.loads(line) for line in buffer.getvalue().splitlines() if line]


# -- the buffer queue, as Lambda's poller hands its records over ---------------------------------
def now_iso(seconds_ago: float = 0) -> str:
    when = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds_ago)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def fresh_event(row_number: int = 1, seconds_ago: float = 0, **fields) -> dict:
    return make_event(prospect_detail(row_number=row_number, **fields), time=now_iso(seconds_ago))


@dataclass
class Buffer:
    sqs: object
    url: str
    arn: str
    calls: list = field(default_factory=list)

    def batch(self, event: dict | str, *, receive_count: int | None = None) -> dict:
        """Send ``event`` to the buffer queue, receive it, and shape it as Lambda does."""
        attributes: dict = {}
        body = event if isinstance(event, str) else json.dumps(event)
        self.sqs.send_message(QueueUrl=self.url, MessageBody=body, MessageAttributes=attributes)
        [message] = self.sqs.receive_message(
            QueueUrl=self.url,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
            MaxNumberOfMessages=1,
            VisibilityTimeout=30,
        )["Messages"]
        record_attributes = dict(message["Attributes"])
        if receive_count is not None:
            record_attributes["ApproximateReceiveCount"] = str(receive_count)
        return {
            "Records": [
                {
                    "messageId": message["MessageId"],
                    "receiptHandle": message["ReceiptHandle"],
                    "body": message["Body"],
                    "attributes": record_attributes,
                    "messageAttributes": {
                        name: {"stringValue": value["StringValue"], "dataType": value["DataType"]}
                        for name, value in message.get("MessageAttributes", {}).items()
                    },
                    "md5OfBody": message["MD5OfBody"],
                    "eventSource": "aws:sqs",
                    "eventSourceARN": self.arn,
                    "awsRegion": "us-east-1",
                }
            ]
        }

    def requeued(self) -> list[dict]:
        return [p for name, p in self.calls if name == "SendMessage" and p["QueueUrl"] == self.url]

    def visibility_changes(self) -> list[dict]:
        return [p for name, p in self.calls if name == "ChangeMessageVisibility"]


@pytest.fixture
def buffer(model_env, monkeypatch):
    sqs = model_env.sqs
    url = sqs.create_queue(QueueName="model-step-buffer")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    monkeypatch.setenv("BUFFER_QUEUE_URL", url)
    buffer = Buffer(sqs=sqs, url=url, arn=arn)

    def record(model, params, **_kwargs):
        buffer.calls.append((model.name, dict(params)))

    events = boto3_session().events
    events.register("before-parameter-build.sqs", record)
    yield buffer
    events.unregister("before-parameter-build.sqs", record)


@pytest.fixture
def redrive(model_env, buffer, monkeypatch):
    """The step's redrive queue: records from it are rows SQS gave up on."""
    sqs = model_env.sqs
    url = sqs.create_queue(QueueName="model-step-redrive")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    monkeypatch.setenv("REDRIVE_QUEUE_ARN", arn)
    return Buffer(sqs=sqs, url=url, arn=arn, calls=buffer.calls)


@pytest.fixture
def outcomes():
    seen: list[tuple[dict, dict]] = []

    def hook(event, outcome):
        seen.append((event, dict(outcome)))

    hook.seen = seen
    return hook


# -- Message Batches delivery (issue 19) ---------------------------------------------------------
@pytest.fixture
def batch_env(model_env, buffer, fake_api, monkeypatch):
    """Batch delivery: a submission is due as soon as it is written (max wait 1 s, and
    rows enqueued earlier), batches end 60 s after creation on the runtime's clock."""
    monkeypatch.setenv("MODEL_DELIVERY", "batch")
    monkeypatch.setenv("BATCH_MAX_WAIT_SECONDS", "1")
    monkeypatch.setenv("BATCH_MAX_REQUESTS", "10000")
    import model_step.clock

    fake_api.batches.clock = lambda: model_step.clock.now()
    fake_api.batches.processing_delay = 60
    return model_env
