"""Two steps sharing one idempotency table, and the RetryBudget aspect."""

from __future__ import annotations

import json
import subprocess
import sys

import aws_cdk as cdk
import pytest
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Annotations, Match

from constructs_lib import RetryBudget
from constructs_lib.defaults import dead_letter_queue_props, idempotency_table_props

from .conftest import cdk_cli, cli_env, make_step, new_app, synth, unvalidated_app


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> dict:
    app = new_app(tmp_path_factory, "shared")
    stack = cdk.Stack(app, "Shared")
    table = dynamodb.Table(stack, "SharedTable", **idempotency_table_props())
    dlq = sqs.Queue(stack, "SharedDlq", **dead_letter_queue_props())
    make_step(stack, "Summarize", table=table, dead_letter_queue=dlq)
    make_step(stack, "Classify", table=table, dead_letter_queue=dlq, prompt_version="v2")
    return synth(app).templates["Shared"]


def test_shared_table_creates_one_table(shared):
    tables = [v for v in shared["Resources"].values() if v["Type"] == "AWS::DynamoDB::Table"]
    assert len(tables) == 1


def test_both_functions_point_at_the_shared_table(shared):
    table_id = next(
        k for k, v in shared["Resources"].items() if v["Type"] == "AWS::DynamoDB::Table"
    )
    envs = [
        v["Properties"]["Environment"]["Variables"]["IDEMPOTENCY_TABLE_NAME"]
        for v in shared["Resources"].values()
        if v["Type"] == "AWS::Lambda::Function"
    ]
    assert envs == [{"Ref": table_id}, {"Ref": table_id}]


def test_both_roles_get_the_table_grant(shared):
    table_id = next(
        k for k, v in shared["Resources"].items() if v["Type"] == "AWS::DynamoDB::Table"
    )
    granted = [
        p for p in shared["Resources"].values()
        if p["Type"] == "AWS::IAM::Policy" and table_id in json.dumps(p)
    ]  # fmt: skip
    assert len(granted) == 2
    # Each role reaches its own step's records only (dynamodb:LeadingKeys, issue 34): the
    # construct path and '#', so "Classify" is not a prefix of another step's "ClassifyX".
    patterns = sorted(
        json.dumps(statement["Condition"])
        for policy in granted
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if table_id in json.dumps(statement["Resource"])
    )
    assert patterns == sorted(
        json.dumps({"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"Shared/{step}#*"]}})
        for step in ("Summarize", "Classify")
    )


def test_shared_dlq_takes_both_redrive_queues_redrive(shared):
    # GIVEN two steps sharing one DLQ  THEN each step's own redrive queue redrives to it
    dlq = next(k for k in shared["Resources"] if k.startswith("SharedDlq"))
    redrives = [
        v["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]
        for k, v in shared["Resources"].items()
        if v["Type"] == "AWS::SQS::Queue" and "RedriveQueue" in k
    ]
    assert redrives == [{"Fn::GetAtt": [dlq, "Arn"]}] * 2


def test_each_buffer_queue_redrives_to_its_own_steps_redrive_queue(shared):
    for step in ("Summarize", "Classify"):
        [buffer] = [
            v for k, v in shared["Resources"].items() if k.startswith(f"{step}BufferQueue")
            and v["Type"] == "AWS::SQS::Queue"
        ]  # fmt: skip
        target = buffer["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
        assert target.startswith(f"{step}RedriveQueue")


def test_steps_sharing_a_table_get_distinct_record_prefixes(shared):
    prefixes = [
        v["Properties"]["Environment"]["Variables"]["IDEMPOTENCY_RECORD_PREFIX"]
        for v in shared["Resources"].values()
        if v["Type"] == "AWS::Lambda::Function"
    ]
    assert prefixes == ["Shared/Summarize", "Shared/Classify"]


def _budget_stack(budget: int, attempts: int) -> cdk.Stack:
    app = unvalidated_app(context={"aws:cdk:bundling-stacks": []})
    stack = cdk.Stack(app, "Budget")
    make_step(stack, "Step", lambda_retry_attempts=attempts)
    cdk.Aspects.of(app).add(RetryBudget(max_model_requests_per_delivery=budget))
    return stack


def test_retry_budget_passes_a_step_within_budget():
    stack = _budget_stack(budget=2, attempts=1)
    assert Annotations.from_stack(stack).find_error("*", Match.any_value()) == []


def test_retry_budget_reports_the_step_and_the_arithmetic():
    stack = _budget_stack(budget=2, attempts=2)
    Annotations.from_stack(stack).has_error(
        "/Budget/Step",
        Match.string_like_regexp(
            r"Budget/Step may make 3 model requests per delivery "
            r"\(1 SDK attempt x 3 attempts = 3; 429s are not billed\), over the budget of 2"
        ),
    )


#: The budget is checked at synth, with or without bundling, so the app bundles nothing. It
#: sets the context after the App is made: the CLI's own (``aws:cdk:bundling-stacks = ["**"]``
#: for `cdk synth`) overrides what the App's props give, and the step's asset was bundled with
#: pip for each run (62 MB; 15.1 CPU-s for the CLI and the app, 7.6 without). Nor does it
#: run aws-cdk-lib's built-in CloudFormation validation, which has nothing to say about the
#: budget: starting its rules engine was half of what was left (9.5 CPU-s with it, 4.0
#: without, for the CLI and the app).
OVER_BUDGET_APP = """
import aws_cdk as cdk
from aws_cdk import aws_events as events, aws_secretsmanager as sm
from constructs_lib import IdempotentModelStep, RetryBudget
app = cdk.App(builtin_cloud_formation_validation=False)
app.node.set_context("aws:cdk:bundling-stacks", [])
stack = cdk.Stack(app, "OverBudget")
IdempotentModelStep(stack, "Step", event_pattern=events.EventPattern(source=["x"]),
    idempotency_key="[id]", prompt_version="v1", system_prompt="s",
    api_key_secret=sm.Secret(stack, "Key"), lambda_retry_attempts=2)
cdk.Aspects.of(app).add(RetryBudget(max_model_requests_per_delivery=1))
app.synth()
"""


def test_retry_budget_fails_cdk_synth(tmp_path):
    # GIVEN an app whose step can cost 3 requests per delivery and a budget of 1
    (tmp_path / "app.py").write_text(OVER_BUDGET_APP)
    # WHEN the real CDK CLI synthesizes it
    result = subprocess.run(
        [cdk_cli(), "synth", "--quiet", "--app", f"{sys.executable} app.py",
         "--output", str(tmp_path / "out")],
        cwd=tmp_path, capture_output=True, text=True, env=cli_env(),
    )  # fmt: skip
    # THEN synth fails and says why
    assert result.returncode != 0
    assert "OverBudget/Step may make 3 model requests per delivery" in result.stderr


def test_a_step_with_shared_table_and_queue_is_18_resources(shared):
    # The docs quote this figure: buffer and redrive queues + their policies, log group,
    # role + policy, function, two event source mappings, rule and seven alarms (issue 36
    # added ConfigurationErrorsAlarm).
    assert len([k for k in shared["Resources"] if k.startswith("Summarize")]) == 18
