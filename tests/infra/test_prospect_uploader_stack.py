"""What the Prospect Uploader stack synthesizes (issue 4, items 1-7)."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Annotations, Match
from syrupy.extensions.json import JSONSnapshotExtension

from constructs_lib import PropValidationError
from constructs_lib.prospect_uploader import ProspectUploaderStack

from .conftest import NO_BUNDLING, Synthesized, new_app, synth
from .test_idempotent_model_step import _has_physical_name
from .test_snapshot_and_compliance import acknowledgments, lint, mask_asset_hashes

STACK = "ProspectUploader"


@pytest.fixture(scope="module")
def raw(prospect: Synthesized) -> dict:
    return prospect.templates[STACK]


def by_path(raw: dict, suffix: str) -> tuple[str, dict]:
    """The one resource whose construct path ends with ``suffix``."""
    found = [
        (k, v) for k, v in raw["Resources"].items()
        if v.get("Metadata", {}).get("aws:cdk:path", "").endswith(suffix)
    ]  # fmt: skip
    assert len(found) == 1, (suffix, [k for k, _ in found])
    return found[0]


def props(raw: dict, suffix: str) -> dict:
    return by_path(raw, suffix)[1]["Properties"]


def ref(raw: dict, suffix: str) -> dict:
    return {"Ref": by_path(raw, suffix)[0]}


def statements_of(raw: dict, role_suffix: str) -> list[dict]:
    return props(raw, f"{role_suffix}ServiceRole/DefaultPolicy/Resource")["PolicyDocument"][
        "Statement"
    ]


def actions_of(raw: dict, role_suffix: str) -> set[str]:
    out = set()
    for statement in statements_of(raw, role_suffix):
        action = statement["Action"]
        out |= {action} if isinstance(action, str) else set(action)
    return out


# ------------------------------------------------------------- 1. upload bucket
def test_upload_bucket_blocks_all_public_access(raw):
    assert props(raw, "UploadBucket/Resource")["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True, "BlockPublicPolicy": True,
        "IgnorePublicAcls": True, "RestrictPublicBuckets": True,
    }  # fmt: skip


def test_upload_bucket_is_encrypted(raw):
    encryption = props(raw, "UploadBucket/Resource")["BucketEncryption"]
    assert encryption["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "AES256"
    }


def test_upload_bucket_refuses_non_tls_access(raw):
    policy = props(raw, "UploadBucket/Policy/Resource")["PolicyDocument"]["Statement"]
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for s in policy
    )


def test_upload_bucket_sends_events_to_eventbridge_natively(raw):
    notification = props(raw, "UploadBucket/Resource")["NotificationConfiguration"]
    assert notification == {"EventBridgeConfiguration": {"EventBridgeEnabled": True}}
    assert not [
        v for v in raw["Resources"].values() if v["Type"] == "Custom::S3BucketNotifications"
    ]


def test_csv_uploads_start_the_splitter(raw):
    rule = props(raw, "SplitterRule/Resource")
    assert rule["EventPattern"] == {
        "source": ["aws.s3"],
        "detail-type": ["Object Created"],
        "detail": {
            "bucket": {"name": [ref(raw, "UploadBucket/Resource")]},
            "object": {"key": [{"suffix": ".csv"}]},
        },
    }
    target = rule["Targets"][0]
    assert target["Arn"] == {"Fn::GetAtt": [by_path(raw, "/Splitter/Resource")[0], "Arn"]}
    assert target["DeadLetterConfig"]["Arn"] == {
        "Fn::GetAtt": [by_path(raw, "FailureQueue/Resource")[0], "Arn"]
    }


# ------------------------------------------------------------- 2. splitter
def test_splitter_environment(raw):
    env = props(raw, "/Splitter/Resource")["Environment"]["Variables"]
    assert env["EVENT_BUS_NAME"] == ref(raw, "ProspectBus/Resource")
    assert env["FAILURES_TABLE_NAME"] == ref(raw, "FailuresTable/Resource")
    assert env["IDEMPOTENCY_TABLE_NAME"] == ref(raw, "IdempotencyTable/Resource")
    assert env["MAX_UPLOAD_BYTES"] == str(50 * 1024 * 1024)


def test_splitter_may_read_upload_objects_publish_and_record_only(raw):
    assert actions_of(raw, "Splitter") == {
        "logs:CreateLogStream", "logs:PutLogEvents", "s3:GetObject", "s3:GetObjectVersion",
        "s3:ListBucket", "events:PutEvents", "dynamodb:PutItem", "dynamodb:BatchWriteItem",
        "dynamodb:GetItem",
        "dynamodb:UpdateItem", "dynamodb:DeleteItem",
        # granted by the on-failure destination, on FailureQueue only
        "sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl",
    }  # fmt: skip


def test_splitter_failures_after_retries_go_to_the_failure_queue(raw):
    configs = [
        v["Properties"] for v in raw["Resources"].values()
        if v["Type"] == "AWS::Lambda::EventInvokeConfig"
        and v["Properties"]["FunctionName"] == ref(raw, "/Splitter/Resource")
    ]  # fmt: skip
    assert configs[0]["DestinationConfig"]["OnFailure"]["Destination"] == {
        "Fn::GetAtt": [by_path(raw, "FailureQueue/Resource")[0], "Arn"]
    }


# ------------------------------------------------------------- 3. classify step
def test_classify_rule_matches_validated_rows_on_the_custom_bus(raw):
    rule = props(raw, "Classify/Rule/Resource")
    assert rule["EventBusName"] == ref(raw, "ProspectBus/Resource")
    assert rule["EventPattern"] == {
        "source": ["prospect-uploader"], "detail-type": ["Prospect Row Validated"]
    }  # fmt: skip


def test_classify_runs_the_custom_classifier_keyed_on_upload_and_row(raw):
    fn = props(raw, "Classify/Function/Resource")
    env = fn["Environment"]["Variables"]
    assert fn["Handler"] == "prospect_classifier.handler.handler"
    assert env["IDEMPOTENCY_KEY"] == "[upload_id, row_number]"
    assert env["ALLOWED_LABELS"] == "hot,warm,cold"
    assert env["PROSPECTS_TABLE_NAME"] == ref(raw, "ProspectsTable/Resource")


def test_classify_shares_the_idempotency_table_and_failure_queue(raw):
    env = props(raw, "Classify/Function/Resource")["Environment"]["Variables"]
    assert env["IDEMPOTENCY_TABLE_NAME"] == ref(raw, "IdempotencyTable/Resource")
    assert env["DEAD_LETTER_QUEUE_URL"] == ref(raw, "FailureQueue/Resource")


def test_prospects_table_is_keyed_by_upload_and_row(raw):
    table = props(raw, "ProspectsTable/Resource")
    assert table["KeySchema"] == [
        {"AttributeName": "upload_id", "KeyType": "HASH"},
        {"AttributeName": "row_number", "KeyType": "RANGE"},
    ]
    assert {"AttributeName": "row_number", "AttributeType": "N"} in table["AttributeDefinitions"]


def test_classifier_may_only_upsert_prospects(raw):
    table_id = by_path(raw, "ProspectsTable/Resource")[0]
    touching = [s for s in statements_of(raw, "Classify/Function") if table_id in json.dumps(s)]
    assert [s["Action"] for s in touching] == ["dynamodb:UpdateItem"]


# ------------------------------------------------------------- 4. recorder
def test_recorder_consumes_the_failure_queue_with_partial_batch_responses(raw):
    # The Classify step has its own mapping (its buffer queue); pick the recorder's.
    mapping = next(
        v["Properties"] for v in raw["Resources"].values()
        if v["Type"] == "AWS::Lambda::EventSourceMapping"
        and v["Metadata"]["aws:cdk:path"].startswith("ProspectUploader/FailureRecorder/")
    )  # fmt: skip
    assert mapping["EventSourceArn"] == {
        "Fn::GetAtt": [by_path(raw, "FailureQueue/Resource")[0], "Arn"]
    }
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_recorder_writes_only_to_the_failures_table(raw):
    table_id = by_path(raw, "FailuresTable/Resource")[0]
    dynamo = [s for s in statements_of(raw, "FailureRecorder") if "dynamodb" in json.dumps(s)]
    assert [s["Action"] for s in dynamo] == ["dynamodb:UpdateItem"]
    assert table_id in json.dumps(dynamo[0]["Resource"])


def test_failures_table_holds_personal_data_safely(raw):
    table = props(raw, "FailuresTable/Resource")
    assert table["SSESpecification"] == {"SSEEnabled": True}
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert by_path(raw, "FailuresTable/Resource")[1]["DeletionPolicy"] == "Retain"


# ------------------------------------------------------------- 5. email alerts
def test_alert_topic_is_encrypted_and_tls_only(raw):
    assert props(raw, "AlertTopic/Resource")["KmsMasterKeyId"] == {
        "Fn::GetAtt": [by_path(raw, "AlertKey/Resource")[0], "Arn"]
    }
    policy = props(raw, "AlertTopic/Policy/Resource")["PolicyDocument"]["Statement"]
    assert any(s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in policy)


def test_every_alarm_notifies_the_alert_topic(raw):
    alarms = [
        v["Properties"] for v in raw["Resources"].values() if v["Type"] == "AWS::CloudWatch::Alarm"
    ]
    assert len(alarms) == 10  # the Classify step's buffer-age alarm is the tenth
    assert all(a["AlarmActions"] == [ref(raw, "AlertTopic/Resource")] for a in alarms)
    assert {a["TreatMissingData"] for a in alarms} == {"notBreaching"}


def test_one_summary_mail_per_upload_with_failures(raw):
    rule = props(raw, "UploadAlertRule/Resource")
    assert rule["EventPattern"] == {
        "source": ["prospect-uploader"],
        "detail-type": ["Prospect Upload Summarized"],
        "detail": {"$or": [{"invalid": [{"numeric": [">", 0]}]}, {"status": ["rejected"]}]},
    }
    target = rule["Targets"][0]
    assert target["Arn"] == ref(raw, "AlertTopic/Resource")
    assert "upload_id" in json.dumps(target["InputTransformer"])


def test_without_alert_email_there_is_no_subscription_and_a_warning(raw):
    assert not [v for v in raw["Resources"].values() if v["Type"] == "AWS::SNS::Subscription"]
    stack = ProspectUploaderStack(cdk.App(context=NO_BUNDLING), "NoEmail")
    Annotations.from_stack(stack).has_warning(
        "/NoEmail", Match.string_like_regexp("No alert_email context")
    )


def test_alert_email_context_subscribes_the_address(tmp_path_factory):
    app = new_app(tmp_path_factory, "email")
    app.node.set_context("alert_email", "ops@example.com")
    ProspectUploaderStack(app, "WithEmail")
    raw = synth(app).templates["WithEmail"]
    subs = [
        v["Properties"] for v in raw["Resources"].values() if v["Type"] == "AWS::SNS::Subscription"
    ]
    assert [(s["Protocol"], s["Endpoint"]) for s in subs] == [("email", "ops@example.com")]


def test_bad_alert_email_fails_synth():
    app = cdk.App(context={**NO_BUNDLING, "alert_email": "not-an-address"})
    with pytest.raises(PropValidationError, match="alert_email must be an email address"):
        ProspectUploaderStack(app, "BadEmail")


def test_max_upload_bytes_is_range_checked():
    with pytest.raises(PropValidationError, match="max_upload_bytes must be between 1 and"):
        ProspectUploaderStack(cdk.App(context=NO_BUNDLING), "Big", max_upload_bytes=0)


# ------------------------------------------------------------- 6. viewer
def test_viewer_url_requires_iam_auth(raw):
    url = props(raw, "Viewer/FunctionUrl/Resource")
    assert url["AuthType"] == "AWS_IAM"
    assert "Cors" not in url


def test_viewer_is_not_public(raw):
    public = [
        v for v in raw["Resources"].values()
        if v["Type"] == "AWS::Lambda::Permission" and v["Properties"].get("Principal") == "*"
    ]  # fmt: skip
    assert public == []


def test_viewer_may_read_mark_and_republish_only(raw):
    assert actions_of(raw, "Viewer") == {
        "logs:CreateLogStream", "logs:PutLogEvents", "dynamodb:Query", "dynamodb:Scan",
        "dynamodb:GetItem", "dynamodb:UpdateItem", "events:PutEvents",
    }  # fmt: skip


# ------------------------------------------------------------- 7. least privilege etc.
def test_no_wildcard_actions_anywhere(raw):
    policies = [v for v in raw["Resources"].values() if v["Type"] == "AWS::IAM::Policy"]
    actions = [
        a for p in policies for s in p["Properties"]["PolicyDocument"]["Statement"]
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    ]  # fmt: skip
    assert actions and [a for a in actions if "*" in a] == []


def test_no_managed_policies(raw):
    roles = [v["Properties"] for v in raw["Resources"].values() if v["Type"] == "AWS::IAM::Role"]
    assert len(roles) == 4 and not [r for r in roles if "ManagedPolicyArns" in r]


def test_no_physical_names(raw):
    assert [k for k, v in raw["Resources"].items() if _has_physical_name(v)] == []


def test_stack_matches_snapshot(raw, snapshot):
    assert mask_asset_hashes(raw) == snapshot.use_extension(JSONSnapshotExtension)


def test_cfn_lint_is_clean(prospect: Synthesized):
    assert lint(prospect.outdir) == []


def test_cdk_nag_is_clean_and_every_acknowledgment_is_reasoned(prospect: Synthesized):
    report = json.loads((prospect.outdir / "validation-report.json").read_text())
    assert [v for r in report["pluginReports"] for v in r.get("violations", [])] == []
    acks = acknowledgments(prospect.outdir)
    assert len(acks) >= 5 and all(len(reason) > 60 for reason in acks.values())
