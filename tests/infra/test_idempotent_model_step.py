"""What an IdempotentModelStep synthesizes, one property per test (issue 2, section 3)."""

from __future__ import annotations

import hashlib
import json

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_events as events
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Match

from constructs_lib import IdempotentModelStep

from .conftest import make_step, new_app, synth, unvalidated_app

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


def queue_id(raw: dict, name: str) -> str:
    """The logical id of the step's ``DeadLetterQueue``, ``BufferQueue`` or ``RedriveQueue``."""
    return next(k for k in resources(raw, "AWS::SQS::Queue") if k.startswith(f"Classify{name}"))


def mapping_of(raw: dict, queue: str) -> dict:
    """The properties of the event source mapping that reads the step's ``queue``."""
    found = [
        v["Properties"] for v in resources(raw, "AWS::Lambda::EventSourceMapping").values()
        if v["Properties"]["EventSourceArn"] == arn(queue_id(raw, queue))
    ]  # fmt: skip
    assert len(found) == 1, f"{queue}: {len(found)} mappings"
    return found[0]


def arn(logical: str) -> dict:
    return {"Fn::GetAtt": [logical, "Arn"]}


# ---------------------------------------------------------------- rule -> target
def test_rule_target_dead_letters_to_the_dlq(raw):
    # GIVEN the demo stack  WHEN synthesized  THEN the rule target dead-letters to the DLQ
    target = only(raw, "AWS::Events::Rule")["Properties"]["Targets"][0]
    assert target["DeadLetterConfig"]["Arn"] == arn(queue_id(raw, "DeadLetterQueue"))


def test_rule_target_retry_policy_uses_the_defaults(raw):
    target = only(raw, "AWS::Events::Rule")["Properties"]["Targets"][0]
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 86400}


def test_rule_targets_the_buffer_queue(raw):
    # The whole event is the message body (no Input): the runtime parses it as is.
    target = only(raw, "AWS::Events::Rule")["Properties"]["Targets"][0]
    assert target["Arn"] == arn(queue_id(raw, "BufferQueue"))
    assert "Input" not in target and "InputTransformer" not in target


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
    assert env["DEAD_LETTER_QUEUE_URL"] == {"Ref": queue_id(raw, "DeadLetterQueue")}
    assert env["ANTHROPIC_API_KEY_SECRET_ARN"] == {
        "Ref": logical_id(raw, "AWS::SecretsManager::Secret")
    }
    assert {k: env[k] for k in ("IDEMPOTENCY_KEY", "PROMPT_VERSION", "MODEL_ID", "MAX_TOKENS")} == {
        "IDEMPOTENCY_KEY": "[upload_id, row_number]",
        "PROMPT_VERSION": "v1",
        "MODEL_ID": "claude-haiku-5-5",
        "MAX_TOKENS": "1024",
    }
    prompt = "Classify the lead as hot, warm or cold. Answer with one word."
    assert env["SYSTEM_PROMPT_SHA256"] == hashlib.sha256(prompt.encode()).hexdigest()
    assert env["PROMPT_CACHE"] == "5m"
    assert "SYSTEM_PROMPT" not in env


def test_no_secret_value_reaches_the_template(raw):
    # The secret is referenced by ARN only; no SecretString or dynamic reference.
    text = json.dumps(raw)
    assert "resolve:secretsmanager" not in text
    assert 'ANTHROPIC_API_KEY"' not in text


def test_nothing_invokes_the_function_asynchronously_so_no_event_invoke_config(raw):
    # GIVEN rows arrive through the buffer queue's mapping (a synchronous invoke)
    # THEN there is no async retry layer to configure, and no Lambda permission for events
    assert resources(raw, "AWS::Lambda::EventInvokeConfig") == {}
    assert resources(raw, "AWS::Lambda::Permission") == {}


def test_environment_carries_the_runtime_contract(raw):
    env = only(raw, "AWS::Lambda::Function")["Properties"]["Environment"]["Variables"]
    assert {k: env[k] for k in (
        "IDEMPOTENCY_RECORD_PREFIX", "MAX_EVENT_AGE_SECONDS", "MAX_ATTEMPTS",
        "API_KEY_MAX_AGE_SECONDS",
    )} == {
        "IDEMPOTENCY_RECORD_PREFIX": "IdempotentModelStepDemo/Classify",
        "MAX_EVENT_AGE_SECONDS": "86400", "MAX_ATTEMPTS": "3", "API_KEY_MAX_AGE_SECONDS": "300",
    }  # fmt: skip
    assert env["BUFFER_QUEUE_URL"] == {"Ref": queue_id(raw, "BufferQueue")}


def test_the_keys_memory_outlives_the_queues_that_can_hold_a_copy(raw):
    """GIVEN the default max_event_age (24 h) and the buffer and redrive queues' retention
    THEN the runtime's key memory (IDEMPOTENCY_EXPIRES_AFTER_SECONDS) is max_event_age plus
    the longest retention plus an hour (model_step.lifetime)."""
    env = only(raw, "AWS::Lambda::Function")["Properties"]["Environment"]["Variables"]
    retention = max(
        _buffer(raw)["MessageRetentionPeriod"],
        raw["Resources"][queue_id(raw, "RedriveQueue")]["Properties"]["MessageRetentionPeriod"],
    )
    assert retention == 14 * 86_400
    assert int(env["IDEMPOTENCY_EXPIRES_AFTER_SECONDS"]) == 86_400 + retention + 3_600


# ---------------------------------------------------------------- buffer queue
def _buffer(raw: dict) -> dict:
    return raw["Resources"][queue_id(raw, "BufferQueue")]["Properties"]


def test_buffer_queue_is_standard_and_encrypted_like_the_dlq(raw):
    props = _buffer(raw)
    assert "FifoQueue" not in props and props["SqsManagedSseEnabled"] is True


def test_buffer_queue_visibility_timeout_is_six_function_timeouts(raw):
    timeout = only(raw, "AWS::Lambda::Function")["Properties"]["Timeout"]
    assert _buffer(raw)["VisibilityTimeout"] == 6 * timeout == 540


def test_buffer_queue_keeps_rows_14_days(raw):
    assert _buffer(raw)["MessageRetentionPeriod"] == 14 * 24 * 3600


def test_buffer_queue_redrives_to_the_redrive_queue_after_max_attempts_plus_six(raw):
    # GIVEN MAX_ATTEMPTS 3  THEN 3 receives that run + 1 to dead-letter + 5 for throttles
    assert _buffer(raw)["RedrivePolicy"] == {
        "deadLetterTargetArn": arn(queue_id(raw, "RedriveQueue")),
        "maxReceiveCount": 9,
    }


def test_buffer_queue_refuses_non_tls_access(raw):
    policies = [
        p["Properties"] for p in resources(raw, "AWS::SQS::QueuePolicy").values()
        if p["Properties"]["Queues"] == [{"Ref": queue_id(raw, "BufferQueue")}]
    ]  # fmt: skip
    statements = policies[0]["PolicyDocument"]["Statement"]
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for s in statements
    )


def test_buffer_queue_accepts_only_this_rule(raw):
    policy = next(
        p["Properties"] for p in resources(raw, "AWS::SQS::QueuePolicy").values()
        if p["Properties"]["Queues"] == [{"Ref": queue_id(raw, "BufferQueue")}]
    )  # fmt: skip
    allow = [s for s in policy["PolicyDocument"]["Statement"] if s["Effect"] == "Allow"]
    assert allow == [
        {
            "Action": ["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"],
            "Condition": {
                "ArnEquals": {"aws:SourceArn": arn(logical_id(raw, "AWS::Events::Rule"))}
            },
            "Effect": "Allow",
            "Principal": {"Service": "events.amazonaws.com"},
            "Resource": arn(queue_id(raw, "BufferQueue")),
        }
    ]


def test_mapping_reads_the_buffer_one_row_at_a_time_with_partial_batch_responses(raw):
    mapping = mapping_of(raw, "BufferQueue")
    assert (mapping["BatchSize"], mapping["FunctionResponseTypes"]) == (
        1, ["ReportBatchItemFailures"]
    )  # fmt: skip


def test_mapping_caps_concurrency_at_the_default_10(raw):
    assert mapping_of(raw, "BufferQueue")["ScalingConfig"] == {"MaximumConcurrency": 10}


def test_the_function_has_exactly_two_mappings_buffer_and_redrive(raw):
    function = logical_id(raw, "AWS::Lambda::Function")
    mappings = resources(raw, "AWS::Lambda::EventSourceMapping").values()
    assert sorted(m["Properties"]["EventSourceArn"]["Fn::GetAtt"][0] for m in mappings) == sorted(
        queue_id(raw, q) for q in ("BufferQueue", "RedriveQueue")
    )
    assert {json.dumps(m["Properties"]["FunctionName"]) for m in mappings} == {
        json.dumps({"Ref": function})
    }


# ---------------------------------------------------------------- redrive queue
def _redrive(raw: dict) -> dict:
    return raw["Resources"][queue_id(raw, "RedriveQueue")]["Properties"]


def test_redrive_queue_is_standard_and_encrypted_like_the_dlq(raw):
    props = _redrive(raw)
    assert "FifoQueue" not in props and props["SqsManagedSseEnabled"] is True


def test_redrive_queue_visibility_timeout_is_six_function_timeouts(raw):
    timeout = only(raw, "AWS::Lambda::Function")["Properties"]["Timeout"]
    assert _redrive(raw)["VisibilityTimeout"] == 6 * timeout == 540


def test_redrive_queue_keeps_rows_14_days(raw):
    assert _redrive(raw)["MessageRetentionPeriod"] == 14 * 24 * 3600


def test_redrive_queue_dead_letters_to_the_dlq_5_receives_after_the_buffers_count(raw):
    # A moved message may keep its receive count (moto keeps it): 9 + 5, so the redrive
    # queue's consumer gets 5 receives either way, never 0.
    assert _redrive(raw)["RedrivePolicy"] == {
        "deadLetterTargetArn": arn(queue_id(raw, "DeadLetterQueue")),
        "maxReceiveCount": 14,
    }


def _queue_policy(raw: dict, queue: str) -> list[dict]:
    return next(
        p["Properties"]["PolicyDocument"]["Statement"]
        for p in resources(raw, "AWS::SQS::QueuePolicy").values()
        if p["Properties"]["Queues"] == [{"Ref": queue_id(raw, queue)}]
    )


def test_redrive_queue_refuses_non_tls_access(raw):
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for s in _queue_policy(raw, "RedriveQueue")
    )


def test_redrive_queue_lets_no_one_send(raw):
    # Only SQS's redrive policy puts rows there; its policy allows nothing.
    assert [s for s in _queue_policy(raw, "RedriveQueue") if s["Effect"] == "Allow"] == []


def test_redrive_mapping_reads_one_row_at_a_time_with_partial_batch_responses(raw):
    mapping = mapping_of(raw, "RedriveQueue")
    assert (mapping["BatchSize"], mapping["FunctionResponseTypes"]) == (
        1, ["ReportBatchItemFailures"]
    )  # fmt: skip


def test_redrive_mapping_runs_at_most_2_at_once(raw):
    assert mapping_of(raw, "RedriveQueue")["ScalingConfig"] == {"MaximumConcurrency": 2}


def test_environment_names_the_redrive_queue_by_arn(raw):
    # The runtime tells the two sources apart by a record's eventSourceARN.
    env = only(raw, "AWS::Lambda::Function")["Properties"]["Environment"]["Variables"]
    assert env["REDRIVE_QUEUE_ARN"] == arn(queue_id(raw, "RedriveQueue"))


def test_function_has_no_reserved_concurrency_by_default(raw):
    # The cap lives on the mapping; nothing is taken from the account's pool.
    assert "ReservedConcurrentExecutions" not in only(raw, "AWS::Lambda::Function")["Properties"]


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
    # The period is written out, so the template says how long a deleted record is kept.
    assert props["PointInTimeRecoverySpecification"] == {
        "PointInTimeRecoveryEnabled": True,
        "RecoveryPeriodInDays": 35,
    }
    assert props["SSESpecification"] == {"SSEEnabled": True}


# ---------------------------------------------------------------- DLQ
def test_dlq_is_standard_encrypted_and_keeps_messages_14_days(raw):
    props = raw["Resources"][queue_id(raw, "DeadLetterQueue")]["Properties"]
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
    """Each alarm's properties by its construct id (``DeadLetterMessagesAlarm``, ...)."""
    return {
        v["Metadata"]["aws:cdk:path"].split("/")[-2]: v["Properties"]
        for v in resources(raw, "AWS::CloudWatch::Alarm").values()
    }


def _queue_dimension(raw: dict, queue: str) -> list[dict]:
    return [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue_id(raw, queue), "QueueName"]}}]


def test_eventbridge_dlq_alarms_use_rule_and_custom_bus_dimensions(raw):
    alarms = _alarms(raw)
    rule = {"Ref": logical_id(raw, "AWS::Events::Rule")}
    bus = {"Ref": logical_id(raw, "AWS::Events::EventBus")}
    for name in ("SentToDlqAlarm", "FailedToBeSentToDlqAlarm"):
        assert alarms[name]["Namespace"] == "AWS/Events"
        assert sorted(alarms[name]["Dimensions"], key=lambda d: d["Name"]) == [
            {"Name": "EventBusName", "Value": bus},
            {"Name": "RuleName", "Value": rule},
        ]


def test_dlq_depth_alarm_sees_every_message_redrives_included(raw):
    # GIVEN SQS does not count a redriven message as sent  THEN the alarm watches the depth
    alarm = _alarms(raw)["DeadLetterMessagesAlarm"]
    assert (alarm["MetricName"], alarm["Statistic"], alarm["Period"], alarm["Threshold"]) == (
        "ApproximateNumberOfMessagesVisible", "Maximum", 60, 1
    )  # fmt: skip
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarm["Dimensions"] == _queue_dimension(raw, "DeadLetterQueue")


def test_dlq_received_alarm_sees_a_message_a_consumer_took_first(raw):
    alarm = _alarms(raw)["DeadLetterReceivedAlarm"]
    assert (alarm["MetricName"], alarm["Statistic"], alarm["Period"], alarm["Threshold"]) == (
        "NumberOfMessagesReceived", "Sum", 60, 1
    )  # fmt: skip
    assert alarm["Dimensions"] == _queue_dimension(raw, "DeadLetterQueue")


def test_redrive_queue_alarm_fires_on_any_row_sqs_gave_up_on(raw):
    alarm = _alarms(raw)["RedriveQueueAlarm"]
    assert (alarm["MetricName"], alarm["Statistic"], alarm["Period"], alarm["Threshold"]) == (
        "NumberOfMessagesReceived", "Sum", 60, 1
    )  # fmt: skip
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarm["Dimensions"] == _queue_dimension(raw, "RedriveQueue")


def test_configuration_errors_alarm_fires_on_the_first_refused_call(raw):
    """Issue 36: a refused grant, a missing table, queue or secret is loud at once."""
    alarm = _alarms(raw)["ConfigurationErrorsAlarm"]
    assert (alarm["MetricName"], alarm["Statistic"], alarm["Period"], alarm["Threshold"]) == (
        "ConfigurationErrors", "Sum", 300, 1
    )  # fmt: skip
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarm["EvaluationPeriods"] == 1
    assert alarm["Namespace"] == _alarms(raw)["ResultEventsUncertainAlarm"]["Namespace"]
    assert alarm["Dimensions"] == _alarms(raw)["ResultEventsUncertainAlarm"]["Dimensions"]
    assert alarm["AlarmActions"]  # the step's alarm_topic
    assert "docs/operations.md" in alarm["AlarmDescription"]


def test_every_alarm_says_what_to_do(raw):
    for name, alarm in _alarms(raw).items():
        assert len(alarm["AlarmDescription"]) <= 1024, name
    assert "ReceivesExhausted" in _alarms(raw)["RedriveQueueAlarm"]["AlarmDescription"]
    assert "redrive the DLQ" in _alarms(raw)["DeadLetterMessagesAlarm"]["AlarmDescription"]


def test_every_alarm_treats_missing_data_as_not_breaching(raw):
    assert {a["TreatMissingData"] for a in _alarms(raw).values()} == {"notBreaching"}


def test_every_alarm_notifies_the_alarm_topic(raw):
    topic = {"Ref": logical_id(raw, "AWS::SNS::Topic")}
    # Seven of every step, and the demo's result bus brings ResultEventsUncertainAlarm.
    assert [a["AlarmActions"] for a in _alarms(raw).values()] == [[topic]] * 8


def test_buffer_age_alarm_fires_at_half_of_max_event_age(raw):
    alarm = _alarms(raw)["BufferAgeAlarm"]
    assert (alarm["MetricName"], alarm["Statistic"], alarm["Threshold"]) == (
        "ApproximateAgeOfOldestMessage", "Maximum", 43200
    )  # fmt: skip
    assert alarm["Dimensions"] == _queue_dimension(raw, "BufferQueue")


def test_no_async_lambda_alarms_because_nothing_invokes_it_asynchronously(raw):
    # AsyncEventsDropped / DestinationDeliveryFailures only exist for async invokes.
    metrics = {a["MetricName"] for a in _alarms(raw).values()}
    assert not {"AsyncEventsDropped", "DestinationDeliveryFailures"} & metrics


def test_default_bus_alarms_use_rule_name_alone(tmp_path_factory):
    app = new_app(tmp_path_factory, "default-bus")
    stack = cdk.Stack(app, "DefaultBus")
    make_step(stack)
    raw = synth(app).templates["DefaultBus"]
    dims = [a["Dimensions"] for a in _alarms(raw).values() if a["Namespace"] == "AWS/Events"]
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
    # Its own records only: the table may be shared (issue 34).
    assert dynamo[0]["Condition"] == {
        "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{STACK}/Classify#*"]}
    }


def _resources_for(raw: dict, action: str) -> list:
    return [s["Resource"] for s in _statements(raw) if action in _actions(s)]


def test_iam_sends_only_to_the_dlq_and_the_buffer_queue(raw):
    assert sorted(json.dumps(r) for r in _resources_for(raw, "sqs:SendMessage")) == sorted(
        json.dumps(arn(queue_id(raw, q))) for q in ("DeadLetterQueue", "BufferQueue")
    )


def test_iam_may_change_visibility_only_on_the_buffer_queue_where_it_spaces_retries(raw):
    assert _resources_for(raw, "sqs:ChangeMessageVisibility") == [arn(queue_id(raw, "BufferQueue"))]


def test_iam_consumes_the_redrive_queue_as_its_mapping_needs(raw):
    redrive = arn(queue_id(raw, "RedriveQueue"))
    granted = [a for s in _statements(raw) if s["Resource"] == redrive for a in _actions(s)]
    # What Lambda's poller calls, nothing more (queue_grants.py).
    assert sorted(granted) == [
        "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:ReceiveMessage",
    ]  # fmt: skip


def test_iam_reads_only_the_secret(raw):
    secret = logical_id(raw, "AWS::SecretsManager::Secret")
    assert _resources_for(raw, "secretsmanager:GetSecretValue") == [{"Ref": secret}]


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

    app = unvalidated_app(context={"aws:cdk:bundling-stacks": []})
    step = DemoStack(app, "Attrs").step
    assert isinstance(step.function, lambda_.Function)
    assert isinstance(step.rule, events.Rule)
    assert step.table is not None and step.dead_letter_queue is not None
    assert step.buffer_queue is not None and step.alias is None and step.subscriber is None
    assert isinstance(step.redrive_queue, sqs.Queue)
    assert len(step.alarms) == 8  # seven, and one for its result bus (issue 31)
    assert (step.max_attempts, step.max_model_requests_per_delivery) == (3, 3)
    assert step.buffer_max_receive_count == 3 + 1 + 5


@pytest.mark.parametrize("attempts, expected", [(0, 1), (1, 2), (2, 3)])
def test_max_model_requests_per_delivery_follows_lambda_retries(attempts, expected):
    stack = cdk.Stack(unvalidated_app(context={"aws:cdk:bundling-stacks": []}), "S")
    step = make_step(stack, lambda_retry_attempts=attempts)
    assert step.max_model_requests_per_delivery == expected


def test_step_is_a_construct_with_stable_child_ids():
    stack = cdk.Stack(unvalidated_app(context={"aws:cdk:bundling-stacks": []}), "S")
    step = make_step(stack)
    assert isinstance(step, IdempotentModelStep)
    assert {c.node.id for c in step.node.children} >= {
        "IdempotencyTable", "DeadLetterQueue", "BufferQueue", "RedriveQueue",
        "FunctionLogGroup", "FunctionServiceRole", "Function", "Rule",
        "SentToDlqAlarm", "FailedToBeSentToDlqAlarm", "DeadLetterMessagesAlarm",
        "DeadLetterReceivedAlarm", "RedriveQueueAlarm", "BufferAgeAlarm",
        "ConfigurationErrorsAlarm",
    }  # fmt: skip


def test_one_step_is_21_resources(raw):
    # The docs quote this figure; CloudFormation allows 500 per stack. The redrive queue
    # brought 5: the queue, its TLS policy, its mapping and two alarms. The demo's result bus
    # brings one more: ResultEventsUncertainAlarm (issue 31). ConfigurationErrorsAlarm
    # made it 21 (issue 36).
    assert len([k for k in raw["Resources"] if k.startswith("Classify")]) == 21 + 1


# ---------------------------------------------------------------- providers / handlers
@pytest.fixture(scope="module")
def variants(tmp_path_factory) -> dict:
    from constructs_lib import ModelProvider, ModelStepHandler
    from constructs_lib._paths import lambda_src_root

    app = new_app(tmp_path_factory, "variants")
    stack = cdk.Stack(app, "Variants")
    make_step(stack, "Bedrock", model_provider=ModelProvider.BEDROCK, api_key_secret=None,
              model_id="anthropic.claude-haiku-5-5-v1:0")  # fmt: skip
    make_step(stack, "Arm", architecture=lambda_.Architecture.ARM_64)
    make_step(stack, "CapOne", max_concurrency=1, lambda_retry_attempts=1)
    make_step(
        stack,
        "Imported",
        api_key_secret=secretsmanager.Secret.from_secret_name_v2(
            stack, "ByName", "anthropic/api-key"
        ),
    )
    make_step(
        stack,
        "Keyed",
        api_key_secret=secretsmanager.Secret(
            stack,
            "KeyedSecret",
            encryption_key=kms.Key(stack, "SecretKey", enable_key_rotation=True),
        ),
    )
    make_step(stack, "Custom", handler=ModelStepHandler.from_package(
        lambda_src_root() / "prospect_classifier", handler="prospect_classifier.handler.handler"
    ), environment={"PROSPECTS_TABLE_NAME": "prospects"})  # fmt: skip
    return synth(app).templates["Variants"]


def test_extra_packages_are_bundled_beside_the_handler_before_the_runtime():
    # GIVEN a custom handler with one extra package  WHEN it is made
    # THEN the asset holds the handler's package, the extra one, then the runtime
    from constructs_lib import ModelStepHandler
    from constructs_lib._paths import lambda_src_root

    src = lambda_src_root()
    handler = ModelStepHandler.from_package(
        src / "prospect_classifier",
        handler="prospect_classifier.handler.handler",
        extra_packages=[src / "upload_accounting"],
    )
    assert [p.name for p in handler.packages] == [
        "prospect_classifier", "upload_accounting", "model_step"
    ]  # fmt: skip


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


def _by_prefix(raw: dict, prefix: str, type_: str) -> dict:
    found = [
        v["Properties"] for k, v in raw["Resources"].items()
        if k.startswith(prefix) and v["Type"] == type_
    ]  # fmt: skip
    assert len(found) == 1, f"{prefix} {type_}: {len(found)}"
    return found[0]


def _policy_statements(raw: dict, prefix: str) -> list[dict]:
    policy = _by_prefix(raw, f"{prefix}FunctionServiceRoleDefaultPolicy", "AWS::IAM::Policy")
    return policy["PolicyDocument"]["Statement"]


# ---------------------------------------------------------------- max_concurrency=1
def test_cap_of_one_reserves_one_concurrent_execution(variants):
    # GIVEN max_concurrency=1  WHEN synthesized  THEN the function itself is the cap
    assert _fn(variants, "CapOne")["ReservedConcurrentExecutions"] == 1


def test_cap_of_one_keeps_the_mapping_at_lambdas_minimum_of_2(variants):
    mapping = _by_prefix(
        variants,
        "CapOneFunctionSqsEventSourceVariantsCapOneBufferQueue",
        "AWS::Lambda::EventSourceMapping",
    )
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": 2}


def test_cap_of_one_gives_throttled_receives_headroom_before_redrive(variants):
    # MAX_ATTEMPTS (2) + 1 + 5 receives that a throttle may spend without running
    queue = _by_prefix(variants, "CapOneBufferQueue", "AWS::SQS::Queue")
    assert queue["RedrivePolicy"]["maxReceiveCount"] == 8


def test_cap_of_one_budget_stays_max_attempts(variants):
    env = _fn(variants, "CapOne")["Environment"]["Variables"]
    assert env["MAX_ATTEMPTS"] == "2"


def test_max_concurrency_is_the_mapping_scaling_config(tmp_path_factory):
    app = new_app(tmp_path_factory, "cap")
    stack = cdk.Stack(app, "Cap")
    step = make_step(stack, max_concurrency=250)
    raw = synth(app).templates["Cap"]
    mapping = _by_prefix(
        raw, "StepFunctionSqsEventSourceCapStepBufferQueue", "AWS::Lambda::EventSourceMapping"
    )
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": 250} and step.max_concurrency == 250


def test_the_redrive_mapping_stays_at_2_whatever_the_cap(tmp_path_factory):
    # GIVEN a cap of 250  THEN rows SQS gave up on are still read 2 at a time
    app = new_app(tmp_path_factory, "cap-redrive")
    stack = cdk.Stack(app, "CapRedrive")
    make_step(stack, max_concurrency=250)
    raw = synth(app).templates["CapRedrive"]
    mapping = _by_prefix(
        raw,
        "StepFunctionSqsEventSourceCapRedriveStepRedriveQueue",
        "AWS::Lambda::EventSourceMapping",
    )
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": 2}


# ---------------------------------------------------------------- secrets
def test_secret_imported_by_name_is_granted_with_the_random_suffix(variants):
    # GIVEN Secret.from_secret_name_v2  THEN the grant covers the real ARN's "-XXXXXX"
    granted = [
        s["Resource"] for s in _policy_statements(variants, "Imported")
        if "secretsmanager:GetSecretValue" in _actions(s)
    ]  # fmt: skip
    assert len(granted) == 1 and "secret:anthropic/api-key-??????" in json.dumps(granted[0])


def test_the_secret_grant_is_get_secret_value_alone(variants):
    # The runtime reads the key and never describes the secret.
    actions = {a for s in _policy_statements(variants, "Imported") for a in _actions(s)}
    assert "secretsmanager:GetSecretValue" in actions
    assert not {a for a in actions if a.startswith("secretsmanager:")} - {
        "secretsmanager:GetSecretValue"
    }


def test_secret_with_a_customer_key_lets_the_role_decrypt_via_secrets_manager(variants):
    # grant_read puts kms:Decrypt in the key policy for this role, through Secrets Manager only
    key = next(v for v in variants["Resources"].values() if v["Type"] == "AWS::KMS::Key")
    role = next(k for k in variants["Resources"] if k.startswith("KeyedFunctionServiceRole"))
    decrypt = [
        s for s in key["Properties"]["KeyPolicy"]["Statement"]
        if "kms:Decrypt" in _actions(s) and role in json.dumps(s["Principal"])
    ]  # fmt: skip
    assert len(decrypt) == 1 and "kms:ViaService" in json.dumps(decrypt[0]["Condition"])


def test_api_key_max_age_is_absent_without_a_secret(variants):
    assert "API_KEY_MAX_AGE_SECONDS" not in _fn(variants, "Bedrock")["Environment"]["Variables"]


def test_record_prefix_is_the_construct_path_not_the_function_name(variants):
    env = _fn(variants, "Arm")["Environment"]["Variables"]
    assert env["IDEMPOTENCY_RECORD_PREFIX"] == "Variants/Arm"


# ---------------------------------------------------------------- metrics
@pytest.fixture(scope="module")
def demo_step():
    from .demo_stack import DemoStack

    return DemoStack(unvalidated_app(context={"aws:cdk:bundling-stacks": []}), "Metrics").step


def test_metric_rate_limited_is_the_runtime_emf_metric_of_this_step(demo_step):
    metric = demo_step.metric_rate_limited()
    assert (metric.namespace, metric.metric_name, metric.statistic) == (
        "IdempotentModelStep", "RateLimited", "Sum"
    )  # fmt: skip
    assert metric.dimensions == {"service": "Metrics/Classify"}


def test_metric_dead_letter_messages_counts_client_sends_only(demo_step):
    # SQS does not count a message its redrive policy moved; the docstring says so.
    metric = demo_step.metric_dead_letter_messages()
    assert (metric.metric_name, metric.statistic) == ("NumberOfMessagesSent", "Sum")
    assert "redrive" in (IdempotentModelStep.metric_dead_letter_messages.__doc__ or "")


def test_metric_dead_letter_visible_is_the_dlq_depth(demo_step):
    metric = demo_step.metric_dead_letter_visible()
    assert (metric.namespace, metric.metric_name, metric.statistic) == (
        "AWS/SQS", "ApproximateNumberOfMessagesVisible", "Maximum"
    )  # fmt: skip


def test_metric_dead_letter_received_counts_receives_from_the_dlq(demo_step):
    metric = demo_step.metric_dead_letter_received()
    assert (metric.metric_name, metric.statistic) == ("NumberOfMessagesReceived", "Sum")
    assert metric.dimensions == {"QueueName": demo_step.dead_letter_queue.queue_name}


def test_metric_redrive_received_counts_receives_from_the_redrive_queue(demo_step):
    metric = demo_step.metric_redrive_received()
    assert (metric.metric_name, metric.statistic) == ("NumberOfMessagesReceived", "Sum")
    assert metric.dimensions == {"QueueName": demo_step.redrive_queue.queue_name}


def test_metric_buffer_age_is_the_oldest_buffered_message(demo_step):
    metric = demo_step.metric_buffer_age()
    assert (metric.namespace, metric.metric_name, metric.statistic) == (
        "AWS/SQS", "ApproximateAgeOfOldestMessage", "Maximum"
    )  # fmt: skip


def test_cap_of_one_warns_at_synth():
    from aws_cdk.assertions import Annotations

    stack = cdk.Stack(unvalidated_app(context={"aws:cdk:bundling-stacks": []}), "Warn")
    make_step(stack, max_concurrency=1)
    Annotations.from_stack(stack).has_warning(
        "/Warn/Step", Match.string_like_regexp("max_concurrency=1 reserves 1 of the account")
    )
