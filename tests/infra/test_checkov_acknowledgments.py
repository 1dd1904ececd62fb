"""Where the library's checkov acknowledgments land: its own resources, never a user's.

The scan itself (0 failed on every synthesized template, and each acknowledgment needed)
is in test_snapshot_and_compliance.py.
"""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from constructs_lib.checkov_acknowledgments import acknowledge_checkov

from .conftest import NO_BUNDLING, make_step, new_app, synth, unvalidated_app

ALL_FUNCTION_CHECKS = ["CKV_AWS_115", "CKV_AWS_116", "CKV_AWS_117", "CKV_AWS_173"]


def skipped(resources: dict, path_suffix: str) -> list[str] | None:
    """The checkov check ids skipped on the one resource at ``.../path_suffix``, or None
    when it has no checkov metadata."""
    [resource] = [
        r for r in resources.values()
        if r.get("Metadata", {}).get("aws:cdk:path", "").endswith(f"/{path_suffix}")
    ]  # fmt: skip
    checkov = resource["Metadata"].get("checkov")
    return None if checkov is None else sorted(s["id"] for s in checkov["skip"])


@pytest.fixture(scope="module")
def resources(tmp_path_factory) -> dict:
    """A user's stack: two steps, one on the user's own table and queue; the user's own
    function, queue and table, one of them added under a step."""
    app = new_app(tmp_path_factory, "checkov-acks")
    stack = cdk.Stack(app, "UserStack")
    table = dynamodb.Table(
        stack,
        "UserTable",
        partition_key=dynamodb.Attribute(name="id", type=dynamodb.AttributeType.STRING),
    )
    queue = sqs.Queue(stack, "UserQueue")
    lambda_.Function(
        stack,
        "UserFunction",
        runtime=lambda_.Runtime.PYTHON_3_13,
        handler="index.handler",
        code=lambda_.Code.from_inline("def handler(event, context):\n    return event\n"),
    )
    own = make_step(stack, "OwnStep")
    sqs.Queue(own, "QueueAddedByTheUser")
    make_step(stack, "SharedStep", table=table, dead_letter_queue=queue, max_concurrency=1)
    return synth(app).templates["UserStack"]["Resources"]


def test_the_users_own_resources_get_no_checkov_metadata(resources):
    for path in ("UserTable/Resource", "UserQueue/Resource", "UserFunction/Resource"):
        assert skipped(resources, path) is None, path


def test_a_resource_the_user_adds_under_a_step_gets_none_either(resources):
    assert skipped(resources, "OwnStep/QueueAddedByTheUser/Resource") is None


def test_a_step_acknowledges_what_it_creates(resources):
    assert skipped(resources, "OwnStep/Function/Resource") == ALL_FUNCTION_CHECKS
    assert skipped(resources, "OwnStep/FunctionLogGroup/Resource") == ["CKV_AWS_158"]
    assert skipped(resources, "OwnStep/IdempotencyTable/Resource") == ["CKV_AWS_119"]
    assert skipped(resources, "OwnStep/DeadLetterQueue/Resource") == ["CKV_AWS_27"]
    assert skipped(resources, "OwnStep/BufferQueue/Resource") == ["CKV_AWS_27"]
    assert skipped(resources, "OwnStep/RedriveQueue/Resource") == ["CKV_AWS_27"]


def test_reserved_concurrency_is_acknowledged_only_where_it_is_missing(resources):
    # max_concurrency=1 sets ReservedConcurrentExecutions: CKV_AWS_115 passes, no skip.
    assert skipped(resources, "SharedStep/Function/Resource") == [
        c for c in ALL_FUNCTION_CHECKS if c != "CKV_AWS_115"
    ]


def acknowledged(construct: Construct) -> list[dict]:
    resource = construct.node.default_child
    return cdk.Stack.of(construct).resolve(resource.get_metadata("checkov"))["skip"]


def test_acknowledge_checkov_adds_replaces_and_asks_for_a_reason():
    stack = cdk.Stack(unvalidated_app(context=NO_BUNDLING), "S")
    queue = sqs.Queue(stack, "Queue")
    acknowledge_checkov(queue, "CKV_AWS_27", "the first reason, long enough to be specific")
    acknowledge_checkov(queue, "CKV_AWS_999", "another check, with its own specific reason")
    acknowledge_checkov(queue, "CKV_AWS_27", "the second reason replaces the first one")
    assert acknowledged(queue) == [
        {"id": "CKV_AWS_999", "comment": "another check, with its own specific reason"},
        {"id": "CKV_AWS_27", "comment": "the second reason replaces the first one"},
    ]
    with pytest.raises(ValueError, match="needs a specific reason"):
        acknowledge_checkov(queue, "CKV_AWS_27", "by design")
    with pytest.raises(TypeError, match="no CloudFormation resource"):
        acknowledge_checkov(Construct(stack, "Empty"), "CKV_AWS_27", "a reason that is long enough")
