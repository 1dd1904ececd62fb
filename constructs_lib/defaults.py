"""Secure defaults for every resource the library creates, in one place.

Each function is pure: it returns the props a construct passes to an aws-cdk-lib
L2, and nothing else. A reader can see here, without following any resource
wiring, what encryption, retention and retry settings a pattern ships with.
Constructs never merge user overrides over these silently; a prop that would
weaken a required setting is refused with an error instead.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs

#: Model requests the Anthropic SDK may make per handler attempt. The library
#: sets ``max_retries=0`` so the Lambda async queue is the single retry layer.
SDK_ATTEMPTS_PER_INVOCATION = 1

#: Lambda runtime for every function. The bundler builds wheels for this exact
#: interpreter, so the two must change together.
LAMBDA_RUNTIME = lambda_.Runtime.PYTHON_3_13
LAMBDA_PYTHON_VERSION = "3.13"

DEFAULT_MODEL_ID = "claude-haiku-5-5"
DEFAULT_MAX_TOKENS = 1024
DEFAULT_LAMBDA_RETRY_ATTEMPTS = 2
DEFAULT_EVENT_RETRY_ATTEMPTS = 185
DEFAULT_MAX_EVENT_AGE = Duration.hours(24)
DEFAULT_EXPIRES_AFTER = Duration.hours(24)
DEFAULT_TIMEOUT = Duration.seconds(90)
DEFAULT_MEMORY_SIZE = 512
DEFAULT_LOG_RETENTION = logs.RetentionDays.ONE_MONTH

#: Lambda's EventInvokeConfig caps MaximumEventAgeInSeconds at 6 hours, below
#: EventBridge's 24 hours; the async queue gets the smaller of the two.
LAMBDA_ASYNC_MAX_EVENT_AGE = Duration.hours(6)

#: Time the handler keeps back from the SDK timeout, so the SDK gives up and
#: Powertools deletes the in-progress record before Lambda kills the attempt.
MODEL_TIMEOUT_MARGIN = Duration.seconds(5)


def dead_letter_queue_props() -> dict[str, Any]:
    """A standard (never FIFO) queue: EventBridge and Lambda destinations refuse FIFO.

    SQS-managed SSE keeps it encrypted at rest without a KMS key policy that
    EventBridge would otherwise need; 14 days is SQS's maximum retention, the
    longest time an operator has to look at a failure.
    """
    return {
        "encryption": sqs.QueueEncryption.SQS_MANAGED,
        "enforce_ssl": True,
        "retention_period": Duration.days(14),
    }


def idempotency_table_props() -> dict[str, Any]:
    """The table layout Powertools' DynamoDBPersistenceLayer expects.

    Partition key ``id`` and TTL attribute ``expiration`` are Powertools' defaults.
    On-demand billing follows the event rate; point-in-time recovery is on.
    Records are only replay guards, so the table is destroyed with the stack.
    """
    return {
        "partition_key": dynamodb.Attribute(name="id", type=dynamodb.AttributeType.STRING),
        "time_to_live_attribute": "expiration",
        "billing_mode": dynamodb.BillingMode.PAY_PER_REQUEST,
        "encryption": dynamodb.TableEncryption.AWS_MANAGED,
        "point_in_time_recovery_specification": dynamodb.PointInTimeRecoverySpecification(
            point_in_time_recovery_enabled=True
        ),
        "removal_policy": RemovalPolicy.DESTROY,
    }


def data_table_props(partition_key: str, sort_key: str, sort_key_type: str = "S") -> dict[str, Any]:
    """A table that holds personal data: encrypted, recoverable, retained on delete."""
    return {
        "partition_key": dynamodb.Attribute(name=partition_key, type=dynamodb.AttributeType.STRING),
        "sort_key": dynamodb.Attribute(
            name=sort_key,
            type=dynamodb.AttributeType.NUMBER
            if sort_key_type == "N"
            else dynamodb.AttributeType.STRING,
        ),
        "billing_mode": dynamodb.BillingMode.PAY_PER_REQUEST,
        "encryption": dynamodb.TableEncryption.AWS_MANAGED,
        "point_in_time_recovery_specification": dynamodb.PointInTimeRecoverySpecification(
            point_in_time_recovery_enabled=True
        ),
        "removal_policy": RemovalPolicy.RETAIN,
    }


def log_group_props(retention: logs.RetentionDays = DEFAULT_LOG_RETENTION) -> dict[str, Any]:
    """A function's own log group, so retention is set and the role needs no CreateLogGroup."""
    return {"retention": retention, "removal_policy": RemovalPolicy.DESTROY}


def private_bucket_props() -> dict[str, Any]:
    """A bucket that holds personal data: private, encrypted, TLS only, versioned."""
    return {
        "block_public_access": s3.BlockPublicAccess.BLOCK_ALL,
        "encryption": s3.BucketEncryption.S3_MANAGED,
        "enforce_ssl": True,
        "versioned": True,
        "object_ownership": s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        "removal_policy": RemovalPolicy.RETAIN,
    }
