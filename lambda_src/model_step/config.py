"""Settings of a model step, read from the environment the CDK construct sets.

Environment variables (name: default; meaning):

- ``IDEMPOTENCY_TABLE_NAME``: required. DynamoDB table of Powertools idempotency records
  (partition key ``id`` (S), TTL attribute ``expiration``).
- ``DEAD_LETTER_QUEUE_URL``: required. SQS queue that receives non-retryable failures.
- ``IDEMPOTENCY_KEY``: required. JMESPath over ``event["detail"]`` that selects the business
  key, e.g. ``[upload_id, row_number]``. Every part must be present and non-empty.
- ``PROMPT_VERSION``: required. Part of the idempotency key: a new version means new answers.
- ``SYSTEM_PROMPT``: required. System prompt sent with every request.
- ``MODEL_ID``: ``claude-haiku-5-5``. Model to call.
- ``MAX_TOKENS``: ``1024``. ``max_tokens`` of each request.

  The key also holds a request fingerprint: sha256 over ``SYSTEM_PROMPT``, ``MODEL_ID``,
  ``MAX_TOKENS``, the sorted ``ALLOWED_LABELS``, ``PROMPT_VERSION`` and a custom handler's
  declared ``prompt_version``; changing any of them misses the old records.
- ``IDEMPOTENCY_RECORD_PREFIX``: ``model-step``. Prefix of every record id (Powertools
  ``key_prefix``); the construct sets the step's construct path. Never the function name, so a
  replaced function keeps its records and two steps sharing a table never collide.
- ``MODEL_PROVIDER``: ``anthropic``. ``anthropic`` (Claude API) or ``bedrock`` (Claude on
  Amazon Bedrock with the function's IAM credentials; region from ``AWS_REGION``; no secret).
- ``ANTHROPIC_API_KEY_SECRET_ARN``: none. Secrets Manager secret holding the API key, either the
  raw key or JSON ``{"api_key": "..."}``. Read through Powertools Parameters, cached for
  ``API_KEY_MAX_AGE_SECONDS``, re-read at once after a 401; never logged.
- ``API_KEY_MAX_AGE_SECONDS``: ``300``. Cache age of the API key.
- ``ANTHROPIC_API_KEY``: none. If set, it wins over the secret (for local runs).
- ``ANTHROPIC_BASE_URL``: the SDK's default. Read by the SDK itself.
- ``IDEMPOTENCY_EXPIRES_AFTER_SECONDS``: ``86400``. How long a completed answer is replayed.
- ``ALLOWED_LABELS``: none. Comma-separated labels, e.g. ``hot,warm,cold``. When set, the answer
  (stripped, lower-cased) must be one of them, else the event is dead-lettered.
- ``MODEL_TIMEOUT_SECONDS``: ``60``. Upper bound of the SDK timeout. The timeout actually used is
  ``min(MODEL_TIMEOUT_SECONDS, remaining Lambda time - 3 s)`` so the SDK gives up first.
- ``MAX_EVENT_AGE_SECONDS``: ``86400``. How long a rate-limited row may wait, measured from
  when the step first saw the row (never the producer's ``time``), before it is
  dead-lettered as ``RateLimitExhausted``.
- ``MAX_ATTEMPTS``: ``3``. Billed model requests per record key, whatever the number of
  copies, kills and redrives (the construct sets ``lambda_retry_attempts + 1``); a key whose
  budget is spent is dead-lettered by the runtime.
- ``BUFFER_QUEUE_URL``: none. Buffer-queue path: where rate-limited and in-progress rows are
  re-enqueued with a delay (absent on the direct path).
- ``REDRIVE_QUEUE_ARN``: none. Buffer-queue path: the step's redrive queue, where SQS moves a
  row after ``maxReceiveCount`` receives without an answer; its records are told apart by
  ``eventSourceARN`` and never call the model.
- ``POWERTOOLS_SERVICE_NAME``: ``model-step``. Logger service and metrics dimension.
- ``POWERTOOLS_METRICS_NAMESPACE``: ``IdempotentModelStep``. CloudWatch metrics namespace.
- ``POWERTOOLS_LOG_LEVEL``: Powertools' default (``INFO``). Log level.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

import jmespath
from jmespath.exceptions import JMESPathError

from .errors import ConfigurationError

N = TypeVar("N", int, float)

DEFAULT_MODEL_ID = "claude-haiku-5-5"
DEFAULT_MAX_TOKENS = 1024
DEFAULT_EXPIRES_AFTER_SECONDS = 86_400
DEFAULT_MODEL_TIMEOUT_SECONDS = 60.0
DEFAULT_SERVICE_NAME = "model-step"
DEFAULT_RECORD_PREFIX = "model-step"
DEFAULT_MAX_EVENT_AGE_SECONDS = 86_400
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_API_KEY_MAX_AGE_SECONDS = 300
DEFAULT_METRICS_NAMESPACE = "IdempotentModelStep"
PROVIDERS = ("anthropic", "bedrock")


@dataclass(frozen=True)
class Settings:
    """Validated settings of one model step. Build it with :meth:`from_environment`."""

    idempotency_table_name: str
    dead_letter_queue_url: str
    idempotency_key: str
    prompt_version: str
    system_prompt: str
    model_id: str = DEFAULT_MODEL_ID
    max_tokens: int = DEFAULT_MAX_TOKENS
    model_provider: str = "anthropic"
    api_key_secret_arn: str | None = None
    expires_after_seconds: int = DEFAULT_EXPIRES_AFTER_SECONDS
    allowed_labels: tuple[str, ...] = ()
    model_timeout_seconds: float = DEFAULT_MODEL_TIMEOUT_SECONDS
    service_name: str = DEFAULT_SERVICE_NAME
    metrics_namespace: str = DEFAULT_METRICS_NAMESPACE
    aws_region: str | None = None
    record_prefix: str = DEFAULT_RECORD_PREFIX
    max_event_age_seconds: int = DEFAULT_MAX_EVENT_AGE_SECONDS
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    buffer_queue_url: str | None = None
    redrive_queue_arn: str | None = None
    api_key_max_age_seconds: int = DEFAULT_API_KEY_MAX_AGE_SECONDS

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read and validate the variables listed in this module's docstring.

        Raises ``ConfigurationError`` naming the first missing or invalid variable.
        """
        env = os.environ if environ is None else environ
        key_expression = _required(env, "IDEMPOTENCY_KEY")
        try:
            # Compile now so a typo fails the first invocation loudly, not silently per event.
            jmespath.compile(key_expression)
        except JMESPathError as exc:
            raise ConfigurationError(f"IDEMPOTENCY_KEY is not valid JMESPath: {exc}") from exc

        provider = env.get("MODEL_PROVIDER", "anthropic").strip().lower() or "anthropic"
        if provider not in PROVIDERS:
            raise ConfigurationError(f"MODEL_PROVIDER must be one of {PROVIDERS}, got {provider!r}")

        return cls(
            idempotency_table_name=_required(env, "IDEMPOTENCY_TABLE_NAME"),
            dead_letter_queue_url=_required(env, "DEAD_LETTER_QUEUE_URL"),
            idempotency_key=key_expression,
            prompt_version=_required(env, "PROMPT_VERSION"),
            system_prompt=_required(env, "SYSTEM_PROMPT"),
            model_id=env.get("MODEL_ID") or DEFAULT_MODEL_ID,
            max_tokens=_positive(env, "MAX_TOKENS", DEFAULT_MAX_TOKENS, int),
            model_provider=provider,
            api_key_secret_arn=env.get("ANTHROPIC_API_KEY_SECRET_ARN") or None,
            expires_after_seconds=_positive(
                env, "IDEMPOTENCY_EXPIRES_AFTER_SECONDS", DEFAULT_EXPIRES_AFTER_SECONDS, int
            ),
            allowed_labels=parse_labels(env.get("ALLOWED_LABELS", "")),
            model_timeout_seconds=_positive(
                env, "MODEL_TIMEOUT_SECONDS", DEFAULT_MODEL_TIMEOUT_SECONDS, float
            ),
            service_name=env.get("POWERTOOLS_SERVICE_NAME") or DEFAULT_SERVICE_NAME,
            metrics_namespace=env.get("POWERTOOLS_METRICS_NAMESPACE") or DEFAULT_METRICS_NAMESPACE,
            aws_region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
            record_prefix=env.get("IDEMPOTENCY_RECORD_PREFIX", "").strip() or DEFAULT_RECORD_PREFIX,
            max_event_age_seconds=_positive(
                env, "MAX_EVENT_AGE_SECONDS", DEFAULT_MAX_EVENT_AGE_SECONDS, int
            ),
            max_attempts=_positive(env, "MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS, int),
            buffer_queue_url=env.get("BUFFER_QUEUE_URL", "").strip() or None,
            redrive_queue_arn=env.get("REDRIVE_QUEUE_ARN", "").strip() or None,
            api_key_max_age_seconds=_positive(
                env, "API_KEY_MAX_AGE_SECONDS", DEFAULT_API_KEY_MAX_AGE_SECONDS, int
            ),
        )


def parse_labels(raw: str) -> tuple[str, ...]:
    """``"Hot, warm,,cold"`` -> ``("hot", "warm", "cold")``; empty input -> ``()``."""
    return tuple(label.strip().lower() for label in raw.split(",") if label.strip())


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "")
    if not value.strip():
        raise ConfigurationError(f"environment variable {name} is required")
    return value


def _positive(env: Mapping[str, str], name: str, default: N, kind: type[N]) -> N:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError as exc:
        noun = "an integer" if kind is int else "a number"
        raise ConfigurationError(f"{name} must be {noun}, got {raw!r}") from exc
    if value <= 0:
        raise ConfigurationError(f"{name} must be positive, got {value}")
    return value
