"""Issue 36, item 4: a step subscribed to its own result events is refused at synth.

Refused only when the pattern really matches (EventBridge's semantics) on the bus the step
publishes to; the message names ``event_pattern`` and ``result_bus`` with their values.
"""

from __future__ import annotations

import re

import aws_cdk as cdk
import pytest
from aws_cdk import aws_events as events
from aws_cdk.assertions import Template
from aws_cdk.aws_events import Match

from constructs_lib import (
    RESULT_COMPLETED,
    RESULT_DEAD_LETTERED,
    EventBusV2,
    PropValidationError,
    ResultFields,
)
from constructs_lib.result_event_loop import own_results_matched

from .conftest import NO_BUNDLING, make_step, unvalidated_app

BOTH = (RESULT_COMPLETED, RESULT_DEAD_LETTERED)


@pytest.fixture
def stack() -> cdk.Stack:
    return cdk.Stack(unvalidated_app(context=NO_BUNDLING), "Loop")


def test_a_pattern_on_the_result_detail_type_alone_is_refused_naming_both_props(stack):
    # GIVEN a step publishing results on the bus it subscribes to
    bus = events.EventBus(stack, "Bus")
    # WHEN its pattern matches any "Model Step Completed" event, its own included
    with pytest.raises(PropValidationError) as raised:
        make_step(
            stack,
            event_bus=bus,
            result_bus=bus,
            event_pattern=events.EventPattern(detail_type=[RESULT_COMPLETED]),
        )
    # THEN synth refuses, naming the pattern, its source, the detail type and the bus
    assert str(raised.value) == (
        'IdempotentModelStep \'Loop/Step\': event_pattern {"detail-type": ["Model Step '
        "Completed\"]} matches the step's own result events (source 'Loop/Step', "
        "detail-type 'Model Step Completed') on result_bus 'Loop/Bus', the bus it "
        "subscribes to (event_bus 'Loop/Bus'): every result would come back as a new row "
        "and be answered again, a loop that bills a model request each turn. Filter "
        "event_pattern on its producer's source or detail-type, or publish the results on "
        "another bus (result_bus)."
    )


@pytest.mark.parametrize(
    "pattern, matched",
    [
        # no source and no detail-type: everything on the bus, both result types
        (events.EventPattern(detail={"key": Match.exists()}), BOTH),
        (events.EventPattern(source=["Loop/Step"]), BOTH),
        (events.EventPattern(source=Match.prefix("Loop/")), BOTH),
        (events.EventPattern(source=Match.wildcard("*/Step")), BOTH),
        (events.EventPattern(source=Match.anything_but("leads.producer")), BOTH),
        (
            events.EventPattern(detail_type=Match.anything_but(RESULT_COMPLETED)),
            (RESULT_DEAD_LETTERED,),
        ),
        (
            events.EventPattern(source=["Loop/Step"], detail={"result": {"label": ["hot"]}}),
            BOTH,
        ),
    ],
)
def test_every_pattern_that_matches_its_own_results_is_refused(stack, pattern, matched):
    bus = events.EventBus(stack, "Bus")
    with pytest.raises(PropValidationError, match="result_bus 'Loop/Bus'") as raised:
        make_step(stack, event_bus=bus, result_bus=bus, event_pattern=pattern)
    named = re.search(r"detail-type ('.*?')\) on", str(raised.value))
    assert named and named.group(1) == " and ".join(repr(t) for t in matched)


@pytest.mark.parametrize(
    "pattern",
    [
        events.EventPattern(source=["leads.producer"]),  # another producer's source
        events.EventPattern(detail_type=["Lead Received"]),  # other events
        events.EventPattern(source=Match.prefix("Other/"), detail_type=[RESULT_COMPLETED]),
        # a detail field result events never carry
        events.EventPattern(detail={"upload_id": Match.exists()}),
        # synth cannot know an event's account: not refused
        events.EventPattern(detail_type=[RESULT_COMPLETED], account=["111111111111"]),
    ],
)
def test_a_pattern_that_cannot_match_its_own_results_synthesizes(stack, pattern):
    bus = events.EventBus(stack, "Bus")
    make_step(stack, event_bus=bus, result_bus=bus, event_pattern=pattern)
    Template.from_stack(stack).resource_count_is("AWS::Events::Rule", 1)


def test_the_same_pattern_on_another_bus_synthesizes(stack):
    rows, results = events.EventBus(stack, "Rows"), events.EventBus(stack, "Results")
    make_step(
        stack,
        event_bus=rows,
        result_bus=results,
        event_pattern=events.EventPattern(detail_type=[RESULT_COMPLETED]),
    )
    Template.from_stack(stack).resource_count_is("AWS::Events::Rule", 1)


def test_a_label_filter_on_events_without_labels_synthesizes(stack):
    # GIVEN results that never carry result.label (ResultFields.NONE)
    bus = events.EventBus(stack, "Bus")
    make_step(
        stack,
        event_bus=bus,
        result_bus=bus,
        result_fields=ResultFields.NONE,
        event_pattern=events.EventPattern(
            source=["Loop/Step"], detail={"result": {"label": ["hot"]}}
        ),
    )
    Template.from_stack(stack).resource_count_is("AWS::Events::Rule", 1)


def test_the_default_bus_as_both_is_refused(stack):
    # GIVEN no event_bus (the default bus) and the default bus imported as result_bus
    default = events.EventBus.from_event_bus_name(stack, "Default", "default")
    with pytest.raises(PropValidationError) as raised:
        make_step(
            stack,
            result_bus=default,
            event_pattern=events.EventPattern(detail_type=[RESULT_DEAD_LETTERED]),
        )
    assert "on result_bus 'Loop/Default'" in str(raised.value)
    assert "(event_bus None (the default bus))" in str(raised.value)


def test_a_v2_bus_as_both_is_refused(stack):
    bus = EventBusV2(stack, "RowBus")
    with pytest.raises(PropValidationError, match="result_bus 'Loop/RowBus'"):
        make_step(
            stack,
            event_bus=bus,
            result_bus=bus,
            event_pattern=events.EventPattern(source=["Loop/Step"]),
        )


def test_a_step_following_another_steps_results_on_one_bus_synthesizes(stack):
    # GIVEN the README's chain: both steps publish on the bus they subscribe to
    bus = events.EventBus(stack, "Bus")
    classify = make_step(stack, "Classify", event_bus=bus, result_bus=bus)
    make_step(
        stack,
        "Outreach",
        event_bus=bus,
        result_bus=bus,
        event_pattern=classify.result_event_pattern(detail={"result": {"label": ["hot"]}}),
    )
    Template.from_stack(stack).resource_count_is("AWS::Events::Rule", 2)


@pytest.mark.parametrize(
    "pattern, matched",
    [
        ({}, BOTH),
        ({"source": ["S/Step"], "detail-type": [RESULT_COMPLETED]}, (RESULT_COMPLETED,)),
        ({"source": [{"equals-ignore-case": "s/step"}]}, BOTH),
        ({"source": [{"suffix": "/Step"}]}, BOTH),
        ({"source": [{"prefix": {"equals-ignore-case": "s/"}}]}, BOTH),
        ({"source": [{"anything-but": {"prefix": "Other/"}}]}, BOTH),
        ({"source": [{"exists": True}]}, BOTH),
        ({"source": [{"anything-but": {"prefix": "S/"}}]}, ()),
        ({"source": [{"anything-but": "S/Step"}]}, ()),
        ({"source": [{"exists": False}]}, ()),
        ({"source": [{"wildcard": "S/?tep"}]}, ()),  # ? is literal in EventBridge
        ({"source": [{"numeric": [">", 0]}]}, ()),
        ({"source": [{"some-new-operator": "S/Step"}]}, ()),  # unknown: never refused
        ({"detail": {"replay_generation": [{"exists": False}]}}, BOTH),
        ({"detail": {"upload_id": [{"exists": False}]}}, BOTH),
        ({"detail": {"key_parts": [{"exists": True}]}}, ()),  # not carried without KEY
        ({"region": ["eu-west-1"]}, ()),
    ],
)
def test_event_bridge_matching_of_a_source_and_detail_type(pattern, matched):
    assert own_results_matched(pattern, "S/Step", BOTH, ResultFields.LABEL) == matched
