"""Least privilege, checked: every handler call is evaluated against its role in cdk.out."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from constructs_lib.local_engine.iam import (
    Permission,
    RolePolicies,
    SecretArns,
    required_permissions,
)
from constructs_lib.prospect_uploader.local_run import (
    RunOptions,
    RunResult,
    check_invariants,
    run_pipeline,
)

HEADER = "email,first_name,last_name,company,title,country,notes\n"
STACK = "ProspectUploader"
SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:anthropic/api-key-AbC123"


def _csv(tmp_path: Path) -> Path:
    path = tmp_path / "two.csv"
    path.write_text(
        HEADER
        + "ada@example.com,Ada,Lovelace,Analytical Engines,CTO,GB,Wants a demo\n"
        + "not-an-email,Bad,Row,Co,CEO,US,\n",
        encoding="utf-8",
    )
    return path


def _role(*statements: dict) -> RolePolicies:
    return RolePolicies("Fn", "FnRole", [{"Version": "2012-10-17", "Statement": list(statements)}])


def test_operations_become_iam_actions_on_realistic_arns():
    secrets = SecretArns([SECRET])
    assert required_permissions("dynamodb", "PutItem", {"TableName": "T"}, secrets) == [
        Permission("dynamodb:PutItem", "arn:aws:dynamodb:us-east-1:123456789012:table/T")
    ]
    assert required_permissions(
        "sqs", "DeleteMessageBatch", {"QueueUrl": "https://x/123456789012/q"}, secrets
    ) == [Permission("sqs:DeleteMessage", "arn:aws:sqs:us-east-1:123456789012:q")]
    # A secret read by name is evaluated on its full ARN, suffix included.
    assert required_permissions(
        "secretsmanager", "GetSecretValue", {"SecretId": "anthropic/api-key"}, secrets
    ) == [Permission("secretsmanager:GetSecretValue", SECRET)]
    assert required_permissions(
        "s3", "GetObject", {"Bucket": "b", "Key": "a.csv", "VersionId": "v1"}, secrets
    ) == [Permission("s3:GetObjectVersion", "arn:aws:s3:::b/a.csv")]
    bus = "arn:aws:events:us-east-1:123456789012:event-busv2/rows/abcdefghijklmnopqrstuvwxy"
    entries = [{"Source": "demo", "DetailType": "Row"}] * 3
    assert required_permissions(
        "eventbridgev2", "PutEvents", {"EventBusArn": bus, "Entries": entries}, secrets
    ) == [
        Permission(
            "events:PutEvents", bus, (("events:detail-type", "Row"), ("events:source", "demo"))
        )
    ]


def test_the_evaluator_denies_a_secret_granted_without_its_suffix():
    name_only = "arn:aws:secretsmanager:us-east-1:123456789012:secret:anthropic/api-key"
    wrong = _role(
        {"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": name_only}
    )
    right = _role(
        {
            "Effect": "Allow",
            "Action": "secretsmanager:GetSecretValue",
            "Resource": name_only + "-??????",
        }
    )
    permission = Permission("secretsmanager:GetSecretValue", SECRET)
    assert wrong.decide(permission) == "implicit"
    assert right.decide(permission) == "allowed"


def test_an_explicit_deny_wins_and_conditions_are_listed_as_unevaluated():
    role = _role(
        {"Effect": "Allow", "Action": "dynamodb:*", "Resource": "*"},
        {
            "Effect": "Deny",
            "Action": "dynamodb:DeleteItem",
            "Resource": "*",
            "Condition": {"StringEquals": {"aws:PrincipalTag/team": "x"}},
        },
    )
    assert role.decide(Permission("dynamodb:PutItem", "arn:t")) == "allowed"
    assert role.decide(Permission("dynamodb:DeleteItem", "arn:t")) == "denied"
    assert role.unevaluated_conditions and "aws:PrincipalTag/team" in role.unevaluated_conditions[0]


def test_put_events_conditions_on_source_and_detail_type_are_evaluated_per_entry():
    bus = "arn:aws:events:us-east-1:123456789012:event-bus/rows"
    role = _role(
        {
            "Effect": "Allow",
            "Action": "events:PutEvents",
            "Resource": bus,
            "Condition": {
                "StringEquals": {
                    "events:source": ["prospect-uploader"],
                    "events:detail-type": ["Prospect Row Validated"],
                }
            },
        }
    )
    assert role.unevaluated_conditions == []
    entries = [
        {
            "EventBusName": bus,
            "Source": "prospect-uploader",
            "DetailType": "Prospect Row Validated",
        },
        {"EventBusName": bus, "Source": "someone-else", "DetailType": "Prospect Row Validated"},
    ]
    allowed, refused = sorted(
        required_permissions("events", "PutEvents", {"Entries": entries}, SecretArns()),
        key=lambda p: dict(p.context)["events:source"] != "prospect-uploader",
    )
    assert role.decide(allowed) == "allowed"
    assert role.decide(refused) == "implicit"


def _strip_action(template: dict, role_suffix: str, action: str) -> None:
    for resource in template["Resources"].values():
        if resource["Type"] != "AWS::IAM::Policy":
            continue
        if not resource["Metadata"]["aws:cdk:path"].endswith(role_suffix):
            continue
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
            actions = (
                statement["Action"]
                if isinstance(statement["Action"], list)
                else [statement["Action"]]
            )
            statement["Action"] = [a for a in actions if a != action] or ["s3:GetBucketTagging"]
        return
    raise AssertionError(f"no policy of {role_suffix}")


def test_a_role_missing_one_action_is_reported(cdk_out: Path, tmp_path: Path):
    copy = tmp_path / "cdk.out"
    copy.mkdir()
    shutil.copy(cdk_out / "manifest.json", copy / "manifest.json")
    template = json.loads((cdk_out / f"{STACK}.template.json").read_text())
    _strip_action(template, "SplitterServiceRole/DefaultPolicy/Resource", "events:PutEvents")
    (copy / f"{STACK}.template.json").write_text(json.dumps(template))

    result = run_pipeline(
        RunOptions(
            csv_path=_csv(tmp_path),
            cdk_out=copy,
            seconds_per_minute=0.05,
            log_file=tmp_path / "handlers.log",
        )
    )
    assert result.iam_checked
    assert result.denied >= 1
    # The row bus is v2 by default (event-busv2/...); classic buses are event-bus/...
    bus = "arn:aws:events:us-east-1:123456789012:event-bus"
    assert any(d.startswith(f"Splitter: events:PutEvents on {bus}") for d in result.denials)
    assert result.classified == 0  # the row never reached the bus
    failing = {check.name for check in check_invariants(result) if not check.ok}
    assert "denied = 0" in failing
    # The handler saw AWS's answer, not an emulator error.
    assert "AccessDeniedException" in (tmp_path / "handlers.log").read_text()


#: The three roles with records in the shared IdempotencyTable, and their key prefixes.
RECORD_PREFIXES = {
    "Splitter": "prospect-splitter.split_upload",
    "Classify/Function": f"{STACK}/Classify",
    "ClassifyBatch/Function": f"{STACK}/ClassifyBatch",
}


@dataclass
class ProbedRun:
    """The IAM-checked run of the real stack, then each role's DeleteItem on each prefix."""

    result: RunResult
    normal: int  # calls denied during the run
    crossing: int  # probes denied
    reached: list[tuple[str, str, bool]]  # (function, prefix, allowed)


@pytest.fixture(scope="module")
def probed_run(cdk_out: Path, tmp_path_factory) -> ProbedRun:
    """One run for the tests of the clean run and of the record prefixes, probed before its
    pipeline closes (no other run of this module meets it open)."""
    from botocore.exceptions import ClientError

    from constructs_lib.local_engine import identity
    from constructs_lib.prospect_uploader.local_run.pipeline import LocalPipeline

    tmp = tmp_path_factory.mktemp("iam")
    options = RunOptions(csv_path=_csv(tmp), cdk_out=cdk_out, log_file=tmp / "h.log")
    with LocalPipeline(options) as pipeline:
        result = pipeline.run()
        iam, assembly = pipeline.engine.iam, pipeline.assembly
        assert iam is not None and assembly is not None
        normal = len(iam.denials)
        client = pipeline.engine.aws.session.client("dynamodb")
        spec = assembly.by_path_suffix("/IdempotencyTable/Resource", "AWS::DynamoDB::Table")
        table = pipeline.engine.aws.ref(spec.logical_id)
        reached: list[tuple[str, str, bool]] = []
        for function in RECORD_PREFIXES:
            resource = assembly.by_path_suffix(f"/{function}/Resource", "AWS::Lambda::Function")
            for prefix in RECORD_PREFIXES.values():
                # DeleteItem of an absent record: every one of the three roles may make it
                # on its own records, and it changes nothing.
                key = {"id": {"S": f"{prefix}#probe"}}
                with identity.acting_as(resource.logical_id):
                    try:
                        client.delete_item(TableName=table, Key=key)
                        allowed = True
                    except ClientError as error:
                        assert error.response["Error"]["Code"] == "AccessDeniedException"
                        allowed = False
                reached.append((function, prefix, allowed))
        crossing = len(iam.denials) - normal
    return ProbedRun(result, normal, crossing, reached)


@pytest.fixture(scope="module")
def clean_run(probed_run: ProbedRun) -> RunResult:
    """The run's result, read when it settled (before the probes)."""
    return probed_run.result


def test_the_real_stack_makes_no_denied_call_and_lists_unused_grants(clean_run):
    assert clean_run.aws_calls > 0
    assert clean_run.denied == 0
    assert set(clean_run.unused_grants) == {
        "Splitter",
        "Classify/Function",
        "FailureRecorder",
        "Viewer",
        # Its fixed-rate schedule fires every 15 run-minutes, after this short run.
        "UploadSweeper",
        # The subscriber's role: only sqs:SendMessage to the buffer queue is used.
        "Classify/Subscriber",
        # Message Batches (issue 19): this small upload goes realtime; only the batch step's
        # schedule tick runs.
        "ClassifyBatch/Function",
        "ClassifyBatch/Subscriber",
    }
    # Log delivery is the Lambda service's, never reported; the viewer is not invoked at all.
    assert not any("logs:" in g for grants in clean_run.unused_grants.values() for g in grants)
    assert any("events:PutEvents" in g for g in clean_run.unused_grants["Viewer"])


@pytest.mark.parametrize(
    ("actions", "code"),
    [(["s3:GetObject"], "AccessDenied"), (["s3:GetObject", "s3:ListBucket"], "NoSuchKey")],
)
def test_a_missing_object_is_404_only_to_a_role_that_may_list_the_bucket(actions, code):
    """S3 answers 403 for a missing key unless the caller may s3:ListBucket (no key probing)."""
    import boto3
    from botocore.exceptions import ClientError
    from moto import mock_aws

    from constructs_lib.local_engine import identity
    from constructs_lib.local_engine.iam import IamCheck

    bucket = ["arn:aws:s3:::bkt-1", "arn:aws:s3:::bkt-1/*"]
    role = _role({"Effect": "Allow", "Action": actions, "Resource": bucket})
    with mock_aws():
        session = boto3.session.Session(region_name="us-east-1")
        s3 = session.client("s3")
        s3.create_bucket(Bucket="bkt-1")
        s3.put_object(Bucket="bkt-1", Key="here.csv", Body=b"x")
        check = IamCheck({"Fn": role}, SecretArns())
        with check.installed(session), identity.acting_as("Fn"):
            s3 = session.client("s3")  # a client copies the session's hooks when created
            assert s3.get_object(Bucket="bkt-1", Key="here.csv")["Body"].read() == b"x"
            with pytest.raises(ClientError) as raised:
                s3.get_object(Bucket="bkt-1", Key="gone.csv")
    assert raised.value.response["Error"]["Code"] == code
    denied = [(d.action, d.resource) for d in check.denials]
    assert denied == ([("s3:ListBucket", "arn:aws:s3:::bkt-1")] if code == "AccessDenied" else [])


# -- issue 34: each function reaches only its own record prefix of the shared table -----------
def _dynamodb_role(pattern: str, *actions: str) -> RolePolicies:
    return _role(
        {
            "Effect": "Allow",
            "Action": list(actions),
            "Resource": "arn:aws:dynamodb:us-east-1:123456789012:table/T",
            "Condition": {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [pattern]}},
        }
    )


def _permissions(operation: str, params: dict) -> list[Permission]:
    return required_permissions(
        "dynamodb", operation, {"TableName": "T", **params}, SecretArns(), lambda _t: "id"
    )


def test_leading_keys_are_every_partition_key_a_call_touches():
    [get] = _permissions("GetItem", {"Key": {"id": {"S": "Stack/Step#a"}}})
    assert get.values() == {"dynamodb:LeadingKeys": ["Stack/Step#a"]}
    keys = [{"id": {"S": "Stack/Step#a"}}, {"id": {"S": "Stack/Other#b"}}]
    [batch] = required_permissions(
        "dynamodb",
        "BatchGetItem",
        {"RequestItems": {"T": {"Keys": keys}}},
        SecretArns(),
        lambda _t: "id",
    )
    assert batch.values() == {"dynamodb:LeadingKeys": ["Stack/Step#a", "Stack/Other#b"]}
    transaction = required_permissions(
        "dynamodb",
        "TransactWriteItems",
        {
            "TransactItems": [
                {"ConditionCheck": {"TableName": "T", "Key": keys[0]}},
                {"Update": {"TableName": "T", "Key": keys[1]}},
            ]
        },
        SecretArns(),
        lambda _t: "id",
    )
    assert [(p.action, p.values()["dynamodb:LeadingKeys"]) for p in transaction] == [
        ("dynamodb:ConditionCheckItem", ["Stack/Step#a"]),
        ("dynamodb:UpdateItem", ["Stack/Other#b"]),
    ]
    [query] = _permissions(
        "Query",
        {
            "KeyConditionExpression": "#k = :v",
            "ExpressionAttributeNames": {"#k": "id"},
            "ExpressionAttributeValues": {":v": {"S": "Stack/Step#a"}},
        },
    )
    assert query.values() == {"dynamodb:LeadingKeys": ["Stack/Step#a"]}


def test_a_prefix_grant_allows_its_own_keys_only_as_iam_does():
    role = _dynamodb_role("Stack/Step#*", "dynamodb:GetItem", "dynamodb:BatchGetItem")
    assert role.unevaluated_conditions == []
    [own] = _permissions("GetItem", {"Key": {"id": {"S": "Stack/Step#a"}}})
    [other] = _permissions("GetItem", {"Key": {"id": {"S": "Stack/StepBatch#a"}}})
    [mixed] = required_permissions(
        "dynamodb",
        "BatchGetItem",
        {"RequestItems": {"T": {"Keys": [{"id": {"S": "Stack/Step#a"}}, {"id": "Other#b"}]}}},
        SecretArns(),
        lambda _t: "id",
    )
    assert role.decide(own) == "allowed"
    assert role.decide(other) == "implicit"  # a longer path is another step: '#' ends it
    assert role.decide(mixed) == "implicit"  # ForAllValues: every key must match
    # ForAllValues holds for a request without keys (a Scan), as in IAM: never grant one so.
    scan_role = _dynamodb_role("Stack/Step#*", "dynamodb:Scan")
    [scan] = _permissions("Scan", {})
    assert scan_role.decide(scan) == "allowed"


@pytest.mark.synth  # record_prefix_grants imports aws-cdk-lib
def test_a_prefix_with_wildcard_characters_is_matched_literally():
    from constructs_lib.record_prefix_grants import prefix_pattern

    role = _dynamodb_role(prefix_pattern("Stack/Odd*Name?"), "dynamodb:GetItem")
    [own] = _permissions("GetItem", {"Key": {"id": {"S": "Stack/Odd*Name?#a"}}})
    [lookalike] = _permissions("GetItem", {"Key": {"id": {"S": "Stack/OddXYZNameQ#a"}}})
    assert role.decide(own) == "allowed"
    assert role.decide(lookalike) == "implicit"


def test_each_role_reaches_its_own_record_prefix_and_is_denied_another(probed_run):
    """The IAM-checked run of the real stack: its normal paths are denied nothing; a role
    reaching another function's records of the shared IdempotencyTable is denied."""
    result, normal, crossing = probed_run.result, probed_run.normal, probed_run.crossing
    print(f"\nIAM-checked run: normal paths denied {normal}, cross-prefix calls denied {crossing}")
    assert result.iam_checked and result.classified == 1
    assert normal == 0
    assert crossing == 6 > 0
    for function, prefix, allowed in probed_run.reached:
        assert allowed is (prefix == RECORD_PREFIXES[function]), (function, prefix)
