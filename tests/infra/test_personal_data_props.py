"""Issue 34's props on IdempotentModelStep: what result events carry (``result_fields``) and
how long the table's backups keep a record (``point_in_time_recovery``)."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk.assertions import Annotations, Match, Template

from constructs_lib import PropValidationError, ResultFields
from constructs_lib.defaults import idempotency_table_props

from .conftest import NO_BUNDLING, make_step, unvalidated_app


def _stack(name: str = "Leads") -> cdk.Stack:
    return cdk.Stack(unvalidated_app(context=NO_BUNDLING), name)


def _environment(step) -> dict:
    """The step function's environment, from the synthesized template."""
    resources = Template.from_stack(step.function.stack).to_json()["Resources"]
    function_id = step.function.stack.get_logical_id(step.function.node.default_child)
    return resources[function_id]["Properties"]["Environment"]["Variables"]


def _table_backups(step) -> dict:
    table = step.table.node.default_child
    return step.table.stack.resolve(table.point_in_time_recovery_specification)


# ---------------------------------------------------------------- result_fields
def test_by_default_result_events_carry_the_label_and_ids_only():
    stack = _stack()
    step = make_step(stack, "Classify", result_bus=events.EventBus(stack, "Bus"))
    assert step.result_fields == ResultFields.LABEL
    assert _environment(step)["RESULT_FIELDS"] == "label"


@pytest.mark.parametrize(
    ("fields", "value"),
    [
        (ResultFields.LABEL | ResultFields.KEY | ResultFields.PARSED, "label,key,parsed"),
        (ResultFields.KEY | ResultFields.PARSED, "key,parsed"),
        (ResultFields.NONE, "none"),
    ],
)
def test_result_fields_become_the_runtime_s_result_fields(fields, value):
    stack = _stack()
    step = make_step(
        stack, "Classify", result_bus=events.EventBus(stack, "Bus"), result_fields=fields
    )
    assert _environment(step)["RESULT_FIELDS"] == value


def test_without_a_result_bus_there_is_nothing_to_carry():
    stack = _stack()
    step = make_step(stack, "Classify")
    assert "RESULT_FIELDS" not in _environment(step)
    with pytest.raises(PropValidationError, match="result_fields says what result events carry"):
        make_step(stack, "Keyed", result_fields=ResultFields.KEY)


def test_result_fields_must_be_flags_and_the_message_says_which():
    stack = _stack()
    with pytest.raises(
        PropValidationError, match=r"Leads/Classify': result_fields must be ResultFields flags"
    ):
        make_step(stack, "Classify", result_bus=events.EventBus(stack, "Bus"), result_fields="key")


def test_a_pattern_on_a_field_the_events_do_not_carry_fails_at_synth():
    stack = _stack()
    bus = events.EventBus(stack, "Bus")
    step = make_step(stack, "Classify", result_bus=bus, result_fields=ResultFields.KEY)
    with pytest.raises(PropValidationError, match="filters on ResultFields.LABEL"):
        step.result_event_pattern(detail={"result": {"label": ["hot"]}})
    pattern = step.result_event_pattern(detail={"key_parts": [{"prefix": "u-"}]})
    assert pattern.detail == {"key_parts": [{"prefix": "u-"}]}
    plain = make_step(stack, "Plain", result_bus=bus)
    with pytest.raises(PropValidationError, match="ResultFields.KEY | ResultFields.PARSED"):
        plain.result_event_pattern(detail={"key_parts": ["x"], "result": {"parsed": ["y"]}})


# ---------------------------------------------------------------- point_in_time_recovery
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, {"pointInTimeRecoveryEnabled": True, "recoveryPeriodInDays": 35}),
        (True, {"pointInTimeRecoveryEnabled": True, "recoveryPeriodInDays": 35}),
        (Duration.days(7), {"pointInTimeRecoveryEnabled": True, "recoveryPeriodInDays": 7}),
        (Duration.hours(24), {"pointInTimeRecoveryEnabled": True, "recoveryPeriodInDays": 1}),
        (False, {"pointInTimeRecoveryEnabled": False}),
    ],
)
def test_point_in_time_recovery_sets_the_table_s_backups(value, expected):
    step = make_step(_stack(), "Classify", point_in_time_recovery=value)
    assert _table_backups(step) == expected


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (Duration.days(36), "36 days"),
        (Duration.hours(36), "1 day 12 hours"),
        (Duration.days(0), "0 days"),
        (7, "7"),
    ],
)
def test_a_bad_period_fails_at_synth_naming_the_prop_the_value_and_the_range(value, shown):
    with pytest.raises(PropValidationError) as raised:
        make_step(_stack(), "Classify", point_in_time_recovery=value)
    message = str(raised.value)
    assert "Leads/Classify': point_in_time_recovery must be True (35 days), False (off)" in message
    assert "between 1 and 35" in message and message.endswith(f"got {shown}")


def test_a_shared_table_keeps_its_own_backups():
    stack = _stack()
    table = dynamodb.Table(stack, "Shared", **idempotency_table_props())
    with pytest.raises(PropValidationError, match="applies to the table the step creates"):
        make_step(stack, "Classify", table=table, point_in_time_recovery=False)


def test_backups_off_are_acknowledged_to_cdk_nag_and_checkov_with_the_reason():
    from cdk_nag import AwsSolutionsChecks

    app = unvalidated_app(context=NO_BUNDLING)
    stack = cdk.Stack(app, "NoBackups")
    make_step(stack, "Classify", point_in_time_recovery=False)
    # The test's own secret (an API key cannot be rotated by Lambda); not the step's finding.
    cdk.Validations.of(stack).acknowledge(
        cdk.Acknowledgment(id="AwsSolutions-SMG4", reason="a test secret, never rotated")
    )
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()  # no unacknowledged error: DDB3 is acknowledged on the table
    template = Template.from_stack(stack)
    template.has_resource(
        "AWS::DynamoDB::Table",
        {
            "Metadata": Match.object_like(
                {"checkov": {"skip": Match.array_with([Match.object_like({"id": "CKV_AWS_28"})])}}
            )
        },
    )
    Annotations.from_stack(stack).has_no_error("*", Match.any_value())
