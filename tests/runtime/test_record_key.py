"""The record key: a stable per-step prefix and a fingerprint of the request (issue 9.6)."""

from __future__ import annotations

import pytest
from model_step import Settings, request_fingerprint

from .conftest import FakeLambdaContext, make_event
from .prompts import shipped

REQUIRED = {
    "IDEMPOTENCY_TABLE_NAME": "t",
    "DEAD_LETTER_QUEUE_URL": "https://sqs.example/q",
    "IDEMPOTENCY_KEY": "[upload_id, row_number]",
    "PROMPT_VERSION": "v1",
    "SYSTEM_PROMPT_SHA256": shipped("be brief"),
}


def _ids(aws) -> list[str]:
    return sorted(item["id"]["S"] for item in aws.idempotency_items())


def test_two_prefixes_sharing_a_table_never_collide(make_step, fake_api, model_env, monkeypatch):
    monkeypatch.setenv("IDEMPOTENCY_RECORD_PREFIX", "Leads/Classify")
    make_step().handle(make_event(), FakeLambdaContext())
    monkeypatch.setenv("IDEMPOTENCY_RECORD_PREFIX", "Leads/Summarise")
    make_step().handle(make_event(), FakeLambdaContext())

    assert fake_api.request_count == 2
    ids = _ids(model_env)
    assert [i.split("#")[0] for i in ids] == ["Leads/Classify", "Leads/Summarise"]


def test_a_replaced_function_keeps_its_records(make_step, fake_api, monkeypatch):
    monkeypatch.setenv("IDEMPOTENCY_RECORD_PREFIX", "Leads/Classify")
    first = make_step().handle(make_event(), FakeLambdaContext())
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "Leads-ClassifyFunction-NEWNAME123")
    again = make_step().handle(make_event(), FakeLambdaContext())

    assert again == first
    assert fake_api.request_count == 1


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MAX_TOKENS", "512"),
        ("SYSTEM_PROMPT_SHA256", shipped("You label prospects. Answer hot or cold.")),
        ("ALLOWED_LABELS", "hot,warm,cold,frozen"),
    ],
)
def test_a_changed_request_setting_misses_the_old_record(
    make_step, fake_api, monkeypatch, name, value
):
    monkeypatch.setenv("ALLOWED_LABELS", "hot,warm,cold")
    make_step().handle(make_event(), FakeLambdaContext())
    monkeypatch.setenv(name, value)
    make_step().handle(make_event(), FakeLambdaContext())
    make_step().handle(make_event(), FakeLambdaContext())

    assert fake_api.request_count == 2
    if name == "MAX_TOKENS":
        assert fake_api.last_request.body["max_tokens"] == 512


def test_a_custom_handlers_prompt_version_joins_the_key(make_step, fake_api):
    build = lambda detail: f"Score {detail['email']}"  # noqa: E731
    make_step(build_user_message=build, prompt_version="score-1").handle(
        make_event(), FakeLambdaContext()
    )
    make_step(build_user_message=build, prompt_version="score-1").handle(
        make_event(), FakeLambdaContext()
    )
    make_step(build_user_message=build, prompt_version="score-2").handle(
        make_event(), FakeLambdaContext()
    )
    assert fake_api.request_count == 2


def test_fingerprint_ignores_label_order_and_case():
    a = Settings.from_environment({**REQUIRED, "ALLOWED_LABELS": "hot,warm,cold"})
    b = Settings.from_environment({**REQUIRED, "ALLOWED_LABELS": "Cold, WARM,hot"})
    c = Settings.from_environment({**REQUIRED, "ALLOWED_LABELS": "hot,warm"})
    assert request_fingerprint(a) == request_fingerprint(b)
    assert request_fingerprint(a) != request_fingerprint(c)
    assert request_fingerprint(a) != request_fingerprint(a, "handler-v2")
    assert len(request_fingerprint(a)) == 64


def test_record_prefix_default_and_override():
    assert Settings.from_environment(REQUIRED).record_prefix == "model-step"
    settings = Settings.from_environment({**REQUIRED, "IDEMPOTENCY_RECORD_PREFIX": "App/Step"})
    assert settings.record_prefix == "App/Step"
