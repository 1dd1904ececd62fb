"""An EventBridge v2 bus in the local engine, on a hand-written template fragment: publish-side
deduplication, the subscriber's filter, its role, retry policy and on-failure queue."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import boto3
import pytest

from constructs_lib.local_engine.assembly import CloudAssembly
from constructs_lib.local_engine.engine import EngineSettings, LocalEngine

HANDLERS = textwrap.dedent(
    """
    import json
    import os

    import boto3

    SEEN = []


    def publish(event, context):
        client = boto3.session.Session().client("eventbridgev2")
        entries = [
            {
                "Source": "demo",
                "DetailType": "Row" if n % 5 else "Ignored",
                "Detail": json.dumps({"row": n}),
                "SystemMetadata": {"DeduplicationId": f"upload#{n}"},
            }
            for n in range(event["rows"])
        ]
        answer = client.put_events(EventBusArn=os.environ["BUS_ARN"], Entries=entries)
        return [entry["SuccessCode"] for entry in answer["Entries"]]


    def consume(event, context):
        SEEN.extend(json.loads(r["body"])["detail"]["row"] for r in event["Records"])
        return {"batchItemFailures": []}
    """
)


def _role(name: str, service: str, statements: list[dict]) -> dict:
    return {
        name: {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "AssumeRolePolicyDocument": {
                    "Statement": [
                        {
                            "Action": "sts:AssumeRole",
                            "Effect": "Allow",
                            "Principal": {"Service": service},
                        }
                    ]
                },
                "Policies": [{"PolicyName": "p", "PolicyDocument": {"Statement": statements}}],
            },
        }
    }


def _template(subscriber_may_send: bool, may_fail_over: bool = True) -> dict:
    queue_arn = {"Fn::GetAtt": ["Buffer", "Arn"]}
    bus_arn = {"Fn::GetAtt": ["Bus", "EventBusArn"]}
    resources = {
        "Bus": {"Type": "AWS::EventsV2::EventBus", "Properties": {"Name": "rows"}},
        "Buffer": {"Type": "AWS::SQS::Queue", "Properties": {"VisibilityTimeout": 60}},
        "Failed": {"Type": "AWS::SQS::Queue", "Properties": {}},
        "Publisher": {
            "Type": "AWS::Lambda::Function",
            "Properties": {
                "Handler": "v2demo.handlers.publish",
                "Role": {"Fn::GetAtt": ["PublisherRole", "Arn"]},
                "Environment": {"Variables": {"BUS_ARN": bus_arn}},
            },
        },
        "Consumer": {
            "Type": "AWS::Lambda::Function",
            "Properties": {
                "Handler": "v2demo.handlers.consume",
                "Role": {"Fn::GetAtt": ["ConsumerRole", "Arn"]},
            },
        },
        "Mapping": {
            "Type": "AWS::Lambda::EventSourceMapping",
            "Properties": {
                "BatchSize": 1,
                "EventSourceArn": queue_arn,
                "FunctionName": {"Ref": "Consumer"},
                "FunctionResponseTypes": ["ReportBatchItemFailures"],
                "ScalingConfig": {"MaximumConcurrency": 2},
            },
        },
        "Subscriber": {
            "Type": "AWS::EventsV2::Subscriber",
            "Properties": {
                "EventBusArn": bus_arn,
                "FilterConfiguration": {
                    "Filters": [{"Pattern": json.dumps({"detail-type": ["Row"]}), "Scope": "DATA"}]
                },
                "InvokeConfiguration": {
                    "RoleArn": {"Fn::GetAtt": ["SubscriberRole", "Arn"]},
                    "SqsParameters": {},
                    "TargetArn": queue_arn,
                },
                "OnFailureConfiguration": {"Arn": {"Fn::GetAtt": ["Failed", "Arn"]}},
                "RetryPolicy": {"MaxRetryAttempts": 2, "MaxEventAgeInSeconds": 600},
            },
        },
    }
    resources |= _role(
        "PublisherRole",
        "lambda.amazonaws.com",
        [{"Effect": "Allow", "Action": "events:PutEvents", "Resource": bus_arn}],
    )
    resources |= _role(
        "ConsumerRole",
        "lambda.amazonaws.com",
        [
            {
                "Effect": "Allow",
                "Action": ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"],
                "Resource": queue_arn,
            }
        ],
    )
    send = "sqs:SendMessage" if subscriber_may_send else "sqs:GetQueueUrl"
    resources |= _role(
        "SubscriberRole",
        "events.amazonaws.com",
        [
            {"Effect": "Allow", "Action": send, "Resource": queue_arn},
            # The subscriber sends what it cannot deliver to its on-failure queue with its
            # own role, too.
            {
                "Effect": "Allow",
                "Action": "sqs:SendMessage" if may_fail_over else "sqs:GetQueueUrl",
                "Resource": {"Fn::GetAtt": ["Failed", "Arn"]},
            },
        ],
    )
    return {"Resources": resources}


@pytest.fixture
def code_root(tmp_path: Path) -> Path:
    package = tmp_path / "code" / "v2demo"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "handlers.py").write_text(HANDLERS)
    return tmp_path / "code"


def _run(
    tmp_path: Path,
    code_root: Path,
    *,
    may_send: bool,
    duplicates: int,
    minute: float,
    runs: int,
    may_fail_over: bool = True,
):
    template = _template(may_send, may_fail_over)
    assembly = CloudAssembly("Demo", template, tmp_path / "Demo.template.json")
    settings = EngineSettings(duplicates=duplicates, seconds_per_minute=minute)
    engine = LocalEngine(assembly, settings, code_root=code_root)
    with engine:
        publisher = engine.functions["Publisher"]
        for _ in range(runs):  # a producer run again (an S3 duplicate, a retry)
            publisher.invoke({"rows": 10})
            engine.wait_until_settled()
        seen = list(engine.runtime.module("v2demo.handlers").SEEN)
        (bus,) = engine.buses_v2.buses.values()
        failed = (
            boto3.session.Session(region_name="us-east-1")
            .client("sqs")
            .receive_message(
                QueueUrl=engine.aws.physical["Failed"].attributes["QueueUrl"],
                MaxNumberOfMessages=10,
                MessageAttributeNames=["All"],
            )
            .get("Messages", [])
        )
        return bus.stats, seen, failed, engine.iam


def test_a_repeat_within_the_window_is_deduplicated_and_never_delivered(tmp_path, code_root):
    # A minute of 1 s: the 300 s window lasts 5 s, longer than the first run takes.
    stats, seen, failed, iam = _run(
        tmp_path, code_root, may_send=True, duplicates=2, minute=1.0, runs=2
    )
    assert stats.entries == 20 and stats.published == 10 and stats.deduplicated == 10
    # 8 of 10 match the filter; each is delivered twice downstream (at-least-once), never 4x.
    assert sorted(seen) == sorted(2 * [n for n in range(10) if n % 5])
    assert failed == [] and iam.denials == []


def test_a_subscriber_whose_role_cannot_send_retries_then_fills_its_on_failure_queue(
    tmp_path, code_root
):
    # One producer run: on a 0.1 s minute the 300 s window is 0.5 s, too short to count on
    # a second run being deduplicated on a loaded machine.
    stats, seen, failed, iam = _run(
        tmp_path, code_root, may_send=False, duplicates=1, minute=0.1, runs=1
    )
    assert seen == []
    assert stats.delivery_retries == 8 * 2  # MaxRetryAttempts 2 for each of 8 events
    assert stats.sent_to_on_failure == 8 and len(failed) == 8
    assert failed[0]["MessageAttributes"]["ERROR_CODE"]["StringValue"] == "DeliveryDenied"
    assert {d.function for d in iam.denials} == {"Subscriber"}


def test_a_subscriber_that_may_not_send_to_its_on_failure_queue_loses_the_event_visibly(
    tmp_path, code_root
):
    # The on-failure send is made with the subscriber's role: without SendMessage there the
    # event is lost, and each loss is a denial of the subscriber's, never a silent drop.
    stats, seen, failed, iam = _run(
        tmp_path, code_root, may_send=False, duplicates=1, minute=0.1, runs=1, may_fail_over=False
    )
    assert seen == [] and failed == [] and stats.sent_to_on_failure == 8
    failed_arn = "arn:aws:sqs:us-east-1:123456789012:"
    lost = [d for d in iam.denials if d.resource.startswith(failed_arn) and "Failed" in d.resource]
    assert len(lost) == 8 and {d.action for d in lost} == {"sqs:SendMessage"}
