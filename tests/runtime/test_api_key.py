"""Where the API key comes from, and that it never reaches the logs."""

from __future__ import annotations

import json

import pytest
from model_step import ConfigurationError

from .conftest import (
    SECRET_VALUE,
    FakeLambdaContext,
    boto3_session,
    log_records,
    make_event,
)


def _sent_key(fake_api) -> str:
    headers = fake_api.last_request.headers
    if "x-api-key" in headers:
        return headers["x-api-key"]
    return headers["authorization"].removeprefix("Bearer ")


def test_api_key_is_read_from_secrets_manager(make_step, fake_api):
    make_step().handle(make_event(), FakeLambdaContext())
    assert _sent_key(fake_api) == SECRET_VALUE


def test_secret_may_be_json_with_api_key_field(make_step, fake_api, model_env):
    boto3_session().client("secretsmanager").put_secret_value(
        SecretId=model_env.secret_arn, SecretString=json.dumps({"api_key": "sk-from-json"})
    )
    make_step().handle(make_event(), FakeLambdaContext())
    assert _sent_key(fake_api) == "sk-from-json"


def test_secret_is_read_once_per_container(make_step, fake_api, model_env):
    step = make_step()
    step.handle(make_event(), FakeLambdaContext())
    # Rotating the secret does not affect a warm container's client...
    boto3_session().client("secretsmanager").put_secret_value(
        SecretId=model_env.secret_arn, SecretString="sk-rotated"
    )
    from .conftest import prospect_detail

    step.handle(make_event(prospect_detail(row_number=2)), FakeLambdaContext())
    assert _sent_key(fake_api) == SECRET_VALUE
    # ...while a new container picks it up.
    make_step().handle(make_event(prospect_detail(row_number=3)), FakeLambdaContext())
    assert _sent_key(fake_api) == "sk-rotated"


def test_anthropic_api_key_env_wins(make_step, fake_api, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-local-env")
    make_step().handle(make_event(), FakeLambdaContext())
    assert _sent_key(fake_api) == "sk-local-env"


def test_no_key_source_is_a_configuration_error(make_step, fake_api, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY_SECRET_ARN")
    with pytest.raises(ConfigurationError):
        make_step().handle(make_event(), FakeLambdaContext())
    assert fake_api.request_count == 0


def test_key_never_appears_in_logs(make_step, fake_api, model_env, log_capture):
    fake_api.script = [200, 401, 500]
    step = make_step()
    step.handle(make_event(), FakeLambdaContext())
    step.handle(make_event(), FakeLambdaContext())  # duplicate
    from .conftest import prospect_detail

    step.handle(make_event(prospect_detail(row_number=2)), FakeLambdaContext())  # 401 -> DLQ
    with pytest.raises(Exception):  # noqa: B017 (any transient SDK error)
        step.handle(make_event(prospect_detail(row_number=3)), FakeLambdaContext())

    text = log_capture.getvalue()
    assert SECRET_VALUE not in text
    records = log_records(log_capture)
    outcomes = [r.get("outcome") for r in records if r.get("outcome")]
    assert outcomes == ["completed", "duplicate", "dead_lettered", "retry"]
    completed = next(r for r in records if r.get("outcome") == "completed")
    assert completed["business_key"] == ["upload-001", 1]
    assert completed["request_id"] == fake_api.requests[0].request_id
    dead = next(r for r in records if r.get("outcome") == "dead_lettered")
    assert dead["error_code"] == "AuthenticationError"
    assert dead["request_id"] == fake_api.requests[1].request_id
