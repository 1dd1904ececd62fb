"""Issue 19: ``ModelDelivery.batch`` wires the buffer mapping, the tick rule, the
environment, the grant and the open-batch alarm; bad values fail at synth naming the prop.

One batch stack and one realtime stack are synthesized for the whole module.
"""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import Duration, assertions

from constructs_lib import ModelDelivery, ModelProvider, PropValidationError

from .conftest import NO_BUNDLING, make_step, unvalidated_app


@pytest.fixture(scope="module")
def batch_template() -> assertions.Template:
    stack = cdk.Stack(unvalidated_app(context=NO_BUNDLING), "Batch")
    make_step(
        stack, delivery=ModelDelivery.batch(max_wait=Duration.minutes(10), max_requests=50_000)
    )
    return assertions.Template.from_stack(stack)


@pytest.fixture(scope="module")
def small_batch_template() -> assertions.Template:
    stack = cdk.Stack(unvalidated_app(context=NO_BUNDLING), "SmallBatch")
    make_step(stack, delivery=ModelDelivery.batch(max_wait=Duration.seconds(30), max_requests=200))
    return assertions.Template.from_stack(stack)


@pytest.fixture(scope="module")
def realtime_template() -> assertions.Template:
    stack = cdk.Stack(unvalidated_app(context=NO_BUNDLING), "Realtime")
    make_step(stack)
    return assertions.Template.from_stack(stack)


def buffer_mapping(template: assertions.Template) -> dict:
    mappings = template.find_resources("AWS::Lambda::EventSourceMapping")
    [mapping] = [
        m["Properties"]
        for m in mappings.values()
        if "BufferQueue" in str(m["Properties"]["EventSourceArn"])
    ]
    return mapping


def function_environment(template: assertions.Template) -> dict:
    functions = template.find_resources("AWS::Lambda::Function")
    [step] = [
        f
        for f in functions.values()
        if "IDEMPOTENCY_KEY" in str(f["Properties"].get("Environment"))
    ]
    return step["Properties"]["Environment"]["Variables"]


def test_the_default_is_realtime_and_sets_no_batch_variable(realtime_template):
    env = function_environment(realtime_template)
    assert "MODEL_DELIVERY" not in env
    assert buffer_mapping(realtime_template)["BatchSize"] == 1
    assert "MaximumBatchingWindowInSeconds" not in buffer_mapping(realtime_template)
    realtime_template.resource_count_is("AWS::Events::Rule", 1)


def test_batch_sets_the_runtime_environment(batch_template):
    env = function_environment(batch_template)
    assert env["MODEL_DELIVERY"] == "batch"
    assert env["BATCH_MAX_REQUESTS"] == "50000"
    assert env["BATCH_MAX_WAIT_SECONDS"] == "600"


def test_the_buffer_mapping_takes_up_to_10000_rows_behind_a_window_of_up_to_300_s(
    batch_template, small_batch_template
):
    assert buffer_mapping(batch_template)["BatchSize"] == 10_000
    assert buffer_mapping(batch_template)["MaximumBatchingWindowInSeconds"] == 300
    assert buffer_mapping(small_batch_template)["BatchSize"] == 200
    assert buffer_mapping(small_batch_template)["MaximumBatchingWindowInSeconds"] == 30


def test_a_rule_ticks_the_function_every_minute_with_the_constant_input(batch_template):
    rules = batch_template.find_resources(
        "AWS::Events::Rule", {"Properties": {"ScheduleExpression": "rate(1 minute)"}}
    )
    [rule] = rules.values()
    [target] = rule["Properties"]["Targets"]
    assert target["Input"] == '{"model_step_batch":"tick"}'
    assert target["RetryPolicy"]["MaximumRetryAttempts"] == 0
    assert "Function" in str(target["Arn"])
    batch_template.has_resource_properties(
        "AWS::Lambda::Permission",
        {"Principal": "events.amazonaws.com", "Action": "lambda:InvokeFunction"},
    )


def test_the_function_may_read_staged_rows_in_batches_and_adopt_orphans(
    batch_template, realtime_template
):
    def actions(template: assertions.Template) -> set[str]:
        found: set[str] = set()
        for policy in template.find_resources("AWS::IAM::Policy").values():
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                action = statement["Action"]
                found.update([action] if isinstance(action, str) else action)
        return found

    assert {"dynamodb:BatchGetItem", "dynamodb:ConditionCheckItem"} <= actions(batch_template)
    assert "dynamodb:BatchGetItem" not in actions(realtime_template)
    assert "dynamodb:ConditionCheckItem" not in actions(realtime_template)


def test_the_function_timeout_is_at_least_15_minutes_under_batch(batch_template):
    functions = batch_template.find_resources("AWS::Lambda::Function")
    [step] = [f for f in functions.values() if "MODEL_DELIVERY" in str(f["Properties"])]
    assert step["Properties"]["Timeout"] == 900


def test_an_alarm_fires_when_a_batch_stays_open_past_24_hours(batch_template):
    batch_template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "MetricName": "OldestOpenBatchAgeSeconds",
            "Statistic": "Maximum",
            "Threshold": 86400,
            "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            "TreatMissingData": "notBreaching",
        },
    )


def test_an_alarm_fires_when_a_batch_is_lost(batch_template):
    batch_template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "MetricName": "BatchesLost",
            "Statistic": "Sum",
            "Threshold": 1,
            "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            "TreatMissingData": "notBreaching",
        },
    )


def test_a_realtime_step_has_no_batch_alarms(realtime_template):
    names = {
        alarm["Properties"].get("MetricName")
        for alarm in realtime_template.find_resources("AWS::CloudWatch::Alarm").values()
    }
    assert not names & {"BatchesLost", "OldestOpenBatchAgeSeconds"}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_requests": 0}, "max_requests must be between 1 and 100000, got 0"),
        ({"max_requests": 100_001}, "max_requests must be between 1 and 100000, got 100001"),
        (
            {"max_wait": Duration.seconds(0)},
            "max_wait must be between 1 second and 1 hour, got 0 seconds",
        ),
        (
            {"max_wait": Duration.hours(2)},
            "max_wait must be between 1 second and 1 hour, got 2 hours",
        ),
        (
            {"max_wait": Duration.millis(500)},
            "max_wait must be a whole number of seconds between 1 second and 1 hour, got "
            "500 millis",
        ),
        (
            {"max_wait": Duration.millis(1500)},
            "max_wait must be a whole number of seconds between 1 second and 1 hour, got "
            "1 second 500 millis",
        ),
        ({"max_wait": 300}, "max_wait must be a Duration between 1 second and 1 hour, got 300"),
        (
            {"max_requests": 10.5},
            "max_requests must be an integer between 1 and 100000, got 10.5",
        ),
        (
            {"max_requests": "10000"},
            "max_requests must be an integer between 1 and 100000, got '10000'",
        ),
    ],
)
def test_a_bad_batch_value_fails_naming_the_prop_value_and_range(kwargs, message):
    with pytest.raises(PropValidationError, match=message):
        ModelDelivery.batch(**kwargs)


@pytest.mark.parametrize(
    "max_wait, max_requests",
    [
        (Duration.seconds(1), 1),
        (Duration.hours(1), 100_000),
        (Duration.minutes(60), 100_000),
        (Duration.millis(2000), 50_000),
    ],
)
def test_the_edges_of_both_ranges_are_accepted(max_wait, max_requests):
    delivery = ModelDelivery.batch(max_wait=max_wait, max_requests=max_requests)
    assert delivery.is_batch
    assert delivery.max_requests == max_requests
    assert delivery.max_wait is not None
    assert delivery.max_wait.to_seconds() == max_wait.to_seconds()
    assert delivery.mapping_batch_size == min(max_requests, 10_000)


def test_bedrock_with_batch_delivery_is_no_longer_refused():
    """Issue 37: Bedrock batch inference (tests/infra/test_bedrock_batch_jobs.py)."""
    stack = cdk.Stack(unvalidated_app(context=NO_BUNDLING), "BedrockBatch")
    step = make_step(
        stack,
        api_key_secret=None,
        model_provider=ModelProvider.BEDROCK,
        model_id="anthropic.claude-haiku-5-5",
        delivery=ModelDelivery.batch(),
    )
    assert step.batch_jobs is not None
