"""What an IdempotentModelStep synthesizes, one property per test (issue 2, section 3)."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_events as events
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Match

from constructs_lib import IdempotentModelStep

from .conftest import make_step, new_app, synth

STACK = "IdempotentModelStepDemo"


@pytest.fixture(scope="module")
def template(demo) -> assertions.Template:
    return demo.template(STACK)


@pytest.fixture(scope="module")
def raw(demo) -> dict:
    return demo.templates[STACK]


def resources(raw: dict, type_: str) -> dict[str, dict]:
    return {k: v for k, v in raw["Resources"].items() if v["Type"] == type_}


def only(raw: dict, type_: str) -> dict:
    found = resources(raw, type_)
    assert len(found) == 1, f"expected one {type_}, found {list(found)}"
    return next(iter(found.values()))


def logical_id(raw: dict, type_: str) -> str:
    found = resources(raw, type_)
    assert len(found) == 1
    return next(iter(found))


# ---------------------------------------------------------------- rule -> target
def test_rule_targets_the_function_with_a_dead_letter_config_to_the_dlq(raw):
    # GIVEN the demo stack  WHEN synthesized  THEN the rule target dead-letters to the DLQ
    target = only(raw, "AWS::Events::Rule")["Properties"]["Targets"][0]
    assert target["DeadLetterConfig"]["Arn"] == {
        "Fn::GetAtt": [logical_id(raw, "AWS::SQS::Queue"), "Arn"]
    }


def test_rule_target_retry_policy_uses_the_defaults(raw):
    target = only(raw, "AWS::Events::Rule")["Properties"]["Targets"][0]
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 86400}


def test_rule_targets_the_step_function(raw):
    target = only(raw, "AWS::Events::Rule")["Properties"]["Targets"][0]
    assert target["Arn"] == {"Fn::GetAtt": [logical_id(raw, "AWS::Lambda::Function"), "Arn"]}


def test_rule_is_on_the_custom_bus_with_the_given_pattern(raw):
    props = only(raw, "AWS::Events::Rule")["Properties"]
    assert props["EventBusName"] == {"Ref": logical_id(raw, "AWS::Events::EventBus")}
    assert props["EventPattern"] == {"source": ["demo.uploads"], "detail-type": ["Row Validated"]}


def test_dlq_policy_lets_only_this_rule_send(template, raw):
    rule_arn = {"Fn::GetAtt": [logical_id(raw, "AWS::Events::Rule"), "Arn"]}
    template.has_resource_properties(
        "AWS::SQS::QueuePolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Action": "sqs:SendMessage",
                                "Principal": {"Service": "events.amazonaws.com"},
                                "Condition": {"ArnEquals": {"aws:SourceArn": rule_arn}},
                            }
                        )
                    ]
                )
            }
        },
    )


# ---------------------------------------------------------------- function
def test_function_runs_python_3_13_with_the_model_step_handler(raw):
    props = only(raw, "AWS::Lambda::Function")["Properties"]
    assert (props["Runtime"], props["Handler"]) == ("python3.13", "model_step.handler.handler")


def test_function_has_its_own_log_group_with_retention(raw):
    props = only(raw, "AWS::Lambda::Function")["Properties"]
    assert props["LoggingConfig"]["LogGroup"] == {"Ref": logical_id(raw, "AWS::Logs::LogGroup")}
    assert only(raw, "AWS::Logs::LogGroup")["Properties"]["RetentionInDays"] == 30


def test_function_environment_configures_the_handler(raw):
    env = only(raw, "AWS::Lambda::Function")["Properties"]["Environment"]["Variables"]
    assert env["IDEMPOTENCY_TABLE_NAME"] == {"Ref": logical_id(raw, "AWS::DynamoDB::Table")}
    assert env["DEAD_LETTER_QUEUE_URL"] == {"Ref": logical_id(raw, "AWS::SQS::Queue")}
    assert env["ANTHROPIC_API_KEY_SECRET_ARN"] == {
        "Ref": logical_id(raw, "AWS::SecretsManager::Secret")
    }
    assert {k: env[k] for k in ("IDEMPOTENCY_KEY", "PROMPT_VERSION", "MODEL_ID", "MAX_TOKENS")} == {
        "IDEMPOTENCY_KEY": "[upload_id, row_number]",
        "PROMPT_VERSION": "v1",
        "MODEL_ID": "claude-haiku-5-5",
        "MAX_TOKENS": "1024",
    }
    assert env["SYSTEM_PROMPT"].startswith("Classify the lead")


def test_no_secret_value_reaches_the_template(raw):
    # The secret is referenced by ARN only; no SecretString or dynamic reference.
    text = json.dumps(raw)
    assert "resolve:secretsmanager" not in text
    assert 'ANTHROPIC_API_KEY"' not in text


def test_event_invoke_config_retries_and_dead_letters_to_the_same_queue(raw):
    props = only(raw, "AWS::Lambda::EventInvokeConfig")["Properties"]
    assert props["MaximumRetryAttempts"] == 2
    assert props["DestinationConfig"]["OnFailure"]["Destination"] == {
        "Fn::GetAtt": [logical_id(raw, "AWS::SQS::Queue"), "Arn"]
    }


def test_event_invoke_config_max_age_is_capped_at_lambdas_six_hours(raw):
    props = only(raw, "AWS::Lambda::EventInvokeConfig")["Properties"]
    assert props["MaximumEventAgeInSeconds"] == 21600


# ---------------------------------------------------------------- table
def test_table_is_keyed_for_powertools(raw):
    props = only(raw, "AWS::DynamoDB::Table")["Properties"]
    assert props["KeySchema"] == [{"AttributeName": "id", "KeyType": "HASH"}]
    assert props["AttributeDefinitions"] == [{"AttributeName": "id", "AttributeType": "S"}]


def test_table_expires_records_on_the_expiration_attribute(raw):
    props = only(raw, "AWS::DynamoDB::Table")["Properties"]
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expiration", "Enabled": True}


def test_table_is_on_demand_with_point_in_time_recovery_and_encryption(raw):
    props = only(raw, "AWS::DynamoDB::Table")["Properties"]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["SSESpecification"] == {"SSEEnabled": True}


# ---------------------------------------------------------------- DLQ
def test_dlq_is_standard_encrypted_and_keeps_messages_14_days(raw):
    props = only(raw, "AWS::SQS::Queue")["Properties"]
    assert "FifoQueue" not in props
    assert props["SqsManagedSseEnabled"] is True
    assert props["MessageRetentionPeriod"] == 14 * 24 * 3600


def test_dlq_refuses_non_tls_access(template, raw):
    template.has_resource_properties(
        "AWS::SQS::QueuePolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Deny",
                                "Action": "sqs:*",
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            }
                        )
                    ]
                )
            }
        },
    )


# ---------------------------------------------------------------- alarms
def _alarms(raw: dict) -> dict[str, dict]:
    return {
        v["Properties"]["MetricName"]: v["Properties"]
        for v in resources(raw, "AWS::CloudWatch::Alarm").values()
    }


def test_eventbridge_dlq_alarms_use_rule_and_custom_bus_dimensions(raw):
    alarms = _alarms(raw)
    rule = {"Ref": logical_id(raw, "AWS::Events::Rule")}
    bus = {"Ref": logical_id(raw, "AWS::Events::EventBus")}
    for name in ("InvocationsSentToDlq", "InvocationsFailedToBeSentToDlq"):
        assert alarms[name]["Namespace"] == "AWS/Events"
        assert sorted(alarms[name]["Dimensions"], key=lambda d: d["Name"]) == [
            {"Name": "EventBusName", "Value": bus},
            {"Name": "RuleName", "Value": rule},
        ]


def test_dlq_alarm_fires_on_any_message_arriving(raw):
    alarm = _alarms(raw)["NumberOfMessagesSent"]
    assert (alarm["Namespace"], alarm["Statistic"], alarm["Threshold"]) == ("AWS/SQS", "Sum", 1)
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"


def test_every_alarm_treats_missing_data_as_not_breaching(raw):
    assert {a["TreatMissingData"] for a in _alarms(raw).values()} == {"notBreaching"}


def test_every_alarm_notifies_the_alarm_topic(raw):
    topic = {"Ref": logical_id(raw, "AWS::SNS::Topic")}
    assert [a["AlarmActions"] for a in _alarms(raw).values()] == [[topic]] * 3


def test_default_bus_alarms_use_rule_name_alone(tmp_path_factory):
    app = new_app(tmp_path_factory, "default-bus")
    stack = cdk.Stack(app, "DefaultBus")
    make_step(stack)
    raw = synth(app).templates["DefaultBus"]
    dims = [a["Dimensions"] for n, a in _alarms(raw).items() if n.startswith("Invocations")]
    assert all([d["Name"] for d in dim] == ["RuleName"] for dim in dims) and len(dims) == 2


# ---------------------------------------------------------------- IAM
def _statements(raw: dict) -> list[dict]:
    policies = resources(raw, "AWS::IAM::Policy").values()
    return [s for p in policies for s in p["Properties"]["PolicyDocument"]["Statement"]]


def _actions(statement: dict) -> list[str]:
    action = statement["Action"]
    return [action] if isinstance(action, str) else action


def test_iam_has_no_wildcard_actions(raw):
    actions = [a for s in _statements(raw) for a in _actions(s)]
    assert actions and not [a for a in actions if "*" in a]


def test_iam_grants_exactly_powertools_dynamodb_actions_on_the_table(raw):
    table = logical_id(raw, "AWS::DynamoDB::Table")
    dynamo = [s for s in _statements(raw) if _actions(s)[0].startswith("dynamodb:")]
    assert len(dynamo) == 1
    assert sorted(_actions(dynamo[0])) == [
        "dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"
    ]  # fmt: skip
    assert table in json.dumps(dynamo[0]["Resource"])


def test_iam_sends_only_to_the_dlq_and_reads_only_the_secret(raw):
    by_action = {a: s for s in _statements(raw) for a in _actions(s)}
    queue = logical_id(raw, "AWS::SQS::Queue")
    assert by_action["sqs:SendMessage"]["Resource"] == {"Fn::GetAtt": [queue, "Arn"]}
    secret = logical_id(raw, "AWS::SecretsManager::Secret")
    assert by_action["secretsmanager:GetSecretValue"]["Resource"] == {"Ref": secret}


def test_role_has_no_managed_policies(raw):
    role = only(raw, "AWS::IAM::Role")["Properties"]
    assert "ManagedPolicyArns" not in role


# ---------------------------------------------------------------- names / attributes
# EventBus is absent on purpose: CloudFormation requires its Name, and CDK
# generates a unique one from the construct path.
NAME_PROPS = {
    "AWS::Lambda::Function": "FunctionName", "AWS::DynamoDB::Table": "TableName",
    "AWS::SQS::Queue": "QueueName", "AWS::Events::Rule": "Name",
    "AWS::Logs::LogGroup": "LogGroupName", "AWS::IAM::Role": "RoleName",
    "AWS::CloudWatch::Alarm": "AlarmName", "AWS::SNS::Topic": "TopicName",
    "AWS::S3::Bucket": "BucketName", "AWS::SecretsManager::Secret": "Name",
}  # fmt: skip


def _has_physical_name(resource: dict) -> bool:
    return NAME_PROPS.get(resource["Type"]) in resource.get("Properties", {})


def test_no_physical_names_are_set(raw):
    assert [k for k, v in raw["Resources"].items() if _has_physical_name(v)] == []


def test_two_stacks_with_steps_synthesize_side_by_side(tmp_path_factory):
    app = new_app(tmp_path_factory, "side-by-side")
    for name in ("One", "Two"):
        make_step(cdk.Stack(app, name))
    one, two = (synth(app).templates[n]["Resources"] for n in ("One", "Two"))
    # Same resources, no physical names in either: CloudFormation names each
    # copy itself, so both deploy into one account and region.
    assert sorted(v["Type"] for v in one.values()) == sorted(v["Type"] for v in two.values())
    assert not [k for k, v in {**one, **two}.items() if _has_physical_name(v)]


def test_attributes_and_retry_arithmetic(demo):
    from .demo_stack import DemoStack

    app = cdk.App(context={"aws:cdk:bundling-stacks": []})
    step = DemoStack(app, "Attrs").step
    assert isinstance(step.function, lambda_.Function)
    assert isinstance(step.rule, events.Rule)
    assert step.table is not None and step.dead_letter_queue is not None
    assert len(step.alarms) == 3
    assert step.max_model_requests_per_delivery == 3


@pytest.mark.parametrize("attempts, expected", [(0, 1), (1, 2), (2, 3)])
def test_max_model_requests_per_delivery_follows_lambda_retries(attempts, expected):
    stack = cdk.Stack(cdk.App(context={"aws:cdk:bundling-stacks": []}), "S")
    step = make_step(stack, lambda_retry_attempts=attempts)
    assert step.max_model_requests_per_delivery == expected


def test_step_is_a_construct_with_stable_child_ids():
    stack = cdk.Stack(cdk.App(context={"aws:cdk:bundling-stacks": []}), "S")
    step = make_step(stack)
    assert isinstance(step, IdempotentModelStep)
    assert {c.node.id for c in step.node.children} >= {
        "IdempotencyTable", "DeadLetterQueue", "FunctionLogGroup", "FunctionServiceRole",
        "Function", "Rule",
        "SentToDlqAlarm", "FailedToBeSentToDlqAlarm", "DeadLetterMessagesAlarm",
    }  # fmt: skip


def test_one_step_is_13_resources(raw):
    # The README quotes this figure; CloudFormation allows 500 per stack.
    assert len([k for k in raw["Resources"] if k.startswith("Classify")]) == 13


# ---------------------------------------------------------------- providers / handlers
@pytest.fixture(scope="module")
def variants(tmp_path_factory) -> dict:
    from constructs_lib import ModelProvider, ModelStepHandler
    from constructs_lib.bundling import lambda_src_root

    app = new_app(tmp_path_factory, "variants")
    stack = cdk.Stack(app, "Variants")
    make_step(stack, "Bedrock", model_provider=ModelProvider.BEDROCK, api_key_secret=None,
              model_id="anthropic.claude-haiku-5-5-v1:0")  # fmt: skip
    make_step(stack, "Arm", architecture=lambda_.Architecture.ARM_64)
    make_step(stack, "Custom", handler=ModelStepHandler.from_package(
        lambda_src_root() / "prospect_classifier", handler="prospect_classifier.handler.handler"
    ), environment={"PROSPECTS_TABLE_NAME": "prospects"})  # fmt: skip
    return synth(app).templates["Variants"]


def _fn(raw: dict, prefix: str) -> dict:
    return next(
        v["Properties"] for k, v in raw["Resources"].items()
        if k.startswith(f"{prefix}Function") and v["Type"] == "AWS::Lambda::Function"
    )  # fmt: skip


def test_bedrock_step_has_no_secret_and_may_invoke_only_its_model(variants):
    env = _fn(variants, "Bedrock")["Environment"]["Variables"]
    assert env["MODEL_PROVIDER"] == "bedrock" and "ANTHROPIC_API_KEY_SECRET_ARN" not in env
    policy = next(
        v for k, v in variants["Resources"].items()
        if k.startswith("BedrockFunctionServiceRoleDefaultPolicy")
    )  # fmt: skip
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    bedrock = [s for s in statements if s["Action"] == "bedrock:InvokeModel"]
    assert len(bedrock) == 1
    assert "foundation-model/anthropic.claude-haiku-5-5-v1:0" in json.dumps(bedrock[0]["Resource"])
    assert not [s for s in statements if "secretsmanager" in json.dumps(s["Action"])]


def test_arm64_step_runs_on_arm_with_its_own_asset(variants):
    arm, x86 = _fn(variants, "Arm"), _fn(variants, "Bedrock")
    assert arm["Architectures"] == ["arm64"]
    assert arm["Code"]["S3Key"] != x86["Code"]["S3Key"]


def test_custom_handler_runs_its_own_entry_point_with_extra_environment(variants):
    fn = _fn(variants, "Custom")
    assert fn["Handler"] == "prospect_classifier.handler.handler"
    assert fn["Environment"]["Variables"]["PROSPECTS_TABLE_NAME"] == "prospects"
    assert fn["Code"]["S3Key"] != _fn(variants, "Bedrock")["Code"]["S3Key"]
