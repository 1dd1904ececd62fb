"""Settings of a model step, read from the environment the CDK construct sets.

The variables, their meanings and defaults are declared once, in :mod:`.environment`
(``VARIABLES``), which the construct reads too; this module parses and validates them. The
defaults below are the ones ``environment`` states (``tests/runtime/test_config.py`` holds
the two together). Keys: see ``docs/runtime.md`` for what the record key is made of.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import jmespath
from jmespath.exceptions import JMESPathError

from . import batch_limits, lifetime
from . import environment as env_names
from .errors import ConfigurationError
from .request_cost import StepPrice
from .system_prompt import load_system_prompt

N = TypeVar("N", int, float)

DEFAULT_MODEL_ID = "claude-haiku-5-5"
DEFAULT_MAX_TOKENS = 1024
DEFAULT_MODEL_TIMEOUT_SECONDS = 60.0
DEFAULT_SERVICE_NAME = "model-step"
DEFAULT_RECORD_PREFIX = "model-step"
DEFAULT_MAX_EVENT_AGE_SECONDS = 86_400
#: The key's memory lifetime with the default max_event_age and the queues' 14 days
#: (``model_step.lifetime``): 15 days and an hour.
DEFAULT_EXPIRES_AFTER_SECONDS = lifetime.minimum_key_lifetime(
    max_event_age=DEFAULT_MAX_EVENT_AGE_SECONDS,
    queue_retention=lifetime.MAX_QUEUE_RETENTION_SECONDS,
)
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_API_KEY_MAX_AGE_SECONDS = 300
DEFAULT_METRICS_NAMESPACE = "IdempotentModelStep"
DEFAULT_PROMPT_CACHE = "5m"
#: A result event's optional fields when ``RESULT_FIELDS`` is unset: the label only.
DEFAULT_RESULT_FIELDS = frozenset({"label"})
PROVIDERS = ("anthropic", "bedrock")
# Message Batches delivery (issue 19).
DEFAULT_MODEL_DELIVERY = "realtime"
DEFAULT_BATCH_MAX_REQUESTS = 10_000
DEFAULT_BATCH_MAX_WAIT_SECONDS = 300
#: The Message Batches API's limit of requests per batch.
BATCH_REQUESTS_LIMIT = 100_000
BATCH_MAX_WAIT_LIMIT_SECONDS = 3_600
#: Bedrock batch inference (issue 37): the key prefix of the jobs' input and output.
DEFAULT_BATCH_S3_PREFIX = "bedrock-batch/"


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
    #: ``"5m"``, ``"1h"`` or ``"off"``: the system prompt's ``cache_control`` TTL.
    prompt_cache: str = DEFAULT_PROMPT_CACHE
    # Compose and watch (issue 21).
    tracing_enabled: bool = False
    result_bus_arn: str | None = None
    result_bus_kind: str = "classic"
    result_event_source: str = DEFAULT_SERVICE_NAME
    #: Issue 34: what a result event carries besides ids, codes and usage; some of
    #: ``environment.RESULT_FIELD_NAMES`` (``label``, ``key``, ``parsed``).
    result_fields: frozenset[str] = DEFAULT_RESULT_FIELDS
    # Message Batches delivery (issue 19).
    #: ``"realtime"`` or ``"batch"``.
    model_delivery: str = DEFAULT_MODEL_DELIVERY
    batch_max_requests: int = DEFAULT_BATCH_MAX_REQUESTS
    batch_max_wait_seconds: int = DEFAULT_BATCH_MAX_WAIT_SECONDS
    # Bedrock batch inference (issue 37): the bucket of the jobs' input and output, the key
    # prefix in it, and the role the jobs run as.
    batch_bucket_name: str | None = None
    batch_s3_prefix: str = DEFAULT_BATCH_S3_PREFIX
    batch_role_arn: str | None = None
    # The model as it really is (issue 32).
    #: ``thinking.type`` to send (``adaptive``/``disabled``); None: the model's default.
    thinking: str | None = None
    #: ``output_config.effort`` to send; None: the model's default.
    effort: str | None = None
    #: The model's price (``MODEL_RATES``); None: the cost of a request is unknown.
    model_rates: StepPrice | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read and validate the variables listed in this module's docstring.

        Raises ``ConfigurationError`` naming the first missing or invalid variable.
        """
        env = os.environ if environ is None else environ
        key_expression = _key_expression(env)
        provider = _provider(env)
        settings = cls(
            idempotency_table_name=_required(env, env_names.IDEMPOTENCY_TABLE_NAME),
            dead_letter_queue_url=_required(env, env_names.DEAD_LETTER_QUEUE_URL),
            idempotency_key=key_expression,
            prompt_version=_required(env, env_names.PROMPT_VERSION),
            system_prompt=load_system_prompt(_required(env, env_names.SYSTEM_PROMPT_SHA256)),
            model_id=env.get(env_names.MODEL_ID) or DEFAULT_MODEL_ID,
            max_tokens=_positive(env, env_names.MAX_TOKENS, DEFAULT_MAX_TOKENS, int),
            model_provider=provider,
            api_key_secret_arn=env.get(env_names.ANTHROPIC_API_KEY_SECRET_ARN) or None,
            expires_after_seconds=_positive(
                env, env_names.IDEMPOTENCY_EXPIRES_AFTER_SECONDS, DEFAULT_EXPIRES_AFTER_SECONDS, int
            ),
            allowed_labels=parse_labels(env.get(env_names.ALLOWED_LABELS, "")),
            model_timeout_seconds=_positive(
                env, env_names.MODEL_TIMEOUT_SECONDS, DEFAULT_MODEL_TIMEOUT_SECONDS, float
            ),
            service_name=env.get(env_names.POWERTOOLS_SERVICE_NAME) or DEFAULT_SERVICE_NAME,
            metrics_namespace=env.get(env_names.POWERTOOLS_METRICS_NAMESPACE)
            or DEFAULT_METRICS_NAMESPACE,
            aws_region=env.get(env_names.AWS_REGION) or env.get("AWS_DEFAULT_REGION") or None,
            record_prefix=env.get(env_names.IDEMPOTENCY_RECORD_PREFIX, "").strip()
            or DEFAULT_RECORD_PREFIX,
            max_event_age_seconds=_positive(
                env, env_names.MAX_EVENT_AGE_SECONDS, DEFAULT_MAX_EVENT_AGE_SECONDS, int
            ),
            max_attempts=_positive(env, env_names.MAX_ATTEMPTS, DEFAULT_MAX_ATTEMPTS, int),
            buffer_queue_url=env.get(env_names.BUFFER_QUEUE_URL, "").strip() or None,
            redrive_queue_arn=env.get(env_names.REDRIVE_QUEUE_ARN, "").strip() or None,
            api_key_max_age_seconds=_positive(
                env, env_names.API_KEY_MAX_AGE_SECONDS, DEFAULT_API_KEY_MAX_AGE_SECONDS, int
            ),
            prompt_cache=_prompt_cache(env),
            tracing_enabled=_flag(env, env_names.TRACING_ENABLED),
            result_bus_arn=env.get(env_names.RESULT_BUS_ARN, "").strip() or None,
            result_bus_kind=_choice(env, env_names.RESULT_BUS_KIND, ("classic", "v2")),
            result_event_source=env.get(env_names.RESULT_EVENT_SOURCE, "").strip()
            or DEFAULT_SERVICE_NAME,
            result_fields=parse_result_fields(env.get(env_names.RESULT_FIELDS, "")),
            **_batch_settings(env, provider),
            **_model_settings(env),
        )
        _check_lifetime(settings)
        return settings


def _check_lifetime(settings: Settings) -> None:
    """The key's memory must outlive what the runtime itself holds a key for: its rate-limit
    and redrive window (``MAX_EVENT_AGE_SECONDS``) plus Lambda async's hold, or a batch's
    (``model_step.lifetime``). The queues' retention, which the runtime cannot see, is the
    construct's check."""
    batch = settings.model_delivery == "batch"
    least = lifetime.runtime_minimum(
        max_event_age=settings.max_event_age_seconds,
        batch=batch,
        batch_lifetime=(
            int(batch_limits.bedrock_quotas(settings.max_event_age_seconds).lifetime_seconds)
            if batch and settings.model_provider == "bedrock"
            else lifetime.BATCH_LIFETIME_SECONDS
        ),
    )
    if settings.expires_after_seconds < least:
        raise ConfigurationError(
            f"{env_names.IDEMPOTENCY_EXPIRES_AFTER_SECONDS} must be at least {least} "
            f"({env_names.MAX_EVENT_AGE_SECONDS}={settings.max_event_age_seconds} plus the "
            f"longest a {settings.model_delivery} key is held plus an hour), got "
            f"{settings.expires_after_seconds}: a key that came back after its memory expired "
            "could be billed again"
        )


def _model_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """``THINKING``, ``EFFORT`` and ``MODEL_RATES`` (issue 32); unset ones are None."""
    found: dict[str, Any] = {}
    for name, key, values in (
        (env_names.THINKING, "thinking", env_names.THINKING_VALUES),
        (env_names.EFFORT, "effort", env_names.EFFORT_VALUES),
    ):
        raw = env.get(name, "").strip()
        if raw and raw not in values:
            raise ConfigurationError(f"{name} must be one of {values}, got {raw!r}")
        found[key] = raw or None
    raw_rates = env.get(env_names.MODEL_RATES, "").strip()
    try:
        found["model_rates"] = StepPrice.from_json(raw_rates) if raw_rates else None
    except ValueError as error:
        raise ConfigurationError(str(error)) from error
    return found


def _batch_settings(env: Mapping[str, str], provider: str) -> dict[str, Any]:
    """The Message Batches delivery settings (issue 19)."""
    delivery = _choice(env, env_names.MODEL_DELIVERY, env_names.MODEL_DELIVERY_VALUES)
    bedrock: dict[str, Any] = {}
    limit = BATCH_REQUESTS_LIMIT
    if delivery == "batch" and provider == "bedrock":
        bedrock = _bedrock_batch_settings(env)
        limit = batch_limits.BEDROCK_MAX_REQUESTS
    max_requests = _positive(env, env_names.BATCH_MAX_REQUESTS, DEFAULT_BATCH_MAX_REQUESTS, int)
    if max_requests > limit:
        raise ConfigurationError(
            f"{env_names.BATCH_MAX_REQUESTS} must be at most {limit} with "
            f"MODEL_PROVIDER={provider}, got {max_requests}"
        )
    max_wait = _positive(env, env_names.BATCH_MAX_WAIT_SECONDS, DEFAULT_BATCH_MAX_WAIT_SECONDS, int)
    if max_wait > BATCH_MAX_WAIT_LIMIT_SECONDS:
        raise ConfigurationError(
            f"{env_names.BATCH_MAX_WAIT_SECONDS} must be at most "
            f"{BATCH_MAX_WAIT_LIMIT_SECONDS}, got {max_wait}"
        )
    return {
        "model_delivery": delivery,
        "batch_max_requests": max_requests,
        "batch_max_wait_seconds": max_wait,
        **bedrock,
    }


def _bedrock_batch_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """Bedrock batch inference (issue 37): the bucket and the job role are required, and
    the jobs' timeout must fit Bedrock's 24-168 h."""
    try:
        batch_limits.bedrock_timeout_hours(
            _positive(env, env_names.MAX_EVENT_AGE_SECONDS, DEFAULT_MAX_EVENT_AGE_SECONDS, int)
        )
    except ValueError as error:
        raise ConfigurationError(str(error)) from error
    prefix = env.get(env_names.BATCH_S3_PREFIX, "").strip() or DEFAULT_BATCH_S3_PREFIX
    return {
        "batch_bucket_name": _required(env, env_names.BATCH_BUCKET_NAME).strip(),
        "batch_role_arn": _required(env, env_names.BATCH_ROLE_ARN).strip(),
        "batch_s3_prefix": prefix if prefix.endswith("/") else prefix + "/",
    }


def parse_labels(raw: str) -> tuple[str, ...]:
    """``"Hot, warm,,cold"`` -> ``("hot", "warm", "cold")``; empty input -> ``()``."""
    return tuple(label.strip().lower() for label in raw.split(",") if label.strip())


def parse_result_fields(raw: str) -> frozenset[str]:
    """``"label, key"`` -> ``{"label", "key"}``; ``"none"`` -> ``{}``; empty input -> the
    default (``{"label"}``). Raises ``ConfigurationError`` for a name it does not know."""
    names = {name.strip().lower() for name in raw.split(",") if name.strip()}
    if not names:
        return DEFAULT_RESULT_FIELDS
    if names == {"none"}:
        return frozenset()
    unknown = sorted(names - set(env_names.RESULT_FIELD_NAMES))
    if unknown:
        raise ConfigurationError(
            f"{env_names.RESULT_FIELDS} must be 'none' or some of "
            f"{', '.join(env_names.RESULT_FIELD_NAMES)}, got {raw!r}"
        )
    return frozenset(names)


def _prompt_cache(env: Mapping[str, str]) -> str:
    raw = env.get(env_names.PROMPT_CACHE, "").strip().lower() or DEFAULT_PROMPT_CACHE
    if raw not in env_names.PROMPT_CACHE_VALUES:
        raise ConfigurationError(
            f"{env_names.PROMPT_CACHE} must be one of {env_names.PROMPT_CACHE_VALUES}, got {raw!r}"
        )
    return raw


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    raw = env.get(name, "").strip() or choices[0]
    if raw not in choices:
        raise ConfigurationError(f"{name} must be one of {choices}, got {raw!r}")
    return raw


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw in ("", "false"):
        return False
    if raw == "true":
        return True
    raise ConfigurationError(f"{name} must be true or false, got {raw!r}")


def _key_expression(env: Mapping[str, str]) -> str:
    """``IDEMPOTENCY_KEY``, compiled now so a typo fails the first invocation loudly, not
    silently per event."""
    key_expression = _required(env, env_names.IDEMPOTENCY_KEY)
    try:
        jmespath.compile(key_expression)
    except JMESPathError as exc:
        raise ConfigurationError(f"IDEMPOTENCY_KEY is not valid JMESPath: {exc}") from exc
    return key_expression


def _provider(env: Mapping[str, str]) -> str:
    """``MODEL_PROVIDER``, one of :data:`PROVIDERS` (default ``anthropic``)."""
    provider = env.get(env_names.MODEL_PROVIDER, "anthropic").strip().lower() or "anthropic"
    if provider not in PROVIDERS:
        raise ConfigurationError(f"MODEL_PROVIDER must be one of {PROVIDERS}, got {provider!r}")
    return provider


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
