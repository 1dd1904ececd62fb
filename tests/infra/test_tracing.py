"""tracing=True: X-Ray active tracing and the runtime's switch; off by default."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from cdk_nag import AwsSolutionsChecks

from .conftest import NO_BUNDLING, make_step, new_app, synth, unvalidated_app


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """One step with tracing=True and one without, under cdk-nag's AwsSolutions checks
    (an unacknowledged finding would fail this synth)."""
    app = new_app(tmp_path_factory, "tracing")
    for stack_id, tracing in (("Traced", True), ("Untraced", False)):
        stack = cdk.Stack(app, stack_id)
        make_step(stack, tracing=tracing)
        # The test's own secret, acknowledged as the demo app does: not the step's finding.
        cdk.Validations.of(stack.node.find_child("Secret0")).acknowledge(
            cdk.Acknowledgment(id="AwsSolutions-SMG4", reason="a test secret, never deployed")
        )
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return synth(app).templates


def function(template: dict) -> dict:
    [props] = [
        r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function"
    ]
    return props


def statements(template: dict) -> list[dict]:
    return [
        statement
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy"
        for statement in r["Properties"]["PolicyDocument"]["Statement"]
    ]


def actions(statement: dict) -> list[str]:
    action = statement["Action"]
    return action if isinstance(action, list) else [action]


def test_tracing_turns_on_active_tracing_and_the_runtime_subsegments(templates):
    props = function(templates["Traced"])
    assert props["TracingConfig"] == {"Mode": "Active"}
    assert props["Environment"]["Variables"]["TRACING_ENABLED"] == "true"


def test_tracing_grants_only_the_two_xray_write_actions(templates):
    xray = [
        s for s in statements(templates["Traced"]) if any(a.startswith("xray:") for a in actions(s))
    ]
    assert [sorted(actions(s)) for s in xray] == [
        ["xray:PutTelemetryRecords", "xray:PutTraceSegments"]
    ]
    assert xray[0]["Resource"] == "*"  # X-Ray has no resource-level permissions


def test_tracing_is_off_by_default(templates):
    props = function(templates["Untraced"])
    assert "TracingConfig" not in props
    assert "TRACING_ENABLED" not in props["Environment"]["Variables"]
    assert not [
        a for s in statements(templates["Untraced"]) for a in actions(s) if a.startswith("xray:")
    ]


def test_tracing_must_be_a_bool():
    from constructs_lib import PropValidationError

    stack = cdk.Stack(unvalidated_app(context=NO_BUNDLING), "Bad")
    with pytest.raises(PropValidationError, match=r"tracing must be True or False, got 1"):
        make_step(stack, tracing=1)


@pytest.mark.parametrize("platform", ["manylinux2014_x86_64", "manylinux2014_aarch64"])
def test_tracing_bundles_the_xray_sdk_from_a_current_lock_that_agrees_with_the_runtime(platform):
    # GIVEN the runtime's requirements plus the file tracing=True adds  WHEN resolved offline
    # THEN one consistent lock installs the X-Ray SDK (Powertools' Tracer imports it)
    from constructs_lib import ModelStepHandler
    from constructs_lib._paths import lambda_src_root
    from constructs_lib.bundling.dependency_lock import LockTarget, resolve_locks
    from constructs_lib.defaults import LAMBDA_PYTHON_VERSION
    from constructs_lib.idempotent_model_step import TRACING_REQUIREMENTS

    files = [
        *ModelStepHandler.default().requirements,
        lambda_src_root() / "model_step" / TRACING_REQUIREMENTS,
    ]
    lock = resolve_locks(files, LockTarget(LAMBDA_PYTHON_VERSION, platform))
    names = {package.name for package in lock.packages}
    assert {"aws-xray-sdk", "aws-lambda-powertools", "anthropic"} <= names
