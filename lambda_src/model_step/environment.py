"""Every environment variable the model-step runtime reads: its name, meaning and default.

This is the one place the names are spelled. The CDK construct (``IdempotentModelStep``)
builds the function's environment from these constants and refuses a user ``environment``
that would override any ``reserved`` name; the runtime's settings read the same constants;
the docs render :data:`VARIABLES` as a table.

Standard library only, on purpose: the construct loads this file by its path, without
importing the ``model_step`` package (whose ``__init__`` imports boto3 and Powertools, which
a CDK app does not have).

Example::

    from model_step import environment

    environment.MAX_ATTEMPTS                          # "MAX_ATTEMPTS"
    environment.by_name(environment.MAX_ATTEMPTS).default  # "3"
    [v.name for v in environment.VARIABLES if v.origin == "construct"]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

#: Who sets a variable:
#:
#: - ``"construct"``: ``IdempotentModelStep`` sets it from its props;
#: - ``"local"``: never set on a deployed step; a local run or a test may set it;
#: - ``"caller"``: a step's ``environment`` prop may set it (the runtime passes it on);
#: - ``"lambda"``: the Lambda service sets it.
Origin = Literal["construct", "local", "caller", "lambda"]


@dataclass(frozen=True)
class EnvironmentVariable:
    """One variable: what it means and what the runtime assumes when it is unset."""

    #: The variable's name, e.g. ``"MAX_ATTEMPTS"``.
    name: str
    #: One line for the docs: what the runtime does with it.
    meaning: str
    #: The runtime's value when the variable is unset, spelled as the variable would be
    #: (``"3"``); ``None`` when there is none (the feature is off, or it is ``required``).
    default: str | None = None
    #: The runtime refuses to start without it (``ConfigurationError``).
    required: bool = False
    #: Who sets it; see :data:`Origin`.
    origin: Origin = "construct"

    @property
    def reserved(self) -> bool:
        """A step's ``environment`` prop may not set it: only the construct (or Lambda) does.

        ``ANTHROPIC_API_KEY`` is reserved although the construct never sets it: on a
        deployed function a plain-text key would win over the secret.
        """
        return self.origin != "caller"


IDEMPOTENCY_TABLE_NAME: Final = "IDEMPOTENCY_TABLE_NAME"
IDEMPOTENCY_RECORD_PREFIX: Final = "IDEMPOTENCY_RECORD_PREFIX"
IDEMPOTENCY_KEY: Final = "IDEMPOTENCY_KEY"
IDEMPOTENCY_EXPIRES_AFTER_SECONDS: Final = "IDEMPOTENCY_EXPIRES_AFTER_SECONDS"
DEAD_LETTER_QUEUE_URL: Final = "DEAD_LETTER_QUEUE_URL"
BUFFER_QUEUE_URL: Final = "BUFFER_QUEUE_URL"
REDRIVE_QUEUE_ARN: Final = "REDRIVE_QUEUE_ARN"
PROMPT_VERSION: Final = "PROMPT_VERSION"
SYSTEM_PROMPT_SHA256: Final = "SYSTEM_PROMPT_SHA256"
PROMPT_CACHE: Final = "PROMPT_CACHE"
MODEL_ID: Final = "MODEL_ID"
MAX_TOKENS: Final = "MAX_TOKENS"
MODEL_PROVIDER: Final = "MODEL_PROVIDER"
MODEL_TIMEOUT_SECONDS: Final = "MODEL_TIMEOUT_SECONDS"
MAX_EVENT_AGE_SECONDS: Final = "MAX_EVENT_AGE_SECONDS"
MAX_ATTEMPTS: Final = "MAX_ATTEMPTS"
ALLOWED_LABELS: Final = "ALLOWED_LABELS"
ANTHROPIC_API_KEY_SECRET_ARN: Final = "ANTHROPIC_API_KEY_SECRET_ARN"
API_KEY_MAX_AGE_SECONDS: Final = "API_KEY_MAX_AGE_SECONDS"
ANTHROPIC_API_KEY: Final = "ANTHROPIC_API_KEY"
ANTHROPIC_BASE_URL: Final = "ANTHROPIC_BASE_URL"
TRACING_ENABLED: Final = "TRACING_ENABLED"
RESULT_BUS_ARN: Final = "RESULT_BUS_ARN"
RESULT_BUS_KIND: Final = "RESULT_BUS_KIND"
RESULT_EVENT_SOURCE: Final = "RESULT_EVENT_SOURCE"
RESULT_FIELDS: Final = "RESULT_FIELDS"
POWERTOOLS_SERVICE_NAME: Final = "POWERTOOLS_SERVICE_NAME"
POWERTOOLS_METRICS_NAMESPACE: Final = "POWERTOOLS_METRICS_NAMESPACE"
POWERTOOLS_LOG_LEVEL: Final = "POWERTOOLS_LOG_LEVEL"
AWS_REGION: Final = "AWS_REGION"
AWS_LAMBDA_INITIALIZATION_TYPE: Final = "AWS_LAMBDA_INITIALIZATION_TYPE"
# Bedrock (issue 22).
ANTHROPIC_BEDROCK_BASE_URL: Final = "ANTHROPIC_BEDROCK_BASE_URL"
# Message Batches delivery (issue 19).
MODEL_DELIVERY: Final = "MODEL_DELIVERY"
BATCH_MAX_REQUESTS: Final = "BATCH_MAX_REQUESTS"
BATCH_MAX_WAIT_SECONDS: Final = "BATCH_MAX_WAIT_SECONDS"
# Bedrock batch inference (issue 37).
BATCH_BUCKET_NAME: Final = "BATCH_BUCKET_NAME"
BATCH_S3_PREFIX: Final = "BATCH_S3_PREFIX"
BATCH_ROLE_ARN: Final = "BATCH_ROLE_ARN"
# The model as it really is (issue 32).
THINKING: Final = "THINKING"
EFFORT: Final = "EFFORT"
MODEL_RATES: Final = "MODEL_RATES"

#: Values of ``MODEL_DELIVERY``: one request per row, or Message Batches.
MODEL_DELIVERY_VALUES: Final = ("realtime", "batch")

#: Fields a result event carries only when ``RESULT_FIELDS`` names them (issue 34): the
#: label, the business key's parts (``key_parts``) and ``parse_answer``'s value. ``none``
#: names none of them. Ids, codes, usage and the key's record id are always carried.
RESULT_FIELD_NAMES: Final = ("label", "key", "parsed")

#: Values of ``PROMPT_CACHE``: the ``cache_control`` TTL of the system prompt, or ``off``.
PROMPT_CACHE_VALUES: Final = ("5m", "1h", "off")

#: Values of ``THINKING`` (``thinking.type``) and ``EFFORT`` (``output_config.effort``).
THINKING_VALUES: Final = ("adaptive", "disabled")
EFFORT_VALUES: Final = ("low", "medium", "high", "xhigh", "max")

#: Every variable, in the order the docs list them.
VARIABLES: Final[tuple[EnvironmentVariable, ...]] = (
    EnvironmentVariable(
        IDEMPOTENCY_TABLE_NAME,
        "DynamoDB table of the idempotency records (partition key `id`, TTL `expiration`)",
        required=True,
    ),
    EnvironmentVariable(
        DEAD_LETTER_QUEUE_URL,
        "SQS queue that receives the events a retry cannot fix, each with an ERROR_CODE",
        required=True,
    ),
    EnvironmentVariable(
        IDEMPOTENCY_KEY,
        "JMESPath over the event's `detail` that selects the business key; every part must "
        "be present",
        required=True,
    ),
    EnvironmentVariable(
        PROMPT_VERSION,
        "joins the key, so a new prompt version gets new answers",
        required=True,
    ),
    EnvironmentVariable(
        SYSTEM_PROMPT_SHA256,
        "sha256 (hex) of the system prompt, which ships with the code as "
        "`model_step_prompt/<sha256>.txt` (never in the environment); the full text joins "
        "the key's fingerprint",
        required=True,
    ),
    EnvironmentVariable(
        PROMPT_CACHE,
        "`5m`, `1h` or `off`: the `cache_control` TTL on the system prompt; never joins the key",
        "5m",
    ),
    EnvironmentVariable(MODEL_ID, "the model to call; joins the key", "claude-haiku-5-5"),
    EnvironmentVariable(MAX_TOKENS, "`max_tokens` of each request; joins the key", "1024"),
    EnvironmentVariable(
        IDEMPOTENCY_RECORD_PREFIX,
        "prefix of every record id; the construct sets the step's construct path, never the "
        "function name",
        "model-step",
    ),
    EnvironmentVariable(
        MODEL_PROVIDER,
        "`anthropic` (the Claude API) or `bedrock` (IAM credentials, region from AWS_REGION)",
        "anthropic",
    ),
    EnvironmentVariable(
        ANTHROPIC_API_KEY_SECRET_ARN,
        'Secrets Manager secret holding the API key (raw, or JSON `{"api_key": ...}`); '
        "never logged",
    ),
    EnvironmentVariable(
        API_KEY_MAX_AGE_SECONDS,
        "how long a container reuses the API key before reading the secret again",
        "300",
    ),
    EnvironmentVariable(
        ANTHROPIC_API_KEY,
        "an API key that wins over the secret, for local runs; refused on a deployed step",
        origin="local",
    ),
    EnvironmentVariable(
        ANTHROPIC_BASE_URL,
        "the Messages API's address, read by the SDK itself (a proxy, or a fake in tests)",
        origin="caller",
    ),
    EnvironmentVariable(
        ANTHROPIC_BEDROCK_BASE_URL,
        "with `bedrock`: the bedrock-runtime address, read by the SDK itself (a VPC endpoint, "
        "or a fake in tests and local runs); unset: bedrock-runtime in AWS_REGION",
        origin="caller",
    ),
    EnvironmentVariable(
        IDEMPOTENCY_EXPIRES_AFTER_SECONDS,
        "the key's memory lifetime: how long its stored outcome is replayed and its attempt "
        "budget kept; at least MAX_EVENT_AGE_SECONDS plus the longest a copy can wait "
        "(the queues' 14 days; the construct derives it)",
        "1299600",
    ),
    EnvironmentVariable(
        ALLOWED_LABELS,
        "comma-separated labels; any other answer is dead-lettered (unset: any answer)",
    ),
    EnvironmentVariable(
        MODEL_TIMEOUT_SECONDS,
        "each request's total deadline is min(this, remaining time - 3 s)",
        "60",
    ),
    EnvironmentVariable(
        MAX_EVENT_AGE_SECONDS,
        "how long a row may wait (rate limits, redrives), from when the step first saw it; "
        "past it a rate-limited row is dead-lettered as RateLimitExhausted",
        "86400",
    ),
    EnvironmentVariable(
        MAX_ATTEMPTS,
        "billed requests per record key (`lambda_retry_attempts + 1`)",
        "3",
    ),
    EnvironmentVariable(
        BUFFER_QUEUE_URL,
        "buffer queue: where rate-limited and in-progress rows are re-enqueued with a delay "
        "(unset on the direct path)",
    ),
    EnvironmentVariable(
        REDRIVE_QUEUE_ARN,
        "the redrive queue's ARN; a record from it (its eventSourceARN) is a row SQS gave "
        "up on after maxReceiveCount receives, and never makes a model call",
    ),
    EnvironmentVariable(
        TRACING_ENABLED,
        "`true`: X-Ray subsegments (Powertools Tracer) around the model call and each "
        "idempotency-store call; the construct sets it with `tracing=True`",
        "false",
    ),
    EnvironmentVariable(
        RESULT_BUS_ARN,
        "the result bus: each key's terminal result is published on it at most once "
        "(unset: no result events)",
    ),
    EnvironmentVariable(
        RESULT_BUS_KIND,
        "`classic` (an EventBridge bus) or `v2` (an EventBridge v2 bus, with DeduplicationId)",
        "classic",
    ),
    EnvironmentVariable(
        RESULT_EVENT_SOURCE,
        "the `source` of result events: the step's construct path",
        "model-step",
    ),
    EnvironmentVariable(
        RESULT_FIELDS,
        "comma-separated fields result events carry besides ids, codes and usage: `label`, "
        "`key` (the business key's parts, as `key_parts`), `parsed`, or `none`",
        "label",
    ),
    EnvironmentVariable(
        POWERTOOLS_SERVICE_NAME, "logger service and metrics dimension", "model-step"
    ),
    EnvironmentVariable(
        POWERTOOLS_METRICS_NAMESPACE, "CloudWatch (EMF) metrics namespace", "IdempotentModelStep"
    ),
    EnvironmentVariable(
        POWERTOOLS_LOG_LEVEL,
        "Powertools log level; set it in a local run",
        "INFO",
        origin="local",
    ),
    EnvironmentVariable(
        AWS_REGION, "the region of the Bedrock client and of the AWS clients", origin="lambda"
    ),
    EnvironmentVariable(
        AWS_LAMBDA_INITIALIZATION_TYPE,
        "`snap-start` while Lambda builds a SnapStart snapshot: the SDK is imported at init",
        origin="lambda",
    ),
    # Message Batches delivery (issue 19).
    EnvironmentVariable(
        MODEL_DELIVERY,
        "`realtime` (one Messages request per row) or `batch` (rows are staged and sent as "
        "Message Batches; a schedule tick collects them)",
        "realtime",
    ),
    EnvironmentVariable(
        BATCH_MAX_REQUESTS,
        "batch delivery: at most this many requests per Message Batch (1-100000)",
        "10000",
    ),
    EnvironmentVariable(
        BATCH_MAX_WAIT_SECONDS,
        "batch delivery: a staged row is submitted at the latest this long after it was "
        "first enqueued (1-3600)",
        "300",
    ),
    # Bedrock batch inference (issue 37).
    EnvironmentVariable(
        BATCH_BUCKET_NAME,
        "batch delivery on Bedrock: the S3 bucket of the jobs' JSONL input and output",
    ),
    EnvironmentVariable(
        BATCH_S3_PREFIX,
        "batch delivery on Bedrock: the key prefix of the jobs' objects (`input/`, `output/` "
        "under it)",
        "bedrock-batch/",
    ),
    EnvironmentVariable(
        BATCH_ROLE_ARN,
        "batch delivery on Bedrock: the service role each model invocation job runs as",
    ),
    # The model as it really is (issue 32).
    EnvironmentVariable(
        THINKING,
        "`adaptive` or `disabled`: each request's `thinking.type`; joins the key "
        "(unset: none sent, the model's default)",
    ),
    EnvironmentVariable(
        EFFORT,
        "`low`, `medium`, `high`, `xhigh` or `max`: each request's `output_config.effort`; "
        "joins the key (unset: none sent, the model's default)",
    ),
    EnvironmentVariable(
        MODEL_RATES,
        "the model's prices in US dollars per million tokens (JSON, from the model catalogue "
        "and the `model_prices` prop): each billed request's `cost_usd` (unset: unknown)",
    ),
)

#: Names a step's ``environment`` prop may not set (``IdempotentModelStep`` refuses them).
RESERVED_NAMES: Final = frozenset(v.name for v in VARIABLES if v.reserved)

_BY_NAME: Final = {v.name: v for v in VARIABLES}


def by_name(name: str) -> EnvironmentVariable:
    """The declaration of ``name``; ``KeyError`` for a name the runtime does not read."""
    return _BY_NAME[name]
