"""What the Prospect Uploader stack synthesizes (issue 4, items 1-7; issue 12, item 2).

``raw`` is app.py's default (rows on the v2 ``RowBus``); ``classic`` is the same app
synthesized with ``-c event_bus=classic``. Each is synthesized once, with cdk-nag.
"""

from __future__ import annotations

import json
import re

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from constructs_lib import PropValidationError
from constructs_lib.prospect_uploader import ProspectUploaderStack
from constructs_lib.testing import normalize_template

from .conftest import NO_BUNDLING, Synthesized, new_app, synth, unvalidated_app
from .test_idempotent_model_step import _has_physical_name
from .test_snapshot_and_compliance import acknowledgments, lint

STACK = "ProspectUploader"


@pytest.fixture(scope="module")
def raw(prospect: Synthesized) -> dict:
    return prospect.templates[STACK]


@pytest.fixture(scope="module")
def classic_app(tmp_path_factory) -> Synthesized:
    """app.py (cdk-nag included) with ``-c event_bus=classic``."""
    import app as app_module

    app = new_app(tmp_path_factory, "prospect-classic", validated=True)
    app.node.set_context("event_bus", "classic")
    return synth(app_module.build_app(app))


@pytest.fixture(scope="module")
def classic(classic_app: Synthesized) -> dict:
    return classic_app.templates[STACK]


def of_type(raw: dict, type_: str) -> list[tuple[str, dict]]:
    return [(k, v) for k, v in raw["Resources"].items() if v["Type"] == type_]


def puts_of(raw: dict, role_suffix: str) -> list[dict]:
    return [s for s in statements_of(raw, role_suffix) if s["Action"] == "events:PutEvents"]


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
    # Rows to the v2 RowBus; its summary, and the ledger's completion event, to ProspectBus.
    assert env["EVENT_BUS_KIND"] == "v2"
    assert env["EVENT_BUS_ARN"] == {"Fn::GetAtt": [by_path(raw, "RowBus/Resource")[0],
                                                   "EventBusArn"]}  # fmt: skip
    assert env["SUMMARY_EVENT_BUS_NAME"] == ref(raw, "ProspectBus/Resource")
    assert env["EVENT_BUS_NAME"] == ref(raw, "ProspectBus/Resource")
    assert env["FAILURES_TABLE_NAME"] == ref(raw, "FailuresTable/Resource")
    assert env["IDEMPOTENCY_TABLE_NAME"] == ref(raw, "IdempotencyTable/Resource")
    assert env["MAX_UPLOAD_BYTES"] == str(50 * 1024 * 1024)


def test_splitter_may_read_upload_objects_publish_and_record_only(raw):
    assert actions_of(raw, "Splitter") == {
        "logs:CreateLogStream", "logs:PutLogEvents", "s3:GetObjectVersion",
        "s3:ListBucket", "events:PutEvents", "dynamodb:PutItem", "dynamodb:BatchWriteItem",
        "dynamodb:GetItem",
        "dynamodb:UpdateItem", "dynamodb:DeleteItem",
        # granted by the on-failure destination, on FailureQueue only
        "sqs:SendMessage",
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


def test_splitter_publishes_rows_to_the_row_bus_and_upload_events_to_prospect_bus(raw):
    row_bus = {"Fn::GetAtt": [by_path(raw, "RowBus/Resource")[0], "EventBusArn"]}
    prospect_bus = {"Fn::GetAtt": [by_path(raw, "ProspectBus/Resource")[0], "Arn"]}
    assert [(s["Resource"], s["Condition"]) for s in puts_of(raw, "Splitter")] == [
        (row_bus, {"StringEquals": {"events:source": ["prospect-uploader"],
                                    "events:detail-type": ["Prospect Row Validated"]}}),
        (prospect_bus, {"StringEquals": {"events:source": "prospect-uploader",
                                         "events:detail-type": ["Prospect Upload Summarized",
                                                                "Prospect Upload Completed"]}}),
    ]  # fmt: skip


# ------------------------------------------------------------- 3. buses and classify
def test_rows_ride_a_v2_bus_and_upload_events_the_classic_bus_by_default(raw):
    [(bus_id, _)] = of_type(raw, "AWS::EventsV2::EventBus")
    assert bus_id == by_path(raw, "ProspectUploader/RowBus/Resource")[0]  # fixed construct id
    assert [k for k, _ in of_type(raw, "AWS::Events::EventBus")] == [
        by_path(raw, "ProspectUploader/ProspectBus/Resource")[0]
    ]
    # SNS targets need classic rules: both alert rules stay on ProspectBus.
    for rule in ("UploadCompletedAlertRule", "UploadAlertRule"):
        assert props(raw, f"{rule}/Resource")["EventBusName"] == ref(raw, "ProspectBus/Resource")


def test_classify_subscribes_to_validated_rows_on_the_row_bus(raw):
    [subscriber] = [
        v for _, v in of_type(raw, "AWS::EventsV2::Subscriber")
        if v["Metadata"]["aws:cdk:path"] == "ProspectUploader/Classify/Subscriber"
    ]  # fmt: skip
    sub = subscriber["Properties"]
    assert sub["EventBusArn"] == {"Fn::GetAtt": [by_path(raw, "RowBus/Resource")[0],
                                                 "EventBusArn"]}  # fmt: skip
    [flt] = sub["FilterConfiguration"]["Filters"]
    # Rows without the batch marker (issue 19: marked rows go to ClassifyBatch).
    assert json.loads(flt["Pattern"]) == {
        "source": ["prospect-uploader"], "detail-type": ["Prospect Row Validated"],
        "detail": {"delivery": [{"exists": False}]},
    }  # fmt: skip
    assert sub["InvokeConfiguration"]["TargetArn"] == {
        "Fn::GetAtt": [by_path(raw, "Classify/BufferQueue/Resource")[0], "Arn"]
    }
    assert sub["OnFailureConfiguration"]["Arn"] == {
        "Fn::GetAtt": [by_path(raw, "FailureQueue/Resource")[0], "Arn"]
    }
    assert not [v for _, v in of_type(raw, "AWS::Events::Rule")
                if "/Classify/" in v["Metadata"]["aws:cdk:path"]]  # fmt: skip


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


def test_recorder_writes_only_to_the_failures_table_and_the_ledger(raw):
    failures = by_path(raw, "FailuresTable/Resource")[0]
    ledger = {by_path(raw, f"{name}/Resource")[0] for name in ("UploadsTable", "UploadRowsTable")}
    dynamo = [s for s in statements_of(raw, "FailureRecorder") if "dynamodb" in json.dumps(s)]
    # The ledger's accounting of failed rows: no PutItem on UploadsTable (the splitter opens
    # uploads), and no UpdateItem on UploadRowsTable (only a classified retry moves a marker).
    assert [s["Action"] for s in dynamo] == [
        "dynamodb:UpdateItem",
        ["dynamodb:GetItem", "dynamodb:UpdateItem"],
        ["dynamodb:GetItem", "dynamodb:PutItem"],
    ]
    assert failures in json.dumps(dynamo[0]["Resource"])
    assert {dynamo[i]["Resource"]["Fn::GetAtt"][0] for i in (1, 2)} == ledger


def test_failures_table_holds_personal_data_safely(raw):
    table = props(raw, "FailuresTable/Resource")
    assert table["SSESpecification"] == {"SSEEnabled": True}
    assert table["PointInTimeRecoverySpecification"] == {
        "PointInTimeRecoveryEnabled": True,
        "RecoveryPeriodInDays": 35,
    }
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
    # 7 of the Classify step, 9 of ClassifyBatch (its 7, the open-batch and the lost-batch
    # alarms) and 8 of the pipeline
    assert len(alarms) == 24
    assert all(a["AlarmActions"] == [ref(raw, "AlertTopic/Resource")] for a in alarms)
    assert {a["TreatMissingData"] for a in alarms} == {"notBreaching"}


def test_one_summary_mail_per_upload_with_invalid_failed_or_missing_rows(raw):
    rule = props(raw, "UploadCompletedAlertRule/Resource")
    assert rule["EventPattern"] == {
        "source": ["prospect-uploader"],
        "detail-type": ["Prospect Upload Completed"],
        "detail": {
            "$or": [
                {"status": ["incomplete"]},
                {"status": ["completed"], "invalid": [{"numeric": [">", 0]}]},
                {"status": ["completed"], "failed_total": [{"numeric": [">", 0]}]},
            ]
        },
    }
    target = rule["Targets"][0]
    assert target["Arn"] == ref(raw, "AlertTopic/Resource")
    assert target["DeadLetterConfig"]["Arn"] == {
        "Fn::GetAtt": [by_path(raw, "FailureQueue/Resource")[0], "Arn"]
    }
    # The mail is the summary: its counts, and (issue 19) how the rows were delivered,
    # the requests and tokens billed as Message Batch requests and the batches.
    paths = target["InputTransformer"]["InputPathsMap"]
    filled = target["InputTransformer"]["InputTemplate"]
    for name in paths:
        filled = filled.replace(f"<{name}>", json.dumps(paths[name]))
    mail = json.loads(filled)
    assert {
        name: mail[name] for name in ("delivery", "batch_requests", "batch_tokens", "batches")
    } == {
        "delivery": "$.detail.delivery",
        "batch_requests": "$.detail.batch_requests",
        "batch_tokens": "$.detail.batch_tokens",
        "batches": "$.detail.batches",
    }
    assert (mail["failed"], mail["missing"]) == ("$.detail.failed_total", "$.detail.missing")


def test_rejected_uploads_are_still_mailed(raw):
    rule = props(raw, "UploadAlertRule/Resource")
    assert rule["EventPattern"] == {
        "source": ["prospect-uploader"],
        "detail-type": ["Prospect Upload Summarized"],
        "detail": {"status": ["rejected"]},
    }
    transformer = rule["Targets"][0]["InputTransformer"]
    assert transformer["InputPathsMap"]["detail-reason"] == "$.detail.reason"


@pytest.fixture(scope="module")
def named_files(tmp_path_factory) -> dict:
    """app.py (cdk-nag included) with ``-c mail_file_names=true`` and
    ``-c point_in_time_recovery=off`` (issue 34): both opt-outs of the defaults at once."""
    import app as app_module

    app = new_app(tmp_path_factory, "prospect-named-files")
    app.node.set_context("mail_file_names", "true")
    app.node.set_context("point_in_time_recovery", "off")
    return synth(app_module.build_app(app)).templates[STACK]


@pytest.mark.parametrize("rule", ["UploadCompletedAlertRule", "UploadAlertRule"])
def test_by_default_the_mails_name_the_upload_by_id_not_by_its_file(raw, rule):
    # The object key is the file name, which may be a person's name (issue 34).
    paths = props(raw, f"{rule}/Resource")["Targets"][0]["InputTransformer"]["InputPathsMap"]
    assert "$.detail.key" not in paths.values()
    assert "$.detail.upload_id" in paths.values()


@pytest.mark.parametrize("rule", ["UploadCompletedAlertRule", "UploadAlertRule"])
def test_the_s3_key_enters_alerts_only_as_an_escaped_json_value(named_files, rule):
    # GIVEN the input template with mail_file_names on, and a key built to break out
    transformer = props(named_files, f"{rule}/Resource")["Targets"][0]["InputTransformer"]
    paths = transformer["InputPathsMap"]
    [key_var] = [name for name, path in paths.items() if path == "$.detail.key"]
    template = transformer["InputTemplate"]
    hostile = 'in/"}, "forged": "yes\n.csv'
    # THEN <key> stands alone as a JSON value, never inside a quoted text: EventBridge
    # fills such a placeholder with the JSON encoding of the value, quotes escaped
    assert f'"key":<{key_var}>' in template.replace(" ", "")
    filled = template
    for name in paths:
        filled = filled.replace(f"<{name}>", json.dumps(hostile if name == key_var else "x"))
    message = json.loads(filled)
    assert message["key"] == hostile and "forged" not in message


def test_without_alert_email_there_is_no_subscription_and_a_warning(prospect: Synthesized):
    # app.py without -c alert_email: its synth holds the warning (no second stack to build)
    raw = prospect.templates[STACK]
    assert not [v for v in raw["Resources"].values() if v["Type"] == "AWS::SNS::Subscription"]
    warnings = prospect.warnings(STACK, "No alert_email context")
    assert [path for path, _ in warnings] == [f"/{STACK}"]


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
    app = unvalidated_app(context={**NO_BUNDLING, "alert_email": "not-an-address"})
    with pytest.raises(PropValidationError, match="alert_email must be an email address"):
        ProspectUploaderStack(app, "BadEmail")


def test_max_upload_bytes_is_range_checked():
    with pytest.raises(PropValidationError, match="max_upload_bytes must be between 1 and"):
        ProspectUploaderStack(unvalidated_app(context=NO_BUNDLING), "Big", max_upload_bytes=0)


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
        "dynamodb:BatchGetItem",  # RowsTable: a page's row values (issue 18)
    }  # fmt: skip


def test_row_values_live_in_rows_table_written_by_the_splitter_and_read_by_their_readers(raw):
    """Issue 18: events carry ids only; RowsTable holds the values and who touches it."""
    rows = next(k for k in raw["Resources"] if k.startswith("RowsTable"))
    touching = {}
    for resource in raw["Resources"].values():
        if resource["Type"] != "AWS::IAM::Policy":
            continue
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
            targets = statement["Resource"]
            targets = targets if isinstance(targets, list) else [targets]
            if any(rows in json.dumps(target) for target in targets):
                role = resource["Properties"]["Roles"][0]["Ref"]
                actions = statement["Action"]
                actions = [actions] if isinstance(actions, str) else actions
                touching.setdefault(role.split("ServiceRole")[0], set()).update(actions)
    assert touching == {
        "Splitter": {"dynamodb:BatchWriteItem"},
        "ClassifyFunction": {"dynamodb:GetItem"},
        "ClassifyBatchFunction": {"dynamodb:GetItem"},
        "Viewer": {"dynamodb:BatchGetItem", "dynamodb:GetItem"},
    }


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
    # 6 functions (ClassifyBatch's too) and both steps' v2 subscriber roles
    assert len(roles) == 8 and not [r for r in roles if "ManagedPolicyArns" in r]


def test_no_physical_names(raw):
    assert [k for k, v in raw["Resources"].items() if _has_physical_name(v)] == []


def test_stack_matches_snapshot(raw, snapshot):
    assert normalize_template(raw) == snapshot.use_extension(JSONSnapshotExtension)


def test_cfn_lint_is_clean(prospect: Synthesized):
    assert lint(prospect.outdir) == []


def test_cdk_nag_is_clean_and_every_acknowledgment_is_reasoned(prospect: Synthesized):
    report = json.loads((prospect.outdir / "validation-report.json").read_text())
    assert [v for r in report["pluginReports"] for v in r.get("violations", [])] == []
    acks = acknowledgments(prospect.outdir)
    assert len(acks) >= 5 and all(len(reason) > 60 for reason in acks.values())


# ------------------------------------------------------------- 8. per-upload completion
LEDGER_ENV = {
    "UPLOADS_TABLE_NAME", "UPLOAD_ROWS_TABLE_NAME", "EVENT_BUS_NAME", "EVENT_SOURCE",
    "UPLOAD_DEADLINE_SECONDS", "UPLOAD_SPLIT_DEADLINE_SECONDS", "UPLOAD_RETENTION_DAYS",
}  # fmt: skip
LEDGER_FUNCTIONS = ["/Splitter/Resource", "Classify/Function/Resource",
                    "/FailureRecorder/Resource", "/UploadSweeper/Resource"]  # fmt: skip


def test_uploads_table_is_keyed_by_upload_alone_with_a_ttl(raw):
    resource = by_path(raw, "UploadsTable/Resource")[1]
    table = resource["Properties"]
    assert table["KeySchema"] == [{"AttributeName": "upload_id", "KeyType": "HASH"}]
    assert table["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert table["SSESpecification"] == {"SSEEnabled": True}
    assert table["PointInTimeRecoverySpecification"] == {
        "PointInTimeRecoveryEnabled": True,
        "RecoveryPeriodInDays": 35,
    }
    assert resource["DeletionPolicy"] == "Retain"


def test_uploads_table_has_a_sparse_keys_only_index_of_open_uploads(raw):
    [index] = props(raw, "UploadsTable/Resource")["GlobalSecondaryIndexes"]
    assert index == {
        "IndexName": "OpenUploads",
        "KeySchema": [
            {"AttributeName": "sweep_shard", "KeyType": "HASH"},
            {"AttributeName": "sweep_after", "KeyType": "RANGE"},
        ],
        "Projection": {"ProjectionType": "KEYS_ONLY"},
    }


def test_row_markers_are_keyed_by_upload_and_row_with_a_ttl(raw):
    table = props(raw, "UploadRowsTable/Resource")
    assert table["KeySchema"] == [
        {"AttributeName": "upload_id", "KeyType": "HASH"},
        {"AttributeName": "row_number", "KeyType": "RANGE"},
    ]
    assert table["TimeToLiveSpecification"]["AttributeName"] == "expires_at"


@pytest.mark.parametrize("function", LEDGER_FUNCTIONS)
def test_every_ledger_function_gets_the_ledger_settings(raw, function):
    env = props(raw, function)["Environment"]["Variables"]
    assert LEDGER_ENV <= set(env)
    assert env["UPLOADS_TABLE_NAME"] == ref(raw, "UploadsTable/Resource")
    assert env["UPLOAD_ROWS_TABLE_NAME"] == ref(raw, "UploadRowsTable/Resource")
    assert env["UPLOAD_DEADLINE_SECONDS"] == str(25 * 3600)  # classify max age 24 h + 1 h
    assert env["UPLOAD_RETENTION_DAYS"] == "90"


@pytest.mark.parametrize("role", ["Classify/Function", "FailureRecorder", "UploadSweeper"])
def test_ledger_functions_may_publish_only_the_completion_event(raw, role):
    puts = [s for s in statements_of(raw, role) if s["Action"] == "events:PutEvents"]
    assert [s["Condition"] for s in puts] == [
        {"StringEquals": {"events:source": "prospect-uploader",
                          "events:detail-type": "Prospect Upload Completed"}}
    ]  # fmt: skip


def test_sweeper_runs_every_15_minutes_and_reads_only_the_open_index(raw):
    rule = props(raw, "UploadSweepRule/Resource")
    assert rule["ScheduleExpression"] == "rate(15 minutes)"
    assert rule["Targets"][0]["Arn"] == {
        "Fn::GetAtt": [by_path(raw, "/UploadSweeper/Resource")[0], "Arn"]
    }
    [query] = [s for s in statements_of(raw, "UploadSweeper") if s["Action"] == "dynamodb:Query"]
    assert query["Resource"]["Fn::Join"][1][-1] == "/index/OpenUploads"


# ------------------------------------------------------------- 9. IAM conditions
def test_viewer_updates_only_its_own_attributes(raw):
    [update] = [
        s for s in statements_of(raw, "Viewer") if s["Action"] == "dynamodb:UpdateItem"
    ]  # fmt: skip
    assert update["Resource"] == {"Fn::GetAtt": [by_path(raw, "FailuresTable/Resource")[0], "Arn"]}
    assert update["Condition"] == {
        "ForAllValues:StringEquals": {"dynamodb:Attributes": [
            "upload_id", "failure_id", "retried_at", "retry_count", "replay_generation",
        ]},
        "StringEqualsIfExists": {"dynamodb:ReturnValues": ["NONE", "UPDATED_OLD", "UPDATED_NEW"]},
    }  # fmt: skip


def test_viewer_republishes_only_validated_rows_to_the_row_bus(raw):
    [put] = puts_of(raw, "Viewer")
    assert put["Resource"] == {"Fn::GetAtt": [by_path(raw, "RowBus/Resource")[0], "EventBusArn"]}
    assert put["Condition"] == {
        "StringEquals": {"events:source": ["prospect-uploader"],
                         "events:detail-type": ["Prospect Row Validated"]}
    }  # fmt: skip
    env = props(raw, "Viewer/Resource")["Environment"]["Variables"]
    assert (env["EVENT_BUS_KIND"], env["EVENT_BUS_ARN"]) == ("v2", put["Resource"])
    assert "EVENT_BUS_NAME" not in env


def test_only_this_stacks_rules_and_alarms_may_publish_alerts(raw):
    policy = props(raw, "AlertTopic/Policy/Resource")["PolicyDocument"]["Statement"]
    allows = [s for s in policy if s["Effect"] == "Allow"]
    rules = {by_path(raw, f"{name}/Resource")[0]
             for name in ("UploadCompletedAlertRule", "UploadAlertRule")}  # fmt: skip
    from_events = [s for s in allows if s["Principal"] == {"Service": "events.amazonaws.com"}]
    assert {s["Condition"]["ArnEquals"]["aws:SourceArn"]["Fn::GetAtt"][0]
            for s in from_events} == rules  # fmt: skip
    [from_alarms] = [s for s in allows if s["Principal"] == {"Service": "cloudwatch.amazonaws.com"}]
    assert from_alarms["Condition"]["StringEquals"] == {
        "aws:SourceAccount": {"Ref": "AWS::AccountId"}
    }
    assert "alarm:ProspectUploader-*" in json.dumps(from_alarms["Condition"]["ArnLike"])
    assert len(allows) == len(from_events) + 1


def test_alert_key_serves_only_this_stacks_topics(raw):
    statements = props(raw, "AlertKey/Resource")["KeyPolicy"]["Statement"]
    services = [s for s in statements if "Service" in s["Principal"]]
    assert {s["Principal"]["Service"] for s in services} == {
        "cloudwatch.amazonaws.com", "events.amazonaws.com",
    }  # fmt: skip
    for statement in services:
        # A String condition key: StringLike, never ArnLike (which may fail to match).
        context = statement["Condition"]["StringLike"]["kms:EncryptionContext:aws:sns:topicArn"]
        assert "kms:EncryptionContext" not in json.dumps(statement["Condition"].get("ArnLike"))
        assert ":ProspectUploader-*" in json.dumps(context)
    # EventBridge's KMS requests carry no aws:SourceArn/aws:SourceAccount (SNS guide).
    [from_events] = [s for s in services if s["Principal"]["Service"] == "events.amazonaws.com"]
    assert "aws:SourceAccount" not in json.dumps(from_events)


# ------------------------------------------------------------- 10. retention and limits
def test_failures_table_items_expire(raw):
    table = props(raw, "FailuresTable/Resource")
    assert table["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    for function in ("/FailureRecorder/Resource", "/Splitter/Resource"):
        assert props(raw, function)["Environment"]["Variables"]["FAILURE_RETENTION_DAYS"] == "90"


def _rule(template: dict, bucket: str, rule_id: str) -> dict:
    rules = props(template, f"{bucket}/Resource")["LifecycleConfiguration"]["Rules"]
    [rule] = [r for r in rules if r.get("Id") == rule_id]
    return rule


def test_buckets_expire_uploads_old_versions_and_logs_by_default(raw):
    # The raw CSV is the fullest copy of the personal data: its current version expires.
    assert _rule(raw, "UploadBucket", "ExpireUploads")["ExpirationInDays"] == 30
    replaced = _rule(raw, "UploadBucket", "ExpireReplacedUploads")
    assert replaced["NoncurrentVersionExpiration"] == {"NoncurrentDays": 30}
    [logs] = props(raw, "AccessLogsBucket/Resource")["LifecycleConfiguration"]["Rules"]
    assert logs["ExpirationInDays"] == 90


def test_splitter_gets_max_rows(raw):
    assert props(raw, "/Splitter/Resource")["Environment"]["Variables"]["MAX_ROWS"] == "100000"


CONFIGURED = {
    "max_rows": "500",
    "failure_retention_days": "30",
    "noncurrent_version_retention_days": 7,
    "upload_retention_days": "5",
    "access_log_retention_days": "14",
    "viewer_principals": "arn:aws:iam::123456789012:role/Ops, arn:aws:iam::123456789012:role/x/Y",
}


@pytest.fixture(scope="module")
def configured(tmp_path_factory) -> dict:
    app = new_app(tmp_path_factory, "configured")
    for key, value in CONFIGURED.items():
        app.node.set_context(key, value)
    ProspectUploaderStack(app, "Configured")
    return synth(app).templates["Configured"]


def test_context_sets_limits_and_retention(configured):
    env = props(configured, "/Splitter/Resource")["Environment"]["Variables"]
    assert (env["MAX_ROWS"], env["FAILURE_RETENTION_DAYS"]) == ("500", "30")
    assert env["UPLOAD_RETENTION_DAYS"] == "30"
    assert _rule(configured, "UploadBucket", "ExpireUploads")["ExpirationInDays"] == 5
    replaced = _rule(configured, "UploadBucket", "ExpireReplacedUploads")
    assert replaced["NoncurrentVersionExpiration"] == {"NoncurrentDays": 7}
    classify = props(configured, "Classify/Function/Resource")["Environment"]["Variables"]
    assert classify["PROSPECT_RETENTION_DAYS"] == "30"
    [logs] = props(configured, "AccessLogsBucket/Resource")["LifecycleConfiguration"]["Rules"]
    assert logs["ExpirationInDays"] == 14


def test_viewer_principals_may_invoke_the_url(configured):
    permissions = [
        v["Properties"] for v in configured["Resources"].values()
        if v["Type"] == "AWS::Lambda::Permission"
        and v["Properties"]["Action"] == "lambda:InvokeFunctionUrl"
    ]  # fmt: skip
    assert sorted(p["Principal"] for p in permissions) == [
        "arn:aws:iam::123456789012:role/Ops", "arn:aws:iam::123456789012:role/x/Y",
    ]  # fmt: skip
    assert {p["FunctionUrlAuthType"] for p in permissions} == {"AWS_IAM"}


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("max_rows", "0", "context max_rows must be between 1 and 10000000, got 0"),
        ("max_rows", "lots", "context max_rows must be an integer between 1 and 10000000, "
                             "got 'lots'"),
        ("failure_retention_days", "3651", "context failure_retention_days must be between 1 "
                                           "and 3650, got 3651"),
        ("access_log_retention_days", "1.5", "context access_log_retention_days must be an "
                                             "integer"),
        ("upload_retention_days", "0", "context upload_retention_days must be between 1 and "
                                       "3650, got 0"),
        ("viewer_principals", "arn:aws:iam::123456789012:user/bob",
         "context viewer_principals must be comma-separated IAM role ARNs"),
        ("event_bus", "kinesis", "context event_bus must be one of v2, classic, got 'kinesis'"),
        ("event_bus", True, "context event_bus must be one of v2, classic, got True"),
        # Message Batches delivery (issue 19).
        ("delivery", "later", "context delivery must be one of auto, realtime, batch, "
                              "got 'later'"),
        ("batch_min_rows", "0", "context batch_min_rows must be between 1 and 10000000, got 0"),
        ("batch_min_rows", "many", "context batch_min_rows must be an integer between 1 and "
                                   "10000000, got 'many'"),
    ],
)  # fmt: skip
def test_bad_context_fails_synth_naming_key_value_and_range(key, value, message):
    app = unvalidated_app(context={**NO_BUNDLING, key: value})
    with pytest.raises(PropValidationError, match=re.escape(message)):
        ProspectUploaderStack(app, "Bad")


# ------------------------------------------------------------- 11. -c event_bus=classic
def test_classic_mode_has_no_v2_resources_and_a_classic_classify_rule(classic):
    assert [t for t in {v["Type"] for v in classic["Resources"].values()} if "EventsV2" in t] == []
    rule = props(classic, "Classify/Rule/Resource")
    assert rule["EventBusName"] == ref(classic, "ProspectBus/Resource")
    assert rule["EventPattern"] == {
        "source": ["prospect-uploader"], "detail-type": ["Prospect Row Validated"],
        "detail": {"delivery": [{"exists": False}]},
    }  # fmt: skip
    # The batch step (issue 19) is a classic rule on the same bus, for the marked rows.
    batch = props(classic, "ClassifyBatch/Rule/Resource")
    assert batch["EventPattern"]["detail"] == {"delivery": ["batch"]}
    roles = of_type(classic, "AWS::IAM::Role")
    assert len(roles) == 6


def test_classic_mode_publishes_rows_and_summaries_to_prospect_bus(classic):
    prospect_bus = ref(classic, "ProspectBus/Resource")
    bus_arn = {"Fn::GetAtt": [by_path(classic, "ProspectBus/Resource")[0], "Arn"]}
    splitter = props(classic, "/Splitter/Resource")["Environment"]["Variables"]
    viewer = props(classic, "Viewer/Resource")["Environment"]["Variables"]
    for env in (splitter, viewer):
        assert env["EVENT_BUS_NAME"] == prospect_bus
        assert not {"EVENT_BUS_KIND", "EVENT_BUS_ARN", "SUMMARY_EVENT_BUS_NAME"} & set(env)
    assert [s["Resource"] for s in puts_of(classic, "Splitter")] == [bus_arn]
    [viewer_put] = puts_of(classic, "Viewer")
    assert viewer_put["Resource"] == bus_arn
    assert viewer_put["Condition"] == {
        "StringEquals": {"events:source": "prospect-uploader",
                         "events:detail-type": "Prospect Row Validated"}
    }  # fmt: skip


def test_classic_stack_matches_snapshot(classic, snapshot):
    # Recorded from the template as it was before the row bus moved to v2 (identical):
    # `-c event_bus=classic` deploys over an existing classic stack with no change.
    assert normalize_template(classic) == snapshot.use_extension(JSONSnapshotExtension)


def test_classic_mode_cfn_lint_is_clean(classic_app: Synthesized):
    assert lint(classic_app.outdir) == []


def test_classic_mode_cdk_nag_is_clean(classic_app: Synthesized):
    report = json.loads((classic_app.outdir / "validation-report.json").read_text())
    assert [v for r in report["pluginReports"] for v in r.get("violations", [])] == []


# ------------------------------------------------- 19. -c delivery (Message Batches)
@pytest.fixture(scope="module")
def realtime(tmp_path_factory) -> dict:
    """app.py with ``-c delivery=realtime``: the template from before Message Batches."""
    import app as app_module

    app = new_app(tmp_path_factory, "prospect-realtime")
    app.node.set_context("delivery", "realtime")
    return synth(app_module.build_app(app)).templates[STACK]


def _paths(template: dict) -> set[str]:
    return {v.get("Metadata", {}).get("aws:cdk:path", "") for v in template["Resources"].values()}


def test_auto_is_the_default_and_routes_by_valid_rows_from_2000(raw):
    env = props(raw, "/Splitter/Resource")["Environment"]["Variables"]
    assert (env["DELIVERY"], env["BATCH_MIN_ROWS"]) == ("auto", "2000")


def test_the_batch_step_takes_marked_rows_and_classify_the_rest(raw):
    # GIVEN the default template (delivery auto)
    def pattern(step: str) -> dict:
        [(_, subscriber)] = [
            (k, v) for k, v in of_type(raw, "AWS::EventsV2::Subscriber")
            if v["Metadata"]["aws:cdk:path"].endswith(f"/{step}/Subscriber")
        ]  # fmt: skip
        [entry] = subscriber["Properties"]["FilterConfiguration"]["Filters"]
        return json.loads(entry["Pattern"])

    # THEN exactly one step takes each row: a batch-marked row ClassifyBatch, any other Classify
    assert pattern("ClassifyBatch")["detail"] == {"delivery": ["batch"]}
    assert pattern("Classify")["detail"] == {"delivery": [{"exists": False}]}
    env = props(raw, "ClassifyBatch/Function/Resource")["Environment"]["Variables"]
    assert (env["MODEL_DELIVERY"], env["BATCH_MAX_REQUESTS"], env["BATCH_MAX_WAIT_SECONDS"]) == (
        "batch",
        "10000",
        "300",
    )
    # AND it classifies, stores and accounts rows as Classify does
    assert env["PROSPECTS_TABLE_NAME"] == ref(raw, "ProspectsTable/Resource")
    assert env["UPLOADS_TABLE_NAME"] == ref(raw, "UploadsTable/Resource")
    assert env["IDEMPOTENCY_TABLE_NAME"] == ref(raw, "IdempotencyTable/Resource")


def test_realtime_context_keeps_the_template_from_before_batches(raw, realtime):
    # No batch step, no marker filter on Classify, and the splitter marks nothing.
    assert not [path for path in _paths(realtime) if "/ClassifyBatch/" in path]
    [(_, subscriber)] = of_type(realtime, "AWS::EventsV2::Subscriber")
    [entry] = subscriber["Properties"]["FilterConfiguration"]["Filters"]
    assert "detail" not in json.loads(entry["Pattern"])
    env = props(realtime, "/Splitter/Resource")["Environment"]["Variables"]
    assert env["DELIVERY"] == "realtime"
    # Classify's logical ids are the same with and without the batch step.
    classify = {
        k for k, v in raw["Resources"].items() if "/Classify/" in v["Metadata"]["aws:cdk:path"]
    }
    assert classify == {
        k for k, v in realtime["Resources"].items() if "/Classify/" in v["Metadata"]["aws:cdk:path"]
    }


def test_point_in_time_recovery_off_turns_every_table_s_backups_off_and_says_why(named_files):
    tables = of_type(named_files, "AWS::DynamoDB::Table")
    assert len(tables) == 6
    for _, table in tables:
        assert table["Properties"]["PointInTimeRecoverySpecification"] == {
            "PointInTimeRecoveryEnabled": False
        }
        [skip] = [s for s in table["Metadata"]["checkov"]["skip"] if s["id"] == "CKV_AWS_28"]
        assert "point_in_time_recovery is off on purpose" in skip["comment"]


@pytest.mark.parametrize(
    ("value", "days"), [("7", 7), (1, 1), ("on", 35), (True, 35), ("0", 0), (False, 0)]
)
def test_point_in_time_recovery_context_sets_every_table_s_period(value, days):
    app = unvalidated_app(context={**NO_BUNDLING, "point_in_time_recovery": value})
    stack = ProspectUploaderStack(app, f"Backups{days}")
    for table in (
        stack.idempotency_table,
        stack.rows_table,
        stack.failures_table,
        stack.prospects_table,
        stack.uploads_table,
        stack.upload_rows_table,
    ):
        spec = stack.resolve(table.node.default_child.point_in_time_recovery_specification)
        expected = {"pointInTimeRecoveryEnabled": bool(days)}
        if days:
            expected["recoveryPeriodInDays"] = days
        assert spec == expected


@pytest.mark.parametrize("value", ["36", "-1", "weekly", 7.5])
def test_a_bad_point_in_time_recovery_context_fails_synth_naming_it(value):
    app = unvalidated_app(context={**NO_BUNDLING, "point_in_time_recovery": value})
    with pytest.raises(PropValidationError, match="context point_in_time_recovery must be on, off"):
        ProspectUploaderStack(app, "BadBackups")


def test_a_bad_mail_file_names_context_fails_synth_naming_it():
    app = unvalidated_app(context={**NO_BUNDLING, "mail_file_names": "sometimes"})
    with pytest.raises(PropValidationError, match="context mail_file_names must be true or false"):
        ProspectUploaderStack(app, "BadMail")


def test_each_function_may_touch_only_its_own_records_of_the_idempotency_table(raw):
    table = by_path(raw, "IdempotencyTable/Resource")[0]
    granted = {}
    for role in ("Splitter", "Classify/Function", "ClassifyBatch/Function"):
        statements = [s for s in statements_of(raw, role) if table in json.dumps(s["Resource"])]
        assert statements, role
        patterns = {
            json.dumps(s["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"])
            for s in statements
        }
        [granted[role]] = patterns
    assert granted == {
        "Splitter": json.dumps(["prospect-splitter.split_upload#*"]),
        "Classify/Function": json.dumps(["ProspectUploader/Classify#*"]),
        "ClassifyBatch/Function": json.dumps(["ProspectUploader/ClassifyBatch#*"]),
    }
