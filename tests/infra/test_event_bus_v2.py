"""A step on an EventBridge v2 bus (issue 12.1) and SnapStart (issue 11.3), one property a test."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import Duration
from aws_cdk import aws_iam as iam
from moto.iam.access_control import IAMPolicy

from constructs_lib import EventBusV2, PropValidationError

from .conftest import NO_BUNDLING, make_step, unvalidated_app

STACK = "IdempotentModelStepDemoV2"


@pytest.fixture(scope="module")
def raw(demo) -> dict:
    return demo.templates[STACK]


def resources(raw: dict, type_: str) -> dict[str, dict]:
    return {k: v for k, v in raw["Resources"].items() if v["Type"] == type_}


def only(raw: dict, type_: str) -> tuple[str, dict]:
    found = resources(raw, type_)
    assert len(found) == 1, f"expected one {type_}, found {list(found)}"
    return next(iter(found.items()))


def queue_id(raw: dict, name: str) -> str:
    return next(k for k in resources(raw, "AWS::SQS::Queue") if k.startswith(f"Classify{name}"))


def arn(logical: str) -> dict:
    return {"Fn::GetAtt": [logical, "Arn"]}


def subscriber(raw: dict) -> dict:
    return only(raw, "AWS::EventsV2::Subscriber")[1]["Properties"]


def policy_of(raw: dict, prefix: str) -> dict:
    return next(
        v["Properties"]["PolicyDocument"] for k, v in raw["Resources"].items()
        if k.startswith(prefix) and v["Type"] == "AWS::IAM::Policy"
    )  # fmt: skip


# ---------------------------------------------------------------- the bus
def test_v2_bus_is_an_eventsv2_bus_named_from_its_construct_path(raw):
    # GIVEN EventBusV2(stack, "Bus")  WHEN synthesized  THEN CloudFormation gets a stable name
    bus = only(raw, "AWS::EventsV2::EventBus")[1]["Properties"]
    assert bus["Name"].startswith("IdempotentModelStepDemoV2-Bus-")


def test_v2_step_creates_no_classic_rule(raw):
    assert resources(raw, "AWS::Events::Rule") == {}


def test_producer_may_put_only_its_source_and_detail_type_on_the_bus(raw):
    bus = only(raw, "AWS::EventsV2::EventBus")[0]
    statements = policy_of(raw, "ProducerDefaultPolicy")["Statement"]
    assert statements == [
        {
            "Action": "events:PutEvents",
            "Condition": {
                "StringEquals": {
                    "events:source": ["demo.uploads"],
                    "events:detail-type": ["Row Validated"],
                }
            },
            "Effect": "Allow",
            "Resource": {"Fn::GetAtt": [bus, "EventBusArn"]},
        }
    ]


# ---------------------------------------------------------------- the subscriber
def test_subscriber_is_on_the_v2_bus(raw):
    bus = only(raw, "AWS::EventsV2::EventBus")[0]
    assert subscriber(raw)["EventBusArn"] == {"Fn::GetAtt": [bus, "EventBusArn"]}


def test_subscriber_filters_the_event_data_with_the_event_pattern(raw):
    (filter_,) = subscriber(raw)["FilterConfiguration"]["Filters"]
    assert filter_["Scope"] == "DATA"
    assert json.loads(filter_["Pattern"]) == {
        "source": ["demo.uploads"],
        "detail-type": ["Row Validated"],
    }


def test_subscriber_delivers_the_raw_event_to_the_buffer_queue(raw):
    # RAW = the PutEvents envelope (source, detail-type, time, detail): the same
    # SQS body a classic rule target sends, which the runtime parses.
    props = subscriber(raw)
    assert props["InvokeConfiguration"]["TargetArn"] == arn(queue_id(raw, "BufferQueue"))
    assert props["Transformer"] == {"Type": "RAW"}
    assert props["Type"] == "UNORDERED"


def test_subscriber_retry_policy_comes_from_the_step_props(raw):
    assert subscriber(raw)["RetryPolicy"] == {
        "MaxRetryAttempts": 10,
        "MaxEventAgeInSeconds": 21600,
        "RetryStrategy": "ALL",
    }


def test_subscriber_dead_letters_to_the_step_dlq(raw):
    assert subscriber(raw)["OnFailureConfiguration"] == {
        "Arn": arn(queue_id(raw, "DeadLetterQueue"))
    }


def test_subscriber_assumes_a_role_only_eventbridge_can_assume(raw):
    role_id = subscriber(raw)["InvokeConfiguration"]["RoleArn"]["Fn::GetAtt"][0]
    trust = raw["Resources"][role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert [s["Principal"] for s in trust] == [{"Service": "events.amazonaws.com"}]


def test_only_eventbridge_acting_for_this_subscriber_may_assume_its_role(raw):
    # GIVEN the trust policy  THEN it names this account and this subscriber (confused deputy)
    role_id = subscriber(raw)["InvokeConfiguration"]["RoleArn"]["Fn::GetAtt"][0]
    [trust] = raw["Resources"][role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    condition = trust["Condition"]
    assert condition["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    source_arn = json.dumps(condition["ArnLike"]["aws:SourceArn"])
    assert f":subscriber/{subscriber(raw)['Name']}/*" in source_arn


@pytest.mark.parametrize(
    "action, queue, expected",
    [
        ("sqs:SendMessage", "BufferQueue", "PERMITTED"),
        ("sqs:SendMessage", "DeadLetterQueue", "PERMITTED"),
        ("sqs:ReceiveMessage", "BufferQueue", "NEUTRAL"),
        ("sqs:DeleteMessage", "DeadLetterQueue", "NEUTRAL"),
        ("lambda:InvokeFunction", "BufferQueue", "NEUTRAL"),
    ],
)
def test_subscriber_role_may_only_send_to_its_two_queues(raw, action, queue, expected):
    # GIVEN the role's policy, with each queue ARN standing for its GetAtt
    doc = json.dumps(policy_of(raw, "ClassifySubscriberRoleDefaultPolicy"))
    arns = {
        q: f"arn:aws:sqs:us-east-1:111122223333:{q}" for q in ("BufferQueue", "DeadLetterQueue")
    }
    for name, value in arns.items():
        doc = doc.replace(json.dumps(arn(queue_id(raw, name))), json.dumps(value))
    # WHEN moto's IAM evaluator checks the call  THEN only SendMessage to them is allowed
    assert IAMPolicy(doc).is_action_permitted(action, arns[queue]).name == expected


def test_subscriber_waits_for_its_role_policy(raw):
    _, resource = only(raw, "AWS::EventsV2::Subscriber")
    assert any(d.startswith("ClassifySubscriberRoleDefaultPolicy") for d in resource["DependsOn"])


def test_buffer_queue_has_no_resource_policy_for_eventbridge_on_a_v2_bus(raw):
    # Same-account v2 delivery is authorized by the subscriber role, not the queue policy.
    text = json.dumps(resources(raw, "AWS::SQS::QueuePolicy"))
    assert "events.amazonaws.com" not in text


# ---------------------------------------------------------------- v2 alarms
def _alarms(raw: dict) -> dict[str, dict]:
    return {k: v["Properties"] for k, v in resources(raw, "AWS::CloudWatch::Alarm").items()}


@pytest.mark.parametrize("metric", ["OnFailureDestinationDelivered", "EventsDropped"])
def test_v2_delivery_alarms_use_the_bus_and_subscriber_arns(raw, metric):
    [alarm] = [a for a in _alarms(raw).values() if a["MetricName"] == metric]
    bus = only(raw, "AWS::EventsV2::EventBus")[0]
    sub = only(raw, "AWS::EventsV2::Subscriber")[0]
    assert alarm["Namespace"] == "AWS/EventsV2"
    assert alarm["Dimensions"] == [
        {"Name": "EventBus", "Value": {"Fn::GetAtt": [bus, "EventBusArn"]}},
        {"Name": "Subscriber", "Value": {"Fn::GetAtt": [sub, "SubscriberArn"]}},
    ]


def test_v2_alarms_treat_missing_data_as_not_breaching(raw):
    assert {a["TreatMissingData"] for a in _alarms(raw).values()} == {"notBreaching"}


# ---------------------------------------------------------------- SnapStart
def test_snap_start_is_enabled_on_published_versions(raw):
    _, function = only(raw, "AWS::Lambda::Function")
    assert function["Properties"]["SnapStart"] == {"ApplyOn": "PublishedVersions"}


def test_snap_start_alias_points_at_the_published_version(raw):
    version, _ = only(raw, "AWS::Lambda::Version")
    _, alias = only(raw, "AWS::Lambda::Alias")
    assert alias["Properties"]["Name"] == "live"
    assert alias["Properties"]["FunctionVersion"] == {"Fn::GetAtt": [version, "Version"]}


def test_snap_start_deletes_a_superseded_version_and_its_billed_snapshot(raw):
    _, version = only(raw, "AWS::Lambda::Version")
    assert version["DeletionPolicy"] == "Delete"


def test_snap_start_mappings_invoke_the_alias_not_latest(raw):
    # GIVEN the buffer queue's mapping and the redrive queue's  THEN both invoke "live"
    mappings = resources(raw, "AWS::Lambda::EventSourceMapping").values()
    assert len(mappings) == 2
    assert all(":live" in json.dumps(m["Properties"]["FunctionName"]) for m in mappings)


def test_snap_start_alias_has_a_fixed_construct_id(raw):
    alias_id, _ = only(raw, "AWS::Lambda::Alias")
    assert alias_id.startswith("ClassifyFunctionAlias")


def test_snap_start_is_off_by_default(demo):
    function = next(
        v for v in demo.templates["IdempotentModelStepDemo"]["Resources"].values()
        if v["Type"] == "AWS::Lambda::Function"
    )  # fmt: skip
    assert "SnapStart" not in function["Properties"]


# ---------------------------------------------------------------- validation
@pytest.fixture
def stack() -> cdk.Stack:
    return cdk.Stack(unvalidated_app(context=NO_BUNDLING), "V2")


def test_v2_step_still_checks_the_retry_ranges_the_v2_api_allows(stack):
    bus = EventBusV2(stack, "Bus")
    with pytest.raises(
        PropValidationError, match=r"event_retry_attempts must be between 0 and 185"
    ):
        make_step(stack, event_bus=bus, event_retry_attempts=186)


def test_v2_step_refuses_an_event_age_past_the_v2_maximum(stack):
    bus = EventBusV2(stack, "Bus")
    with pytest.raises(
        PropValidationError, match=r"max_event_age must be between 1 minute and 1 day"
    ):
        make_step(stack, event_bus=bus, max_event_age=Duration.hours(25))


def test_bus_retention_range(stack):
    with pytest.raises(
        PropValidationError, match=r"retention_days must be between 1 and 365, got 0"
    ):
        EventBusV2(stack, "Bus", retention_days=0)


def test_grant_needs_sources_and_detail_types(stack):
    bus = EventBusV2(stack, "Bus")
    role = iam.Role(stack, "R", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    with pytest.raises(PropValidationError, match=r"needs at least one source and one detail type"):
        bus.grant_put_events_to(role, sources=[], detail_types=["x"])


def test_v2_step_exposes_subscriber_and_no_rule(stack):
    step = make_step(stack, event_bus=EventBusV2(stack, "Bus"))
    assert step.rule is None and step.subscriber is not None and step.subscriber_role is not None


IMPORTED_ARN = "arn:aws:events:us-east-1:111122223333:event-busv2/rows/abcdefghijklmnopqrstuvwxy"


def test_step_subscribes_to_a_bus_imported_by_arn(tmp_path_factory):
    # GIVEN a v2 bus from another stack, by ARN  WHEN a step subscribes
    from .conftest import new_app, synth

    app = new_app(tmp_path_factory, "imported-v2")
    stack = cdk.Stack(app, "ImportedV2")
    bus = EventBusV2.from_event_bus_arn(stack, "Rows", IMPORTED_ARN)
    make_step(stack, event_bus=bus)
    raw = synth(app).templates["ImportedV2"]
    # THEN the subscriber is on that ARN and no bus is created here
    assert subscriber(raw)["EventBusArn"] == IMPORTED_ARN
    assert resources(raw, "AWS::EventsV2::EventBus") == {}
    assert bus.event_bus_name == "rows"


def test_imported_bus_must_be_a_v2_arn(stack):
    classic = "arn:aws:events:us-east-1:111122223333:event-bus/rows"
    with pytest.raises(PropValidationError, match=r"event_bus_arn must be a v2 bus ARN"):
        EventBusV2.from_event_bus_arn(stack, "Rows", classic)
