"""What a cold container imports: a duplicate never imports the model SDK (~1 s), and a
realtime step never imports the batch path, the Bedrock batch adapter or the tracer (issue 35:
a cold new event's import time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
from model_step import ModelStep

from constructs_lib.local_engine.moto_server import moto_server as local_moto_server

from .conftest import SYSTEM_PROMPT, FakeLambdaContext, make_event
from .prompts import PROMPT_ROOT, shipped

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys
from model_step.handler import handler

class Context:
    function_name = "model-step-test"
    aws_request_id = "cold-duplicate"
    def get_remaining_time_in_millis(self):
        return 30000

event = json.loads(sys.stdin.read())
result = handler(event, Context())
loaded = sorted(name for name in json.loads(sys.argv[1]) if name in sys.modules)
print("RESULT " + json.dumps({"result": result, "anthropic": "anthropic" in sys.modules,
                              "loaded": loaded}))
"""
#: Modules a realtime step with tracing off has no use for, on any event.
NOT_ON_THE_REALTIME_PATH = (
    "model_step.batch",
    "model_step.batch_staging",
    "model_step.batch_collect",
    "model_step.batch_submit",
    "model_step.anthropic_batches",
    "model_step.bedrock_batches",
    # Powertools' package imports its Tracer module; the X-Ray SDK behind it is the cost.
    "aws_xray_sdk",
)


@pytest.fixture
def moto_server(aws_env, monkeypatch):
    """moto as a real HTTP server, so a second process sees the same tables; on a port it
    bound itself, with the process's moto state reset."""
    with local_moto_server() as url:
        monkeypatch.setenv("AWS_ENDPOINT_URL", url)
        yield


def _cold_child(event: dict) -> dict:
    """``event`` answered by ``model_step.handler`` in a new process: its result, and what
    it imported."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "lambda_src"), str(PROMPT_ROOT)]),
    )
    out = _python([CHILD, json.dumps(NOT_ON_THE_REALTIME_PATH)], env, json.dumps(event))
    line = next(x for x in out.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def _python(argv: list[str], env: dict[str, str], stdin: str | None = None) -> str:
    """``python -c *argv`` in a new process: its standard output (it must exit 0)."""
    run = {"capture_output": True, "text": True, "timeout": 60, "check": False}
    child = subprocess.run([sys.executable, "-c", *argv], input=stdin, env=env, **run)
    assert child.returncode == 0, child.stderr
    return child.stdout


@pytest.fixture
def step_environment(moto_server, monkeypatch):
    """A realtime step's table, DLQ and environment, tracing off (the default)."""
    session = boto3.session.Session()
    session.client("dynamodb").create_table(
        TableName="idempotency",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    queue_url = session.client("sqs").create_queue(QueueName="dlq")["QueueUrl"]
    for name, value in {
        "IDEMPOTENCY_TABLE_NAME": "idempotency",
        "DEAD_LETTER_QUEUE_URL": queue_url,
        "IDEMPOTENCY_KEY": "[upload_id, row_number]",
        "PROMPT_VERSION": "v1",
        "SYSTEM_PROMPT_SHA256": shipped(SYSTEM_PROMPT),
        "ANTHROPIC_API_KEY": "sk-local",
    }.items():
        monkeypatch.setenv(name, value)
    return session


def test_cold_duplicate_does_not_import_anthropic(step_environment, fake_api):
    event = make_event()
    step = ModelStep.from_environment(boto3_session=step_environment)
    first = step.handle(event, FakeLambdaContext())
    assert fake_api.request_count == 1

    report = _cold_child(event)

    assert report["result"] == first
    assert report["anthropic"] is False
    assert report["loaded"] == []
    assert fake_api.request_count == 1


def test_a_cold_new_event_imports_the_sdk_but_no_batch_bedrock_or_tracing_path(
    step_environment, fake_api
):
    report = _cold_child(make_event())

    assert report["result"]["status"] == "completed"
    assert fake_api.request_count == 1
    assert report["anthropic"] is True
    assert report["loaded"] == []


PRIME_CHILD = """
import sys
import {module}
print("IMPORTED " + str("anthropic" in sys.modules))
"""


@pytest.mark.parametrize("module", ["model_step.handler", "prospect_classifier.handler"])
@pytest.mark.parametrize(("init_type", "primed"), [("snap-start", True), ("on-demand", False)])
def test_snapstart_init_primes_the_sdk_without_credentials(module, init_type, primed):
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "lambda_src")]),
        "AWS_REGION": "us-east-1",
        "AWS_LAMBDA_INITIALIZATION_TYPE": init_type,
        # No credentials, no config: priming must not need them (they are stale after restore).
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        "AWS_EC2_METADATA_DISABLED": "true",
        "HOME": "/nonexistent-home-for-tests",
    }
    assert f"IMPORTED {primed}" in _python([PRIME_CHILD.format(module=module)], env)
