"""Environment parsing and business-key extraction."""

from __future__ import annotations

import pytest
from model_step import (
    ConfigurationError,
    MissingIdempotencyKeyError,
    Settings,
    extract_business_key,
)
from model_step.api_key import parse_secret_string

from .prompts import shipped

REQUIRED = {
    "IDEMPOTENCY_TABLE_NAME": "t",
    "DEAD_LETTER_QUEUE_URL": "https://sqs.example/q",
    "IDEMPOTENCY_KEY": "[upload_id, row_number]",
    "PROMPT_VERSION": "v1",
    "SYSTEM_PROMPT_SHA256": shipped("be brief"),
}


def test_defaults():
    settings = Settings.from_environment(REQUIRED)
    assert settings.model_id == "claude-haiku-5-5"
    assert settings.max_tokens == 1024
    assert settings.model_provider == "anthropic"
    # 24 h max_event_age + the queues' 14 days + 1 h (model_step.lifetime).
    assert settings.expires_after_seconds == 1_299_600
    assert settings.model_timeout_seconds == 60.0
    assert settings.allowed_labels == ()
    assert settings.service_name == "model-step"
    assert settings.metrics_namespace == "IdempotentModelStep"
    assert settings.api_key_secret_arn is None
    assert settings.record_prefix == "model-step"
    assert settings.max_event_age_seconds == 86_400
    assert settings.max_attempts == 3
    assert settings.buffer_queue_url is None
    assert settings.api_key_max_age_seconds == 300


@pytest.mark.parametrize("missing", sorted(REQUIRED))
def test_required_variables(missing):
    env = {k: v for k, v in REQUIRED.items() if k != missing}
    with pytest.raises(ConfigurationError, match=missing):
        Settings.from_environment(env)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MAX_TOKENS", "lots"),
        ("MAX_TOKENS", "0"),
        ("MODEL_TIMEOUT_SECONDS", "-1"),
        ("MAX_ATTEMPTS", "0"),
        ("MAX_EVENT_AGE_SECONDS", "a day"),
        ("API_KEY_MAX_AGE_SECONDS", "-5"),
        ("IDEMPOTENCY_KEY", "[upload_id,"),
        ("MODEL_PROVIDER", "openai"),
    ],
)
def test_invalid_values(name, value):
    with pytest.raises(ConfigurationError, match=name):
        Settings.from_environment({**REQUIRED, name: value})


def test_labels_and_provider_are_normalised():
    settings = Settings.from_environment(
        {**REQUIRED, "ALLOWED_LABELS": " Hot,warm,, COLD ", "MODEL_PROVIDER": "Bedrock"}
    )
    assert settings.allowed_labels == ("hot", "warm", "cold")
    assert settings.model_provider == "bedrock"


@pytest.mark.parametrize(
    ("detail", "expression", "expected"),
    [
        ({"id": "a"}, "id", ["a"]),
        ({"a": "x", "b": 0}, "[a, b]", ["x", 0]),
        ({"a": "x", "b": False}, "{a: a, b: b}", ["x", False]),
    ],
)
def test_business_key_shapes(detail, expression, expected):
    assert extract_business_key(detail, expression) == expected


@pytest.mark.parametrize(
    ("detail", "expression"),
    [
        ({}, "id"),
        ({}, "[a, b]"),
        ({"a": "x"}, "[a, b]"),
        ({"a": "", "b": "y"}, "[a, b]"),
        ({"a": " ", "b": "y"}, "{a: a, b: b}"),
        ({"a": []}, "a"),
    ],
)
def test_business_key_rejects_any_missing_part(detail, expression):
    with pytest.raises(MissingIdempotencyKeyError):
        extract_business_key(detail, expression)


@pytest.mark.parametrize(
    ("raw", "key"),
    [("sk-raw\n", "sk-raw"), ('{"api_key": "sk-json"}', "sk-json")],
)
def test_secret_formats(raw, key):
    assert parse_secret_string(raw) == key


@pytest.mark.parametrize("raw", ["", "{not json", '{"key": "sk-wrong-field"}'])
def test_bad_secret_never_echoes_content(raw):
    with pytest.raises(ConfigurationError) as info:
        parse_secret_string(raw)
    assert "sk-wrong-field" not in str(info.value)


def test_the_defaults_are_the_ones_environment_declares():
    from model_step import config, environment

    parsed = Settings.from_environment(
        {
            environment.IDEMPOTENCY_TABLE_NAME: "t",
            environment.DEAD_LETTER_QUEUE_URL: "q",
            environment.IDEMPOTENCY_KEY: "[a]",
            environment.PROMPT_VERSION: "v",
            environment.SYSTEM_PROMPT_SHA256: shipped("s"),
        }
    )
    declared = {v.name: v.default for v in environment.VARIABLES}
    assert declared[environment.MODEL_ID] == parsed.model_id == config.DEFAULT_MODEL_ID
    expected = {
        environment.MAX_TOKENS: parsed.max_tokens,
        environment.IDEMPOTENCY_EXPIRES_AFTER_SECONDS: parsed.expires_after_seconds,
        environment.MODEL_TIMEOUT_SECONDS: parsed.model_timeout_seconds,
        environment.MAX_EVENT_AGE_SECONDS: parsed.max_event_age_seconds,
        environment.MAX_ATTEMPTS: parsed.max_attempts,
        environment.API_KEY_MAX_AGE_SECONDS: parsed.api_key_max_age_seconds,
    }
    for name, value in expected.items():
        assert float(declared[name]) == float(value), name
    assert declared[environment.IDEMPOTENCY_RECORD_PREFIX] == parsed.record_prefix
    assert declared[environment.MODEL_PROVIDER] == parsed.model_provider
    assert declared[environment.POWERTOOLS_SERVICE_NAME] == parsed.service_name
    assert declared[environment.POWERTOOLS_METRICS_NAMESPACE] == parsed.metrics_namespace


def test_a_key_memory_shorter_than_what_the_runtime_holds_a_key_for_is_refused():
    """max_event_age = expires_after = 1 h was allowed before issue 31, and billed keys past
    their budget: the runtime holds a key max_event_age + Lambda async's 6 h + 1 h."""
    env = {**REQUIRED, "MAX_EVENT_AGE_SECONDS": "3600", "IDEMPOTENCY_EXPIRES_AFTER_SECONDS": "3600"}
    with pytest.raises(
        ConfigurationError, match="IDEMPOTENCY_EXPIRES_AFTER_SECONDS must be at least 28800"
    ):
        Settings.from_environment(env)
    batch = {**env, "MODEL_DELIVERY": "batch", "IDEMPOTENCY_EXPIRES_AFTER_SECONDS": "28800"}
    with pytest.raises(ConfigurationError, match="at least 183600"):
        Settings.from_environment(batch)


@pytest.mark.parametrize(
    ("raw", "fields"),
    [
        ("", {"label"}),  # unset: the label only
        ("none", set()),
        ("label,key,parsed", {"label", "key", "parsed"}),
        (" Key , PARSED ", {"key", "parsed"}),
    ],
)
def test_result_fields_name_what_result_events_carry(raw, fields):
    settings = Settings.from_environment({**REQUIRED, "RESULT_FIELDS": raw})
    assert settings.result_fields == frozenset(fields)


def test_an_unknown_result_field_is_refused_by_name():
    with pytest.raises(ConfigurationError, match="RESULT_FIELDS must be 'none' or some of"):
        Settings.from_environment({**REQUIRED, "RESULT_FIELDS": "label,answer"})
