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

from . import point_in_time_recovery as pitr

#: Model requests the Anthropic SDK may make per handler attempt. The library
#: sets ``max_retries=0`` so the runtime's attempt budget (``MAX_ATTEMPTS``) is
#: the single retry layer.
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
DEFAULT_TIMEOUT = Duration.seconds(90)
DEFAULT_MEMORY_SIZE = 512
DEFAULT_LOG_RETENTION = logs.RetentionDays.ONE_MONTH

#: Concurrent model calls one step may run: about 10 x 60 / 3 s = 200 requests a
#: minute for a 3-second call, inside most providers' entry tiers.
DEFAULT_MAX_CONCURRENCY = 10
MAX_CONCURRENCY_RANGE = (1, 1000)
#: ``ScalingConfig.MaximumConcurrency`` of an SQS event source mapping is 2-1000;
#: a cap of 1 is reserved concurrency 1 behind a mapping capped at this value.
EVENT_SOURCE_MIN_CONCURRENCY = 2

#: AWS advises a visibility timeout of at least 6x the function timeout for an
#: SQS event source, so a message is not redelivered while an attempt (and
#: Lambda's own invoke retries of a throttled batch) may still be running: each
#: receive absorbs (6 - 1) x timeout of throttling before it counts again.
BUFFER_VISIBILITY_TIMEOUT_FACTOR = 6
#: SQS's maximum retention: how long a row may wait behind the concurrency cap, or while an
#: operator has a mapping paused. A message SQS drops at the end of its retention goes to no
#: dead-letter queue (a silent loss), so the buffer and redrive queues keep the maximum, and
#: a key's memory (``expires_after``) is derived to outlive it (``model_step.lifetime``).
BUFFER_RETENTION = Duration.days(14)
#: Receives of a buffered row beyond ``MAX_ATTEMPTS + 1`` that throttles may spend.
#: A throttled batch returns to the queue and its receive count grows without the
#: function running (at any cap, and all the time at a cap of 1, whose mapping of at
#: least 2 pollers meets reserved concurrency 1). AWS advises a redrive
#: ``maxReceiveCount`` of at least 5 for throttle tolerance.
THROTTLE_RECEIVE_HEADROOM = 5
#: Receives the redrive queue's consumer gets before the redrive queue's own redrive
#: policy moves a row on to the DLQ: the throttle tolerance AWS advises for any
#: Lambda SQS source (5). They come ON TOP of the buffer queue's count, because a
#: message a redrive policy moves may keep its ``ApproximateReceiveCount`` (moto keeps
#: it; SQS does not document either way): see ``redrive_queue_max_receive_count``.
REDRIVE_QUEUE_RECEIVE_HEADROOM = 5
#: ``ScalingConfig.MaximumConcurrency`` of the redrive queue's mapping: Lambda's
#: minimum. Its rows are the rare ones SQS gave up on; the runtime re-queues them on
#: the buffer queue (behind the step's cap) or dead-letters them, without a model call.
REDRIVE_QUEUE_MAX_CONCURRENCY = 2

#: How long a warm container reuses the API key before reading the secret again,
#: so a rotated key reaches every container within this time.
DEFAULT_API_KEY_MAX_AGE = Duration.minutes(5)

#: How far the alarm on the buffer queue's oldest message sits below
#: ``max_event_age``: a row that waited half its allowed age behind the cap is
#: at risk of being dead-lettered as ``RateLimitExhausted``.
BUFFER_AGE_ALARM_FRACTION = 0.5

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


def buffer_queue_max_receive_count(max_attempts: int) -> int:
    """Receives after which SQS moves a buffered row to the redrive queue.

    ``max_attempts`` receives that run, one more in which the runtime re-sends a stored
    dead-letter outcome whose DLQ send failed, and ``THROTTLE_RECEIVE_HEADROOM`` (5)
    that throttles may spend: 3 + 1 + 5 = 9 by default.
    """
    return max_attempts + 1 + THROTTLE_RECEIVE_HEADROOM


def redrive_queue_max_receive_count(buffer_max_receive_count: int) -> int:
    """Receives after which SQS moves a row from the redrive queue to the DLQ.

    ``buffer_max_receive_count + REDRIVE_QUEUE_RECEIVE_HEADROOM`` (9 + 5 = 14 by
    default): if the receive count a row brings from the buffer queue is kept, the
    consumer still gets 5 receives of it; if it is reset, it gets 14. A flat 5 would
    send a row that brings a count of 9 straight on to the DLQ, uncoded, at its first
    receive there.
    """
    return buffer_max_receive_count + REDRIVE_QUEUE_RECEIVE_HEADROOM


def buffer_queue_props(
    function_timeout: Duration, redrive_queue: sqs.IQueue, max_receive_count: int
) -> dict[str, Any]:
    """The step's buffer queue: standard, encrypted like the DLQ, TLS only.

    Visibility timeout is ``BUFFER_VISIBILITY_TIMEOUT_FACTOR`` (6) x the function
    timeout; retention is SQS's maximum, 14 days. The redrive policy moves a row that
    was received ``max_receive_count`` times without an answer (crashes, timeouts,
    throttles) to the step's redrive queue, whose consumer puts it back or
    dead-letters it with a code: the runtime dead-letters a row itself (with an
    ERROR_CODE) once its attempts are used, so SQS only moves a message the runtime
    never answered for.
    """
    return {
        **_step_queue_props(function_timeout),
        "dead_letter_queue": sqs.DeadLetterQueue(
            queue=redrive_queue, max_receive_count=max_receive_count
        ),
    }


def redrive_queue_props(
    function_timeout: Duration, dead_letter_queue: sqs.IQueue, max_receive_count: int
) -> dict[str, Any]:
    """The step's redrive queue: where the buffer queue's redrive policy moves a row.

    Standard, SQS-managed encryption, TLS only, 14 days, visibility 6 x the function
    timeout, like the buffer queue; its own redrive policy moves a row to the DLQ after
    ``max_receive_count`` receives (``redrive_queue_max_receive_count``), so a consumer
    that cannot run (throttled, or crashing on that row) still leaves it on the DLQ,
    never lost.
    """
    return {
        **_step_queue_props(function_timeout),
        "dead_letter_queue": sqs.DeadLetterQueue(
            queue=dead_letter_queue, max_receive_count=max_receive_count
        ),
    }


def _step_queue_props(function_timeout: Duration) -> dict[str, Any]:
    return {
        "encryption": sqs.QueueEncryption.SQS_MANAGED,
        "enforce_ssl": True,
        "retention_period": BUFFER_RETENTION,
        "visibility_timeout": Duration.seconds(
            int(function_timeout.to_seconds()) * BUFFER_VISIBILITY_TIMEOUT_FACTOR
        ),
    }


def idempotency_table_props(
    point_in_time_recovery: dynamodb.PointInTimeRecoverySpecification | None = None,
) -> dict[str, Any]:
    """The table layout Powertools' DynamoDBPersistenceLayer expects.

    Partition key ``id`` and TTL attribute ``expiration`` are Powertools' defaults.
    On-demand billing follows the event rate. ``point_in_time_recovery``: the backups'
    specification (``point_in_time_recovery.specification``); default on, 35 days, written
    out. Records are only replay guards, so the table is destroyed with the stack.
    """
    return {
        "partition_key": dynamodb.Attribute(name="id", type=dynamodb.AttributeType.STRING),
        "time_to_live_attribute": "expiration",
        "billing_mode": dynamodb.BillingMode.PAY_PER_REQUEST,
        "encryption": dynamodb.TableEncryption.AWS_MANAGED,
        "point_in_time_recovery_specification": point_in_time_recovery
        or pitr.specification(pitr.DEFAULT_PERIOD_DAYS),
        "removal_policy": RemovalPolicy.DESTROY,
    }


def data_table_props(
    partition_key: str,
    sort_key: str,
    sort_key_type: str = "S",
    point_in_time_recovery: dynamodb.PointInTimeRecoverySpecification | None = None,
) -> dict[str, Any]:
    """A table that holds personal data: encrypted, recoverable (``point_in_time_recovery``,
    default on, 35 days), retained on delete."""
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
        "point_in_time_recovery_specification": point_in_time_recovery
        or pitr.specification(pitr.DEFAULT_PERIOD_DAYS),
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


#: Bedrock batch delivery (issue 37): the key prefix of the jobs' objects in their bucket.
BEDROCK_BATCH_PREFIX = "bedrock-batch/"
#: Days past a job's longest life (its ``timeoutDurationInHours``) the bucket's lifecycle
#: keeps an object: a job's input is written when it is created and its output when it
#: ends, the runtime collects it within the 12 h its tick allows a job past its timeout
#: before calling it lost (``batch_limits.lost_open_after``) and then deletes both; one more
#: day covers collection retries and a tick outage. Expiry is only the backstop.
BEDROCK_BATCH_EXPIRY_MARGIN_DAYS = 2


def bedrock_batch_expiry(timeout_hours: int) -> Duration:
    """The lifecycle expiry of a Bedrock batch bucket's objects: the job's timeout in whole
    days plus :data:`BEDROCK_BATCH_EXPIRY_MARGIN_DAYS` (3 days for the 24 h default)."""
    return Duration.days(-(-timeout_hours // 24) + BEDROCK_BATCH_EXPIRY_MARGIN_DAYS)


def bedrock_batch_bucket_props(expire_after: Duration, prefix: str) -> dict[str, Any]:
    """The bucket of a step's Bedrock batch jobs: private, S3-managed encryption (Bedrock's
    job role reads and writes it without a KMS grant), TLS only, every object under
    ``prefix`` expired after ``expire_after`` and unfinished uploads after a day. Not
    versioned: a deleted prompt must stay deleted. Retained with the stack, as it empties
    itself: CloudFormation cannot delete a bucket with objects in it."""
    return {
        "block_public_access": s3.BlockPublicAccess.BLOCK_ALL,
        "encryption": s3.BucketEncryption.S3_MANAGED,
        "enforce_ssl": True,
        "object_ownership": s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        "lifecycle_rules": [
            s3.LifecycleRule(
                id="ExpireBatchJobObjects",
                prefix=prefix,
                expiration=expire_after,
                abort_incomplete_multipart_upload_after=Duration.days(1),
            )
        ],
        "removal_policy": RemovalPolicy.RETAIN,
    }


#: ``ModelStepDashboard``: the period of every graph.
DEFAULT_DASHBOARD_PERIOD = Duration.minutes(5)
#: ``ModelStepDashboard``: the time range a dashboard opens on.
DEFAULT_DASHBOARD_INTERVAL = Duration.hours(3)
