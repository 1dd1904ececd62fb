"""What goes over the wire to the Messages API."""

from __future__ import annotations

import contextlib
import json

import anthropic
import pytest

from tests.fakes import Reply

from .conftest import SYSTEM_PROMPT, FakeLambdaContext, make_event


def test_request_sends_no_sampling_parameters(make_step, fake_api):
    make_step().handle(make_event(), FakeLambdaContext())

    body = fake_api.last_request.body
    assert not {"temperature", "top_p", "top_k"} & body.keys()
    assert body["model"] == "claude-haiku-5-5"
    assert body["max_tokens"] == 1024
    assert body["system"] == [
        {"type": "text", "text": SYSTEM_PROMPT, "cache_control": {"type": "ephemeral", "ttl": "5m"}}
    ]


@pytest.mark.parametrize(("setting", "cache_control"), [("1h", {"type": "ephemeral", "ttl": "1h"})])
def test_the_system_prompt_carries_the_prompt_cache_ttl(
    make_step, fake_api, monkeypatch, setting, cache_control
):
    monkeypatch.setenv("PROMPT_CACHE", setting)
    make_step().handle(make_event(), FakeLambdaContext())

    [block] = fake_api.last_request.body["system"]
    assert block["cache_control"] == cache_control


def test_prompt_cache_off_sends_no_cache_control(make_step, fake_api, monkeypatch):
    monkeypatch.setenv("PROMPT_CACHE", "off")
    make_step().handle(make_event(), FakeLambdaContext())

    assert fake_api.last_request.body["system"] == [{"type": "text", "text": SYSTEM_PROMPT}]


def test_the_per_row_part_follows_the_cached_prefix(make_step, fake_api):
    event = make_event()
    make_step().handle(event, FakeLambdaContext())

    body = fake_api.last_request.body
    assert "cache_control" in body["system"][-1]
    assert body["messages"] == [
        {"role": "user", "content": json.dumps(event["detail"], sort_keys=True)}
    ]


def test_default_user_message_is_the_detail_as_sorted_json(make_step, fake_api):
    event = make_event()
    make_step().handle(event, FakeLambdaContext())

    [message] = fake_api.last_request.body["messages"]
    assert message["role"] == "user"
    assert message["content"] == json.dumps(event["detail"], sort_keys=True)


def test_sdk_makes_exactly_one_attempt(make_step, fake_api):
    make_step().handle(make_event(), FakeLambdaContext())
    assert fake_api.last_request.headers["x-stainless-retry-count"] == "0"


@pytest.mark.parametrize(
    ("remaining_ms", "limit", "expected"),
    [(30_000, "5", 5.0), (6_000, "60", 3.0), (2_000, "60", 1.0)],
)
def test_timeout_leaves_a_safety_margin_before_lambda_times_out(
    make_step, fake_api, monkeypatch, remaining_ms, limit, expected
):
    monkeypatch.setenv("MODEL_TIMEOUT_SECONDS", limit)
    # Only the timeout the request was sent with is asserted: on a loaded machine the 1 s
    # case's answer may arrive too late, which raises after the request was recorded.
    with contextlib.suppress(anthropic.APITimeoutError):
        make_step().handle(make_event(), FakeLambdaContext(remaining_millis=remaining_ms))

    sent = float(fake_api.last_request.headers["x-stainless-timeout"])
    assert sent == pytest.approx(expected, abs=0.05)


def test_custom_prompt_and_parser(make_step, fake_api):
    fake_api.text = '{"score": 7}'
    step = make_step(
        build_user_message=lambda detail: f"Score {detail['email']}",
        parse_answer=json.loads,
    )

    result = step.handle(make_event(), FakeLambdaContext())
    again = step.handle(make_event(), FakeLambdaContext())

    assert fake_api.last_request.body["messages"][0]["content"] == "Score ada1@example.com"
    assert result["parsed"] == {"score": 7}
    assert again == result
    assert fake_api.request_count == 1


def test_sdk_never_retries_by_itself(make_step, fake_api):
    # The reply invites an immediate SDK retry (retry-after-ms: 1, x-should-retry: true); with
    # max_retries=0 there is still exactly one HTTP request per attempt.
    fake_api.script = [
        Reply(status=500, headers={"retry-after-ms": "1", "x-should-retry": "true"}),
        200,
    ]
    with pytest.raises(anthropic.InternalServerError):
        make_step().handle(make_event(), FakeLambdaContext())
    assert fake_api.request_count == 1
