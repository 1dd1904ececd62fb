"""Issue 36, item 4: alarms reach someone, or synth says they do not.

A step whose alarms have no action at synth warns once, with an id a user acknowledges; a step
with ``alarm_topic`` (or with actions added by hand) does not. The README's example wires a
topic, and the Prospect Uploader warns once, about its missing subscription only.
"""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_sns as sns
from aws_cdk import cx_api
from aws_cdk.assertions import Template

from constructs_lib import ModelDelivery
from constructs_lib.idempotent_model_step import ALARMS_WITHOUT_ACTION_WARNING
from constructs_lib.prospect_uploader import ProspectUploaderStack
from tests.adoption.markdown import code_blocks, section

from .conftest import NO_BUNDLING, make_step, stack_messages, unvalidated_app

ACK = f"\\[ack: {ALARMS_WITHOUT_ACTION_WARNING}\\]"


@pytest.fixture
def stack() -> cdk.Stack:
    return cdk.Stack(unvalidated_app(context=NO_BUNDLING), "Alarms")


def silent_warnings(stack: cdk.Stack) -> list[tuple[str, str]]:
    """The alarm warnings of ``stack``'s app, from its synth (made here if none yet)."""
    return stack_messages(stack, cx_api.SynthesisMessageLevel.WARNING, ACK)


def test_a_step_without_alarm_topic_warns_with_the_acknowledgment_id(stack):
    # GIVEN a step with no alarm_topic
    make_step(stack)
    # THEN synth warns on the step, says how many alarms and how to silence it
    [(path, text)] = silent_warnings(stack)
    assert path == "/Alarms/Step"
    assert text.startswith("The 7 alarms of IdempotentModelStep 'Alarms/Step' have no alarm")
    assert "alarm_topic" in text and "acknowledge_warning" in text
    assert "docs/operations.md" in text


def test_a_step_with_alarm_topic_does_not_warn(stack):
    make_step(stack, alarm_topic=sns.Topic(stack, "Topic"))
    assert silent_warnings(stack) == []


def test_batch_delivery_alarms_are_counted_and_covered_by_alarm_topic(stack):
    # GIVEN two batch steps: their two batch alarms are appended after the others
    make_step(stack, "Silent", delivery=ModelDelivery.batch())
    make_step(stack, "Paged", delivery=ModelDelivery.batch(), alarm_topic=sns.Topic(stack, "T"))
    # THEN the silent one counts all 9 alarms; the paged one has an action on every one
    [(path, text)] = silent_warnings(stack)
    assert path == "/Alarms/Silent" and text.startswith("The 9 alarms")
    alarms = Template.from_stack(stack).find_resources("AWS::CloudWatch::Alarm")
    paged = [a for logical, a in alarms.items() if logical.startswith("Paged")]
    assert len(paged) == 9 and all(a["Properties"].get("AlarmActions") for a in paged)


def test_actions_added_after_the_constructor_count(stack):
    # GIVEN one step whose alarms all get an action by hand, one where only some do
    topic = sns.Topic(stack, "Topic")
    every = make_step(stack, "Every")
    some = make_step(stack, "Some")
    for alarm in every.alarms:
        alarm.add_alarm_action(cloudwatch_actions.SnsAction(topic))
    for alarm in some.alarms[:2]:
        alarm.add_alarm_action(cloudwatch_actions.SnsAction(topic))
    # THEN only the second warns, naming the 5 of 7 that notify nobody
    [(path, text)] = silent_warnings(stack)
    assert path == "/Alarms/Some" and text.startswith("5 of the 7 alarms")


def test_acknowledging_on_the_step_silences_it(stack):
    step = make_step(stack)
    cdk.Annotations.of(step).acknowledge_warning(
        ALARMS_WITHOUT_ACTION_WARNING, "a sandbox: nobody is paged"
    )
    assert silent_warnings(stack) == []


def test_acknowledging_on_the_stack_silences_every_step_before_or_after(stack):
    make_step(stack, "Before")
    cdk.Annotations.of(stack).acknowledge_warning(
        ALARMS_WITHOUT_ACTION_WARNING, "a sandbox: alarms are read on the dashboard"
    )
    make_step(stack, "After")
    assert silent_warnings(stack) == []


def test_the_prospect_uploader_warns_once_about_its_missing_subscription():
    # GIVEN the reference stack without -c alert_email
    stack = ProspectUploaderStack(unvalidated_app(context=NO_BUNDLING), "NoEmail")
    # THEN its steps' alarms notify AlertTopic (no step warning); the stack's one warning
    # says the topic has no subscriber, and that it is the alarms that reach nobody
    assert silent_warnings(stack) == []
    [(path, text)] = stack_messages(
        stack, cx_api.SynthesisMessageLevel.WARNING, "prospect-uploader:no-alert-email"
    )
    assert path == "/NoEmail" and "alarms" in text


def test_the_readme_example_wires_alarm_topic_into_every_alarm(tmp_path):
    # GIVEN the README's example as written, synthesized in this process without bundling
    # (the jsii process is already running, so its App gets the context in its source) and
    # without the built-in CloudFormation validation, whose report nothing here reads (its
    # rules engine cost 4.6 CPU-s of Node to start in a worker that had not started it yet;
    # cdk-nag still runs, and still fails the synth on an unacknowledged finding)
    [example] = code_blocks(section("README.md", "Use it in your own CDK app"), "python")
    assert example.count("app = cdk.App()\n") == 1
    unbundled = (
        f"app = cdk.App(context={NO_BUNDLING!r}, outdir={str(tmp_path)!r}, "
        "builtin_cloud_formation_validation=False)\n"
    )
    namespace: dict = {}
    exec(compile(example.replace("app = cdk.App()\n", unbundled), "README.md", "exec"), namespace)
    stack = namespace["stack"]
    # THEN its 15 alarms (Classify's 8, with result_bus, and Outreach's 7) each notify the
    # topic, and nothing warns about them
    alarms = Template.from_stack(stack).find_resources("AWS::CloudWatch::Alarm")
    assert len(alarms) == 15
    assert all(alarm["Properties"].get("AlarmActions") for alarm in alarms.values())
    assert silent_warnings(stack) == []
