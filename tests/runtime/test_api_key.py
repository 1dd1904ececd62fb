"""Where the API key comes from, and that it never reaches the logs."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from model_step import ConfigurationError

from tests.fixture_clients import fixture_client

from .conftest import (
    SECRET_VALUE,
    FakeLambdaContext,
    log_records,
    make_event,
    prospect_detail,
)


def _sent_key(fake_api) -> str:
    headers = fake_api.last_request.headers
    if "x-api-key" in headers:
        return headers["x-api-key"]
    return headers["authorization"].removeprefix("Bearer ")


class StoppedDatetime(dt.datetime):
    """``datetime`` whose ``now()`` stands still until :meth:`advance` moves it (the clock
    of Powertools' parameter cache, so its expiry does not depend on the machine's speed)."""

    at = dt.datetime.now()

    @classmethod
    def now(cls, tz: dt.tzinfo | None = None) -> dt.datetime:  # type: ignore[override]
        return cls.at if tz is None else cls.at.astimezone(tz)

    @classmethod
    def advance(cls, seconds: float) -> None:
        cls.at += dt.timedelta(seconds=seconds)


def test_api_key_is_read_from_secrets_manager(make_step, fake_api):
    make_step().handle(make_event(), FakeLambdaContext())
    assert _sent_key(fake_api) == SECRET_VALUE


def test_secret_may_be_json_with_api_key_field(make_step, fake_api, model_env):
    fixture_client("secretsmanager").put_secret_value(
        SecretId=model_env.secret_arn, SecretString=json.dumps({"api_key": "sk-from-json"})
    )
    make_step().handle(make_event(), FakeLambdaContext())
    assert _sent_key(fake_api) == "sk-from-json"


def test_secret_is_cached_for_its_max_age(make_step, fake_api, model_env, monkeypatch):
    step = make_step()
    step.handle(make_event(), FakeLambdaContext())
    secrets = fixture_client("secretsmanager")
    secrets.put_secret_value(SecretId=model_env.secret_arn, SecretString="sk-rotated")

    # Within API_KEY_MAX_AGE_SECONDS (default 300) a warm container keeps the cached key...
    step.handle(make_event(prospect_detail(row_number=2)), FakeLambdaContext())
    assert _sent_key(fake_api) == SECRET_VALUE
    # ...while a new container reads the rotated one.
    make_step().handle(make_event(prospect_detail(row_number=3)), FakeLambdaContext())
    assert _sent_key(fake_api) == "sk-rotated"


def test_a_warm_container_picks_up_a_rotated_key_after_max_age(
    make_step, fake_api, model_env, monkeypatch
):
    import aws_lambda_powertools.utilities.parameters.base as parameters_base

    class Clock(StoppedDatetime):
        at = dt.datetime.now()

    monkeypatch.setattr(parameters_base, "datetime", Clock)
    monkeypatch.setenv("API_KEY_MAX_AGE_SECONDS", "1")
    step = make_step()
    step.handle(make_event(), FakeLambdaContext())
    fixture_client("secretsmanager").put_secret_value(
        SecretId=model_env.secret_arn, SecretString="sk-rotated"
    )
    Clock.advance(1.2)  # past the key's max age, on the clock Powertools' cache reads
    step.handle(make_event(prospect_detail(row_number=2)), FakeLambdaContext())
    assert _sent_key(fake_api) == "sk-rotated"


def test_a_401_rereads_the_secret_and_retries_once(make_step, fake_api, model_env, capsys):
    step = make_step()
    step.handle(make_event(), FakeLambdaContext())  # caches the first key
    fixture_client("secretsmanager").put_secret_value(
        SecretId=model_env.secret_arn, SecretString="sk-rotated"
    )
    fake_api.script = [200, 401, 200]

    result = step.handle(make_event(prospect_detail(row_number=2)), FakeLambdaContext())

    assert result["status"] == "completed"
    assert fake_api.request_count == 3
    assert _sent_key(fake_api) == "sk-rotated"
    assert model_env.dead_letters() == []
    # The 401 is not billed: the delivery counts one model request.
    emf = [json.loads(x) for x in capsys.readouterr().out.splitlines() if '"_aws"' in x]
    assert emf[-1]["ModelRequests"] == [1.0]


def test_a_401_with_an_unchanged_secret_is_dead_lettered_without_a_retry(
    make_step, fake_api, model_env
):
    fake_api.script = [401]
    result = make_step().handle(make_event(), FakeLambdaContext())

    assert result["error_code"] == "AuthenticationError"
    assert fake_api.request_count == 1
    assert len(model_env.dead_letters()) == 1


def test_a_401_on_the_reread_key_too_is_dead_lettered_after_one_retry(
    make_step, fake_api, model_env
):
    step = make_step()
    step.handle(make_event(), FakeLambdaContext())
    fixture_client("secretsmanager").put_secret_value(
        SecretId=model_env.secret_arn, SecretString="sk-also-revoked"
    )
    fake_api.script = [200, 401, 401]

    result = step.handle(make_event(prospect_detail(row_number=2)), FakeLambdaContext())

    assert result["error_code"] == "AuthenticationError"
    assert fake_api.request_count == 3
    assert len(model_env.dead_letters()) == 1


def test_a_401_with_the_env_key_is_not_retried(make_step, fake_api, model_env, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-local-env")
    fake_api.script = [401]
    assert make_step().handle(make_event(), FakeLambdaContext())["status"] == "dead_lettered"
    assert fake_api.request_count == 1


@pytest.mark.parametrize("bad", ["sk-ant-abc\ndef", "sk-ant-abc\tdef", "sk-ant-\x7fdef"])
def test_a_key_with_control_characters_is_refused_without_showing_it(
    make_step, fake_api, model_env, bad
):
    key = bad.encode().decode("unicode_escape")
    fixture_client("secretsmanager").put_secret_value(
        SecretId=model_env.secret_arn, SecretString=key
    )
    with pytest.raises(ConfigurationError, match="control characters") as raised:
        make_step().handle(make_event(), FakeLambdaContext())

    assert fake_api.request_count == 0
    assert "sk-ant" not in str(raised.value)
    assert model_env.idempotency_items() == []  # released: the fixed key gets a request


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
    # The key's record id, never its parts (issue 34): no record carries business_key.
    assert completed["record_id"].startswith("model-step#")
    assert not any("business_key" in r for r in records)
    assert completed["request_id"] == fake_api.requests[0].request_id
    dead = next(r for r in records if r.get("outcome") == "dead_lettered")
    assert dead["error_code"] == "AuthenticationError"
    assert dead["request_id"] == fake_api.requests[1].request_id
