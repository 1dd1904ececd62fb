"""constructs_lib.testing: the snapshot normaliser, the runtime import, the handler environment."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from constructs_lib._paths import lambda_src_root
from constructs_lib.testing import (
    FakeMessagesAPI,
    Reply,
    model_step_environment,
    normalize_template,
)

HASH_A = "a" * 64
HASH_B = "0123456789abcdef" * 4


def bundled_function(asset_hash: str, bundled: bool) -> dict:
    return {
        "Type": "AWS::Lambda::Function",
        "Properties": {
            "Code": {"S3Bucket": "cdk-assets", "S3Key": f"{asset_hash}.zip"},
            "Handler": "model_step.handler.handler",
        },
        "Metadata": {
            "aws:cdk:path": "Leads/Classify/Function/Resource",
            "aws:asset:path": f"asset.{asset_hash}",
            "aws:asset:is-bundled": bundled,
            "aws:asset:property": "Code",
        },
    }


def version_of(function_id: str, config_hash: str) -> dict:
    return {
        f"{function_id}CurrentVersion5E3F1B2C{config_hash}": {
            "Type": "AWS::Lambda::Version",
            "Properties": {"FunctionName": {"Ref": function_id}},
        },
        "Alias": {
            "Type": "AWS::Lambda::Alias",
            "Properties": {
                "FunctionVersion": {
                    "Fn::GetAtt": [f"{function_id}CurrentVersion5E3F1B2C{config_hash}", "Version"]
                }
            },
        },
    }


def test_two_builds_of_one_stack_normalize_to_the_same_template():
    # GIVEN the same function bundled with bytecode on one machine, and not bundled on another
    with_pyc = {"Resources": {"Fn": bundled_function(HASH_A, bundled=True)}}
    skipped = {"Resources": {"Fn": bundled_function(HASH_B, bundled=False)}}
    # THEN they differ as synthesized and agree once normalized
    assert with_pyc != skipped
    assert normalize_template(with_pyc) == normalize_template(skipped)


def test_asset_keys_are_masked_and_asset_metadata_dropped():
    normalized = normalize_template({"Resources": {"Fn": bundled_function(HASH_A, True)}})
    assert normalized["Resources"]["Fn"] == {
        "Type": "AWS::Lambda::Function",
        "Properties": {
            "Code": {"S3Bucket": "cdk-assets", "S3Key": "<asset-hash>.zip"},
            "Handler": "model_step.handler.handler",
        },
        "Metadata": {"aws:cdk:path": "Leads/Classify/Function/Resource"},
    }


def test_metadata_with_only_asset_entries_is_dropped_whole():
    function = bundled_function(HASH_A, True)
    del function["Metadata"]["aws:cdk:path"]
    normalized = normalize_template({"Resources": {"Fn": function}})
    assert "Metadata" not in normalized["Resources"]["Fn"]


def test_published_version_ids_are_masked_in_keys_and_references():
    normalized = normalize_template({"Resources": version_of("Fn", "f" * 32)})
    version_id = "FnCurrentVersion5E3F1B2C<version-hash>"
    assert set(normalized["Resources"]) == {version_id, "Alias"}
    assert normalized["Resources"]["Alias"]["Properties"]["FunctionVersion"] == {
        "Fn::GetAtt": [version_id, "Version"]
    }


def test_what_is_not_machine_dependent_is_kept():
    # A 32-hex id that is not a version hash, uppercase hex, and every other value stay.
    template = {
        "Resources": {
            "Queue": {
                "Type": "AWS::SQS::Queue",
                "Properties": {
                    "Tags": [{"Key": "commit", "Value": "d41d8cd98f00b204e9800998ecf8427e"}]
                },
                "Metadata": {"checkov": {"skip": [{"id": "CKV_AWS_27", "comment": "SSE-SQS"}]}},
            }
        },
        "Outputs": {"Hash": {"Value": "A" * 64}},
    }
    assert normalize_template(template) == template


def test_the_template_passed_in_is_not_changed():
    template = {"Resources": {"Fn": bundled_function(HASH_A, True), **version_of("Fn", "e" * 32)}}
    before = copy.deepcopy(template)
    normalize_template(template)
    assert template == before


def run_python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A child interpreter of this venv, without the test run's ``lambda_src`` on its path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_importing_the_helpers_imports_no_cdk_boto3_or_moto(tmp_path):
    result = run_python(
        """
        import sys
        from constructs_lib.testing import FakeMessagesAPI, normalize_template, runtime_on_path
        print(sorted(m for m in ("aws_cdk", "jsii", "boto3", "moto") if m in sys.modules))
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_runtime_on_path_makes_model_step_importable_and_nothing_else(tmp_path):
    result = run_python(
        """
        import importlib.util, json
        from constructs_lib.testing import runtime_on_path
        before = importlib.util.find_spec("model_step") is not None
        package = runtime_on_path()
        runtime_on_path()  # idempotent
        import model_step, model_step.handler
        print(json.dumps({
            "before": before,
            "package": str(package),
            "file": model_step.__file__,
            "classifier": importlib.util.find_spec("prospect_classifier") is not None,
        }))
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    runtime = lambda_src_root() / "model_step"
    assert found == {
        "before": False,
        "package": str(runtime),
        "file": str(runtime / "__init__.py"),
        "classifier": False,
    }


def test_runtime_on_path_refuses_another_model_step(tmp_path):
    (tmp_path / "model_step").mkdir()
    (tmp_path / "model_step" / "__init__.py").write_text("")
    result = run_python(
        """
        import sys
        sys.path.insert(0, ".")
        import model_step
        from constructs_lib.testing import runtime_on_path
        runtime_on_path()
        """,
        tmp_path,
    )
    assert result.returncode == 1
    assert "RuntimeImportError: another 'model_step' is imported already" in result.stderr


def test_runtime_on_path_names_the_extra_when_a_dependency_is_missing(tmp_path):
    result = run_python(
        """
        import sys
        sys.modules["anthropic"] = None
        from constructs_lib.testing import runtime_on_path
        runtime_on_path()
        """,
        tmp_path,
    )
    assert result.returncode == 1
    assert (
        "RuntimeImportError: the model step runtime needs anthropic, which the library's "
        "'local' extra installs: pip install 'idempotent-model-step[local]'"
    ) in result.stderr


def test_the_handler_environment_names_the_extra_when_moto_is_missing(tmp_path):
    result = run_python(
        """
        import sys
        sys.modules["moto"] = None
        from constructs_lib.testing import FakeMessagesAPI, model_step_environment
        with FakeMessagesAPI() as api, model_step_environment(api, idempotency_key="[id]"):
            pass
        """,
        tmp_path,
    )
    assert result.returncode == 1
    assert (
        "RuntimeImportError: model_step_environment needs moto and boto3 (moto is missing), "
        "which the library's 'local' extra installs: pip install 'idempotent-model-step[local]'"
    ) in result.stderr


HANDLER = """
import json

from model_step import InvalidAnswerError, ModelStep

def parse(text: str) -> dict:
    if not text:
        raise InvalidAnswerError("empty summary")
    return json.loads(text)

step = ModelStep.from_environment(
    build_user_message=lambda detail: f"Summarise: {detail['body']}",
    parse_answer=parse,
    prompt_version="summary-1",
)

def handler(event, context):
    return step.handle(event, context)
"""


@pytest.fixture
def ticket_step(tmp_path, monkeypatch):
    """A custom handler package, ``ticket_step``, importable from ``tmp_path``."""
    (tmp_path / "ticket_step").mkdir()
    (tmp_path / "ticket_step" / "__init__.py").write_text("")
    (tmp_path / "ticket_step" / "handler.py").write_text(HANDLER)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "ticket_step.handler.handler"
    for name in [m for m in sys.modules if m.split(".")[0] == "ticket_step"]:
        del sys.modules[name]


def test_a_redelivered_event_calls_the_model_once(ticket_step):
    with (
        FakeMessagesAPI(text='{"summary": "printer on fire"}') as api,
        model_step_environment(api, idempotency_key="[ticket_id]") as local,
    ):
        handler = local.handler(ticket_step)
        detail = {"ticket_id": "T-1", "body": "The printer is on fire."}
        first = handler(local.event(detail), local.context())
        again = handler(local.event(detail), local.context())  # a new event id, same key
        records = local.records()
    assert first["status"] == "completed" and first["parsed"] == {"summary": "printer on fire"}
    assert again == first
    assert api.request_count == 1
    # The key came from the secret in moto, as on Lambda (SDK 2.x sends it as a bearer token).
    headers = api.last_request.headers
    key = headers.get("x-api-key") or headers["authorization"].removeprefix("Bearer ")
    assert key == "sk-ant-test-key-for-the-fake-messages-api"
    # One Powertools record (the key's budget item beside it has no status).
    assert [r["status"]["S"] for r in records if "status" in r] == ["COMPLETED"]


def test_a_bad_answer_is_dead_lettered_and_the_environment_is_restored(ticket_step, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "a-real-key-that-must-not-be-used")
    monkeypatch.delenv("IDEMPOTENCY_TABLE_NAME", raising=False)
    before = dict(os.environ)
    with (
        FakeMessagesAPI([Reply(text="")]) as api,
        model_step_environment(api, idempotency_key="[ticket_id]") as local,
    ):
        assert "ANTHROPIC_API_KEY" not in os.environ
        handler = local.handler(ticket_step)
        event = local.event({"ticket_id": "T-2", "body": "?"})
        result = handler(event, local.context())
        dead = local.dead_letters()
    assert result["status"] == "dead_lettered" and result["error_code"] == "InvalidAnswer"
    # The event, marked with the runtime's dead_letter member (docs/runtime.md).
    [message] = dead
    assert {k: v for k, v in message["body"].items() if k != "dead_letter"} == event
    assert message["body"]["dead_letter"]["error_code"] == "InvalidAnswer"
    assert message["attributes"]["ERROR_CODE"] == "InvalidAnswer"
    assert dict(os.environ) == before


def test_each_environment_gets_a_cold_start_of_the_handler(ticket_step):
    # The step reads its settings on its first event; a second environment (new fake API
    # port, new moto) must not reach the first one's.
    for text in ('{"n": 1}', '{"n": 2}'):
        with (
            FakeMessagesAPI(text=text) as api,
            model_step_environment(api, idempotency_key="[ticket_id]") as local,
        ):
            handler = local.handler(ticket_step)
            result = handler(local.event({"ticket_id": "T-3", "body": "x"}), local.context())
        assert result["parsed"] == json.loads(text) and api.request_count == 1


def test_the_librarys_default_handler_can_be_loaded_too():
    with (
        FakeMessagesAPI(text="Warm") as api,
        model_step_environment(
            api, idempotency_key="[lead_id]", allowed_labels=["hot", "warm", "cold"]
        ) as local,
    ):
        handler = local.handler("model_step.handler.handler")
        result = handler(local.event({"lead_id": "L-1"}), local.context())
    assert result["status"] == "completed" and result["label"] == "warm"
    assert json.loads(api.last_request.body["messages"][0]["content"]) == {"lead_id": "L-1"}


def test_a_handler_name_needs_a_module_and_a_function():
    with FakeMessagesAPI() as api, model_step_environment(api, idempotency_key="[id]") as local:
        with pytest.raises(ValueError, match="handler must be '<package>.<module>.<function>'"):
            local.handler("ticket_step.handler")
