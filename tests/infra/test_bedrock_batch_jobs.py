"""Issue 37: ``ModelDelivery.batch()`` with ``ModelProvider.BEDROCK``: the jobs' bucket, their
service role, the function's grants and environment; bad props fail at synth naming them.

One app is synthesized once under cdk-nag's AwsSolutions checks (an unacknowledged finding
fails the synth): a step on a us. inference profile with the bucket it makes, and one on a
foundation model with a bucket given as ``batch_bucket``.
"""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import Duration, assertions
from aws_cdk import aws_events as events
from aws_cdk import aws_s3 as s3
from cdk_nag import AwsSolutionsChecks

from constructs_lib import (
    IdempotentModelStep,
    ModelDelivery,
    ModelProvider,
    PropValidationError,
    Thinking,
)

from .conftest import NO_BUNDLING, Synthesized, new_app, synth, unvalidated_app
from .test_snapshot_and_compliance import lint

ACCOUNT = "123456789012"
PROFILE = "us.anthropic.claude-haiku-5-5"
MODEL = "anthropic.claude-haiku-5-5"


def bedrock_batch_step(stack: cdk.Stack, step_id: str = "Step", **overrides) -> IdempotentModelStep:
    props = {
        "event_pattern": events.EventPattern(source=["test.source"]),
        "idempotency_key": "[upload_id, row_number]",
        "prompt_version": "v1",
        "system_prompt": "Answer hot, warm or cold.",
        "model_provider": ModelProvider.BEDROCK,
        "model_id": PROFILE,
        "thinking": Thinking.DISABLED,
        "delivery": ModelDelivery.batch(),
        **overrides,
    }
    return IdempotentModelStep(stack, step_id, **props)


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    app = new_app(tmp_path_factory, "bedrock-batch")
    env = cdk.Environment(account=ACCOUNT, region="us-east-1")
    stack = cdk.Stack(app, "Owned", env=env)
    bedrock_batch_step(stack)
    given = cdk.Stack(app, "Given", env=env)
    bucket = s3.Bucket.from_bucket_name(given, "Theirs", "their-batch-bucket")
    bedrock_batch_step(given, model_id=MODEL, batch_bucket=bucket)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return synth(app)


@pytest.fixture(scope="module")
def owned(synthesized) -> assertions.Template:
    return synthesized.template("Owned")


@pytest.fixture(scope="module")
def given(synthesized) -> assertions.Template:
    return synthesized.template("Given")


def only(template: assertions.Template, kind: str) -> dict:
    [resource] = template.find_resources(kind).values()
    return resource["Properties"]


def role_named(template: assertions.Template, part: str) -> tuple[str, dict]:
    [(logical, role)] = [
        (k, v) for k, v in template.find_resources("AWS::IAM::Role").items() if part in k
    ]
    return logical, role["Properties"]


def statements_of(template: assertions.Template, role_logical: str) -> list[dict]:
    found = []
    for policy in template.find_resources("AWS::IAM::Policy").values():
        if {"Ref": role_logical} in policy["Properties"]["Roles"]:
            found.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return found


def actions(statement: dict) -> list[str]:
    value = statement["Action"]
    return value if isinstance(value, list) else [value]


def step_environment(template: assertions.Template) -> dict:
    [step] = [
        f
        for f in template.find_resources("AWS::Lambda::Function").values()
        if "IDEMPOTENCY_KEY" in str(f["Properties"].get("Environment"))
    ]
    return step["Properties"]["Environment"]["Variables"]


# -- the bucket ------------------------------------------------------------------------------------
def test_the_bucket_is_encrypted_with_s3_managed_keys(owned):
    encryption = only(owned, "AWS::S3::Bucket")["BucketEncryption"]
    rule = encryption["ServerSideEncryptionConfiguration"][0]
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"


def test_the_bucket_blocks_all_public_access(owned):
    assert only(owned, "AWS::S3::Bucket")["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }


def test_the_bucket_refuses_requests_without_tls(owned):
    policy = only(owned, "AWS::S3::BucketPolicy")["PolicyDocument"]["Statement"]
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for s in policy
    )


def test_the_lifecycle_expires_job_objects_after_the_timeout_plus_two_days(owned):
    [rule] = only(owned, "AWS::S3::Bucket")["LifecycleConfiguration"]["Rules"]
    assert (rule["Prefix"], rule["ExpirationInDays"], rule["Status"]) == (
        "bedrock-batch/",
        3,
        "Enabled",
    )


def test_a_given_bucket_is_used_and_no_bucket_is_made(given):
    given.resource_count_is("AWS::S3::Bucket", 0)
    assert step_environment(given)["BATCH_BUCKET_NAME"] == "their-batch-bucket"


# -- the job role ----------------------------------------------------------------------------------
def test_only_bedrock_may_assume_the_job_role_for_this_accounts_jobs(owned):
    _, role = role_named(owned, "BedrockBatchJobRole")
    [statement] = role["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "bedrock.amazonaws.com"}
    assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": ACCOUNT}
    source = json.dumps(statement["Condition"]["ArnLike"]["aws:SourceArn"])
    assert f":{ACCOUNT}:model-invocation-job/*" in source


def test_the_job_role_reads_only_the_input_prefix_and_writes_only_the_output_prefix(owned):
    logical, _ = role_named(owned, "BedrockBatchJobRole")
    s3_statements = [
        s for s in statements_of(owned, logical) if any(a.startswith("s3:") for a in actions(s))
    ]
    reads = [json.dumps(s["Resource"]) for s in s3_statements if actions(s) == ["s3:GetObject"]]
    writes = [json.dumps(s["Resource"]) for s in s3_statements if actions(s) == ["s3:PutObject"]]
    assert len(reads) == 1 and "/bedrock-batch/input/*" in reads[0]
    assert len(writes) == 1 and "/bedrock-batch/output/*" in writes[0]
    assert {a for s in s3_statements for a in actions(s)} == {
        "s3:GetObject",
        "s3:PutObject",
        "s3:ListBucket",
    }


def test_the_job_role_invokes_only_the_steps_profile_and_its_model(owned):
    logical, _ = role_named(owned, "BedrockBatchJobRole")
    invoke = [s for s in statements_of(owned, logical) if "bedrock:InvokeModel" in actions(s)]
    resources = json.dumps([s["Resource"] for s in invoke])
    assert f"inference-profile/{PROFILE}" in resources
    assert f"foundation-model/{MODEL}" in resources
    assert all(actions(s) == ["bedrock:InvokeModel"] for s in invoke)


# -- the function ----------------------------------------------------------------------------------
def function_statements(template: assertions.Template) -> list[dict]:
    logical, _ = role_named(template, "FunctionServiceRole")
    return statements_of(template, logical)


def test_the_function_may_pass_only_the_job_role_and_only_to_bedrock(owned):
    job_role, _ = role_named(owned, "BedrockBatchJobRole")
    [passing] = [s for s in function_statements(owned) if "iam:PassRole" in actions(s)]
    assert passing["Resource"] == {"Fn::GetAtt": [job_role, "Arn"]}
    assert passing["Condition"] == {
        "StringEquals": {"iam:PassedToService": "bedrock.amazonaws.com"}
    }


def test_the_function_gets_the_four_job_actions_and_no_wildcard_action(owned):
    granted = {a for s in function_statements(owned) for a in actions(s)}
    assert {
        "bedrock:CreateModelInvocationJob",
        "bedrock:GetModelInvocationJob",
        "bedrock:ListModelInvocationJobs",
        "bedrock:StopModelInvocationJob",
    } <= granted
    assert not [a for a in granted if "*" in a]


def test_only_list_model_invocation_jobs_is_granted_on_every_resource(owned):
    everywhere = [s for s in function_statements(owned) if s["Resource"] == "*"]
    assert [actions(s) for s in everywhere] == [["bedrock:ListModelInvocationJobs"]]


def test_get_and_stop_are_scoped_to_this_accounts_jobs(owned):
    [job] = [s for s in function_statements(owned) if "bedrock:GetModelInvocationJob" in actions(s)]
    assert f":{ACCOUNT}:model-invocation-job/*" in json.dumps(job["Resource"])


def test_the_function_learns_the_bucket_prefix_and_role(owned):
    env = step_environment(owned)
    assert env["MODEL_PROVIDER"] == "bedrock" and env["MODEL_DELIVERY"] == "batch"
    assert env["BATCH_S3_PREFIX"] == "bedrock-batch/"
    assert "Ref" in env["BATCH_BUCKET_NAME"] and "Fn::GetAtt" in env["BATCH_ROLE_ARN"]


# -- refused props ---------------------------------------------------------------------------------
def test_an_event_age_no_job_timeout_can_follow_is_refused_naming_the_prop():
    """A job's timeout follows max_event_age (24-168 h); the step allows at most a day, so
    every job runs 24 h, and a longer age is refused naming the prop."""
    stack = cdk.Stack(unvalidated_app(context=NO_BUNDLING), "TooLong")
    with pytest.raises(PropValidationError, match="max_event_age must be between"):
        bedrock_batch_step(stack, max_event_age=Duration.hours(169))


def test_more_requests_than_a_job_holds_are_refused_naming_the_prop():
    stack = cdk.Stack(unvalidated_app(context=NO_BUNDLING), "TooMany")
    with pytest.raises(PropValidationError, match=r"max_requests=\.\.\.\) must be at most 50,000"):
        bedrock_batch_step(stack, delivery=ModelDelivery.batch(max_requests=50_001))


def test_a_batch_bucket_without_bedrock_batch_is_refused():
    stack = cdk.Stack(unvalidated_app(context=NO_BUNDLING), "Stray")
    bucket = s3.Bucket.from_bucket_name(stack, "Theirs", "their-batch-bucket")
    with pytest.raises(PropValidationError, match="batch_bucket is used only with"):
        bedrock_batch_step(stack, delivery=ModelDelivery.realtime(), batch_bucket=bucket)


# -- scanners --------------------------------------------------------------------------------------
def test_cfn_lint_finds_nothing_in_either_template(synthesized):
    assert lint(synthesized.outdir) == []


def test_the_bucket_acknowledges_checkovs_logging_and_versioning_checks_with_reasons(owned):
    [bucket] = owned.find_resources("AWS::S3::Bucket").values()
    skips = {s["id"]: s["comment"] for s in bucket["Metadata"]["checkov"]["skip"]}
    assert sorted(skips) == ["CKV_AWS_18", "CKV_AWS_21"]
    assert all(len(reason) > 80 for reason in skips.values())
