"""What a cold container imports: a duplicate never imports the model SDK (~1 s), a
realtime step never imports the batch path, the Bedrock batch adapter or the tracer, and a new
event loads only the SDK modules its call uses (``model_step.sdk_import``; issue 35: a cold
new event's import time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
from model_step import ModelStep
from model_step.sdk_import import is_lazy

from constructs_lib.local_engine.moto_server import moto_server as local_moto_server
from tests.fakes import FakeBedrockRuntime, Reply

from .conftest import SYSTEM_PROMPT, FakeLambdaContext, make_event
from .prompts import PROMPT_ROOT, shipped
from .test_providers import BEDROCK_MODEL_ID, SECRET_KEYS

REPO = Path(__file__).resolve().parents[2]
# About 17 CPU-s of child processes: started among the long files, it no longer ends the run
# on one worker after the others have finished (tests/conftest.py's _long_files_first).
pytestmark = pytest.mark.long

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


def _cold_child(
    event: dict, child: str = CHILD, modules: object = NOT_ON_THE_REALTIME_PATH
) -> dict:
    """``event`` answered by ``model_step.handler`` in a new process (``child``, given the
    ``modules`` to look for as JSON): its result, and what it imported."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "lambda_src"), str(PROMPT_ROOT)]),
    )
    out = _python([child, json.dumps(modules)], env, json.dumps(event))
    return _result(out)


def _result(out: str) -> dict:
    line = next(x for x in out.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


#: Put before each child's code. Nothing a child reports depends on the cyclic collector, and
#: it traverses every object the SDK's import makes (its pydantic classes): 0.28 CPU-s of a
#: plain ``import anthropic`` here (the worker's collector is tuned the same way, for the same
#: heap: tests/conftest.py's ``pytest_collection``).
CHILD_START = "import gc\ngc.disable()\n"
#: Put after each child's code, once it has printed what it found: tearing down the
#: interpreter (thousands of modules, the SDK's classes) was 0.49 CPU-s of a plain ``import
#: anthropic`` here, and no Lambda container runs it between invocations either. A child that
#: raises never gets here, and exits 1 as before.
CHILD_EXIT = "\nimport os as _os, sys as _sys\n_sys.stdout.flush()\n_os._exit(0)\n"


def _python(argv: list[str], env: dict[str, str], stdin: str | None = None) -> str:
    """``python -c *argv`` in a new process: its standard output (it must exit 0)."""
    code, *args = argv
    run = {"capture_output": True, "text": True, "timeout": 60, "check": False}
    child = subprocess.run(
        [sys.executable, "-c", CHILD_START + code + CHILD_EXIT, *args],
        input=stdin,
        env=env,
        **run,
    )
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
        # The bytecode this run's own imports cached, as a deployed asset ships its .pyc:
        # without it the child compiles the SDKs afresh and writes into the venv and
        # lambda_src. Where the bytecode is read from does not change what is imported.
        **({"PYTHONPYCACHEPREFIX": sys.pycache_prefix} if sys.pycache_prefix else {}),
    }
    assert f"IMPORTED {primed}" in _python([PRIME_CHILD.format(module=module)], env)


# -- the SDK, loaded lazily (model_step.sdk_import) -------------------------------------------
#: Packages whose __init__ a new event must not execute: each imports far more than a
#: Messages call uses (every type, the beta ones, the other platforms' clients).
SDK_PACKAGES_NOT_EXECUTED = (
    "anthropic",
    "anthropic.types",
    "anthropic.types.beta",
    "anthropic.types.shared",
    "anthropic.resources",
    "anthropic.resources.beta",
    "anthropic.lib.vertex",
    "anthropic.lib.foundry",
    "anthropic.lib.google_cloud",
    "anthropic.lib.tools",
)
#: Modules of the SDK no realtime call needs (the beta resources, the other platforms).
SDK_MODULES_NOT_IMPORTED = (
    "anthropic.resources.beta.beta",
    "anthropic.lib.vertex._client",
    "anthropic.lib.foundry",
    "anthropic.lib.google_cloud._client",
    "anthropic.lib.tools._beta_runner",
)
#: What the SDK exposes, compared between a plain ``import anthropic`` and the lazy one.
SDK_NAMES = """
import importlib, types

def describe(value):
    qualname = getattr(value, "__qualname__", type(value).__name__)
    return f"{getattr(value, '__module__', None)}.{qualname}"

def sdk_names():
    out = {}
    for name in ("anthropic", "anthropic.types", "anthropic.types.beta",
                 "anthropic.types.shared", "anthropic.lib.streaming", "anthropic.lib.bedrock"):
        module = importlib.import_module(name)
        star = {}
        exec(f"from {name} import *", star)
        out[name] = {
            "dir": {n: describe(v) for n, v in ((n, getattr(module, n)) for n in dir(module))
                    if not n.startswith("_") and not isinstance(v, types.ModuleType)},
            # A submodule is a name only once something imported it, lazy or not.
            "star": sorted(n for n, v in star.items()
                           if n != "__builtins__" and not isinstance(v, types.ModuleType)),
        }
    return out
"""
LAZY_CHILD = (
    SDK_NAMES
    + """
import json, sys
from model_step.handler import handler
from model_step.errors import classify_model_error, is_rate_limited
from model_step.sdk_import import is_lazy

class Context:
    function_name = "model-step-test"
    aws_request_id = "cold-new-event"
    def get_remaining_time_in_millis(self):
        return 30000

report = {}
try:
    report["result"] = handler(json.loads(sys.stdin.read()), Context())
except Exception as exc:
    import anthropic
    report["raised"] = {
        "type": type(exc).__name__,
        "sdk_status_error": isinstance(exc, anthropic.APIStatusError),
        "same_class": type(exc) is getattr(anthropic, type(exc).__name__),
        "status": getattr(exc, "status_code", None),
        "transient": classify_model_error(exc) is None,
        "rate_limited": is_rate_limited(exc),
    }
packages, modules = json.loads(sys.argv[1])
report["executed"] = sorted(
    n for n in packages if n in sys.modules and not is_lazy(sys.modules[n])
)
report["imported"] = sorted(n for n in modules if n in sys.modules)
report["lazy"] = is_lazy(sys.modules["anthropic"])
# Afterwards the whole SDK is there: every name, and the beta resources of a client.
import anthropic
report["names"] = sdk_names()
client = anthropic.Anthropic(api_key="sk-unused", max_retries=0)
report["beta_resources"] = callable(client.beta.messages.create)
print("RESULT " + json.dumps(report))
"""
)
PLAIN_CHILD = (
    SDK_NAMES
    + """
import json
import anthropic
print("RESULT " + json.dumps({"names": sdk_names()}))
"""
)


def _lazy_child(event: dict) -> dict:
    return _cold_child(event, LAZY_CHILD, (SDK_PACKAGES_NOT_EXECUTED, SDK_MODULES_NOT_IMPORTED))


@pytest.fixture(scope="module")
def plain_sdk_names() -> dict:
    """The SDK's names after a plain ``import anthropic``: read in this process, whose SDK
    ``tests.runtime.test_providers`` imported plainly at collection, else in a new process.

    A new process importing it only to read them cost 2.7 CPU-s; this one has it already.
    Should any of this process's SDK packages be lazy (``model_step.sdk_import`` got here
    first), its names are no reference, and a new process reads them."""
    sdk = [m for n, m in sys.modules.items() if n == "anthropic" or n.startswith("anthropic.")]
    if sdk and not any(is_lazy(module) for module in sdk):
        namespace: dict = {}
        exec(SDK_NAMES, namespace)
        return namespace["sdk_names"]()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "lambda_src")]))
    return _result(_python([PLAIN_CHILD], env))["names"]


def _assert_only_the_call_was_loaded(
    report: dict, plain_sdk_names: dict, imported: tuple[str, ...] = ()
) -> None:
    assert report["lazy"] is True
    assert report["executed"] == []
    assert report["imported"] == sorted(imported)
    # ... and afterwards the module is complete: the same names, the same objects' origins.
    assert report["names"] == plain_sdk_names
    assert report["beta_resources"] is True


def test_a_cold_new_event_loads_only_the_sdk_modules_its_call_uses(
    step_environment, fake_api, plain_sdk_names
):
    report = _lazy_child(make_event())

    assert report["result"]["status"] == "completed"
    assert report["result"]["answer"] == fake_api.text
    assert fake_api.request_count == 1
    _assert_only_the_call_was_loaded(report, plain_sdk_names)


def test_a_cold_bedrock_new_event_loads_only_the_sdk_modules_its_call_uses(
    step_environment, fake_api, monkeypatch, plain_sdk_names
):
    with FakeBedrockRuntime(timeout_sleep=3.0, secret_keys=SECRET_KEYS) as bedrock:
        monkeypatch.setenv("ANTHROPIC_BEDROCK_BASE_URL", bedrock.base_url)
        monkeypatch.setenv("MODEL_PROVIDER", "bedrock")
        monkeypatch.setenv("MODEL_ID", BEDROCK_MODEL_ID)
        report = _lazy_child(make_event())

        assert report["result"]["status"] == "completed"
        assert report["result"]["provider"] == "bedrock"
        assert bedrock.request_count == 1
        assert bedrock.rejected == []
    assert fake_api.request_count == 0
    # The Bedrock client's module imports its beta messages, which import the tool runner.
    _assert_only_the_call_was_loaded(
        report, plain_sdk_names, imported=("anthropic.lib.tools._beta_runner",)
    )


def test_a_cold_400_is_dead_lettered_by_the_sdk_s_own_error_class(
    step_environment, fake_api, plain_sdk_names
):
    fake_api.script = [Reply(status=400)]

    report = _lazy_child(make_event())

    assert report["result"]["status"] == "dead_lettered"
    assert report["result"]["error_code"] == "BadRequestError"
    assert "status 400" in report["result"]["error_message"]
    _assert_only_the_call_was_loaded(report, plain_sdk_names)


def test_a_cold_529_raises_the_sdk_s_error_as_transient_and_rate_limited(
    step_environment, fake_api, plain_sdk_names
):
    fake_api.script = [Reply(status=529)]

    report = _lazy_child(make_event())

    assert "result" not in report
    assert report["raised"] == {
        "type": report["raised"]["type"],
        "sdk_status_error": True,
        "same_class": True,
        "status": 529,
        "transient": True,
        "rate_limited": True,
    }
    assert report["raised"]["type"] in {"OverloadedError", "InternalServerError"}
    assert fake_api.request_count == 1
    _assert_only_the_call_was_loaded(report, plain_sdk_names)
