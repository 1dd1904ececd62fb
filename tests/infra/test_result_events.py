"""result_bus: the runtime's variables, a least-privilege publish grant, and a downstream
step subscribed with result_event_pattern()."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_events as events

from constructs_lib import EventBusV2, PropValidationError
from constructs_lib.idempotent_model_step import (
    RESULT_COMPLETED,
    RESULT_DEAD_LETTERED,
    RESULT_DETAIL_TYPES,
)

from .conftest import NO_BUNDLING, REPO, make_step, new_app, synth, unvalidated_app


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> dict:
    app = new_app(tmp_path_factory, "results")
    stack = cdk.Stack(app, "Results")
    bus = events.EventBus(stack, "Bus")
    v2 = EventBusV2(stack, "BusV2")
    classify = make_step(stack, "Classify", event_bus=bus, result_bus=bus)
    make_step(
        stack,
        "Outreach",
        event_bus=bus,
        event_pattern=classify.result_event_pattern(detail={"result": {"label": ["hot"]}}),
        idempotency_key="key",
    )
    make_step(stack, "OnV2", event_bus=v2, result_bus=v2)
    return synth(app).templates["Results"]


def resources(template: dict, type_: str, prefix: str) -> list[dict]:
    return [
        r["Properties"]
        for logical, r in template["Resources"].items()
        if r["Type"] == type_ and logical.startswith(prefix)
    ]


def function_env(template: dict, prefix: str) -> dict:
    [function] = resources(template, "AWS::Lambda::Function", prefix)
    return function["Environment"]["Variables"]


def put_events_statements(template: dict, prefix: str) -> list[dict]:
    return [
        statement
        for policy in resources(template, "AWS::IAM::Policy", prefix)
        for statement in policy["PolicyDocument"]["Statement"]
        if statement["Action"] == "events:PutEvents"
    ]


def test_a_classic_result_bus_sets_the_runtime_variables(template):
    env = function_env(template, "ClassifyFunction")
    assert env["RESULT_BUS_KIND"] == "classic"
    assert env["RESULT_EVENT_SOURCE"] == "Results/Classify"
    assert env["RESULT_BUS_ARN"] == {"Fn::GetAtt": [_bus(template), "Arn"]}


def test_the_grant_is_put_events_on_the_bus_for_the_steps_source_and_two_types(template):
    [statement] = put_events_statements(template, "ClassifyFunction")
    assert statement["Resource"] == {"Fn::GetAtt": [_bus(template), "Arn"]}
    assert statement["Condition"] == {
        "StringEquals": {
            "events:source": ["Results/Classify"],
            "events:detail-type": [RESULT_COMPLETED, RESULT_DEAD_LETTERED],
        }
    }


def test_a_v2_result_bus_is_granted_through_the_bus_and_named_v2(template):
    env = function_env(template, "OnV2Function")
    assert env["RESULT_BUS_KIND"] == "v2"
    [statement] = put_events_statements(template, "OnV2Function")
    assert statement["Condition"]["StringEquals"]["events:source"] == ["Results/OnV2"]


def test_without_a_result_bus_there_are_no_variables_and_no_grant(template):
    assert "RESULT_BUS_ARN" not in function_env(template, "OutreachFunction")
    assert put_events_statements(template, "OutreachFunction") == []


def test_a_downstream_step_subscribes_with_result_event_pattern(template):
    [rule] = resources(template, "AWS::Events::Rule", "OutreachRule")
    assert rule["EventPattern"] == {
        "source": ["Results/Classify"],
        "detail-type": [RESULT_COMPLETED],
        "detail": {"result": {"label": ["hot"]}},
    }


def test_the_detail_types_are_the_runtimes():
    # One contract, two packages: the construct's names must be the runtime's.
    import ast

    tree = ast.parse((REPO / "lambda_src/model_step/result_events.py").read_text())
    values = {
        node.targets[0].id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Constant)
    }
    assert (values["COMPLETED"], values["DEAD_LETTERED"]) == RESULT_DETAIL_TYPES


def test_a_result_bus_of_the_wrong_type_fails_naming_the_prop():
    stack = cdk.Stack(unvalidated_app(context=NO_BUNDLING), "Bad")
    with pytest.raises(PropValidationError, match=r"result_bus must be an events.IEventBus"):
        make_step(stack, result_bus="my-bus")


def test_result_event_pattern_without_a_result_bus_fails():
    stack = cdk.Stack(unvalidated_app(context=NO_BUNDLING), "NoBus")
    step = make_step(stack)
    with pytest.raises(PropValidationError, match=r"result_event_pattern needs a result_bus"):
        step.result_event_pattern()


def test_result_event_pattern_refuses_an_unknown_detail_type():
    stack = cdk.Stack(unvalidated_app(context=NO_BUNDLING), "Unknown")
    step = make_step(stack, result_bus=events.EventBus(stack, "Bus"))
    with pytest.raises(PropValidationError, match=r"detail_types must be some of"):
        step.result_event_pattern(detail_types=["Model Step Done"])


def _bus(template: dict) -> str:
    [logical] = [
        k for k, r in template["Resources"].items() if r["Type"] == "AWS::Events::EventBus"
    ]
    return logical


def uncertain_alarms(template: dict, prefix: str) -> list[dict]:
    return [
        alarm
        for alarm in resources(template, "AWS::CloudWatch::Alarm", prefix)
        if alarm.get("MetricName") == "ResultEventsUncertain"
    ]


@pytest.mark.parametrize("step", ["Classify", "OnV2"])
def test_a_step_with_a_result_bus_alarms_on_an_uncertain_result_event(template, step):
    # GIVEN a step with a classic or a v2 result bus  THEN one alarm on the runtime's count of
    # result events it could not tell were published (issue 31), at the first occurrence
    [alarm] = uncertain_alarms(template, step)
    assert alarm["Namespace"] == "IdempotentModelStep"
    assert alarm["Dimensions"] == [{"Name": "service", "Value": f"Results/{step}"}]
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (
        1,
        "GreaterThanOrEqualToThreshold",
    )
    assert alarm["TreatMissingData"] == "notBreaching"


def test_a_step_without_a_result_bus_has_no_such_alarm(template):
    assert uncertain_alarms(template, "Outreach") == []
