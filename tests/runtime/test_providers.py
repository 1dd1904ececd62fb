"""One outcome matrix over both providers (issue 22): the Claude API and Amazon Bedrock.

Each test runs twice: against the fake Messages API, and against the fake ``bedrock-runtime``
(SigV4-checked, Bedrock's path, body, ``x-amzn-requestid`` and error shapes) through the
real ``AnthropicBedrock`` client. Same request count, same stored result shape, the
provider recorded in the result; only the ERROR_CODE of an API error differs, because each
provider names its own errors.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import pytest

from tests.fakes import FakeBedrockRuntime, FakeMessagesAPI, Reply

from .conftest import FakeLambdaContext, fresh_event, make_event

#: The default model through the US profile, as AWS publishes it (no ``-v1:0``).
BEDROCK_MODEL_ID = "us.anthropic.claude-haiku-5-5"
# The secrets of the fake credentials a test signs with: conftest's, and moto's own
# (mock_aws sets them while it is active, and the SDK's session may have read either).
SECRET_KEYS = {"testing": "testing", "FOOBARKEY": "FOOBARSECRET"}


@dataclass
class Provider:
    """One provider's fake and what its errors are called."""

    name: str
    fake: Any  # FakeMessagesAPI | FakeBedrockRuntime: the same script interface
    codes: dict[str, str]


ANTHROPIC_CODES = {
    "400": "BadRequestError",
    "403": "PermissionDeniedError",
    "500": "InternalServerError",
    "timeout": "ModelDeadlineExceeded",
}
BEDROCK_CODES = {
    "400": "ValidationException",
    "403": "AccessDeniedException",
    "500": "InternalServerException",
    "timeout": "ModelDeadlineExceeded",
}
COMPLETED_SHAPE = {
    "status",
    "key",
    "answer",
    "answer_truncated",
    "request_id",
    "model",
    "prompt_version",
    "provider",
    "stop_reason",
    "usage",
    "completed_at",
    "cost_usd",
    # Issue 31: the key's totals over all its deliveries.
    "key_model_requests",
    "key_usage",
    "key_cost_usd",
}
DEAD_LETTERED_SHAPE = {
    "status",
    "error_code",
    "error_message",
    "request_id",
    "key",
    "model",
    "prompt_version",
    "provider",
    "dead_letter_id",
    "dead_letter_message_id",
    # Issue 31: the key's totals over all its deliveries.
    "key_model_requests",
    "key_usage",
    "key_cost_usd",
}


@pytest.fixture
def fake_bedrock(monkeypatch) -> Iterator[FakeBedrockRuntime]:
    """A started fake bedrock-runtime that verifies each signature's value."""
    with FakeBedrockRuntime(timeout_sleep=3.0, secret_keys=SECRET_KEYS) as bedrock:
        monkeypatch.setenv("ANTHROPIC_BEDROCK_BASE_URL", bedrock.base_url)
        yield bedrock


@pytest.fixture(params=["anthropic", "bedrock"])
def provider(request, model_env, fake_api, monkeypatch) -> Provider:
    if request.param == "anthropic":
        return Provider("anthropic", fake_api, ANTHROPIC_CODES)
    bedrock = request.getfixturevalue("fake_bedrock")
    monkeypatch.setenv("MODEL_PROVIDER", "bedrock")
    monkeypatch.setenv("MODEL_ID", BEDROCK_MODEL_ID)
    monkeypatch.delenv("ANTHROPIC_API_KEY_SECRET_ARN")
    return Provider("bedrock", bedrock, BEDROCK_CODES)


def _assert_reached_only(provider: Provider, fake_api: FakeMessagesAPI) -> None:
    if provider.name == "bedrock":
        assert fake_api.request_count == 0
        assert provider.fake.rejected == []


def test_an_answer_is_stored_with_the_same_shape_and_its_provider(make_step, provider, fake_api):
    result = make_step().handle(make_event(), FakeLambdaContext())

    assert provider.fake.request_count == 1
    assert set(result) == COMPLETED_SHAPE
    assert (result["status"], result["answer"], result["provider"]) == (
        "completed",
        "warm",
        provider.name,
    )
    assert result["request_id"] == provider.fake.last_request.request_id
    # The default model thought first: the answer is the text block; the thinking tokens
    # are output, billed at the output price of the catalogue (Haiku 5.5: $0.10 / $0.50).
    [thinking, text] = provider.fake.answered[-1]["content"]
    assert (thinking["type"], text["type"]) == ("thinking", "text")
    assert result["usage"] == provider.fake.last_usage
    output = result["usage"]["output_tokens"]
    assert output > 3
    assert result["cost_usd"] == pytest.approx((12 * 0.10 + output * 0.50) / 1e6, abs=1e-9)
    _assert_reached_only(provider, fake_api)


def test_a_duplicate_makes_no_second_request(make_step, provider):
    step = make_step()
    results = [step.handle(make_event(), FakeLambdaContext()) for _ in range(3)]

    assert provider.fake.request_count == 1
    assert results[1] == results[2] == results[0]


@pytest.mark.parametrize("status", [400, 403])
def test_a_rejected_request_is_a_stored_dead_letter_with_the_providers_code(
    make_step, provider, model_env, status
):
    provider.fake.script = [status]
    event = make_event()
    step = make_step()

    result = step.handle(event, FakeLambdaContext())
    again = step.handle(make_event(), FakeLambdaContext())

    code = provider.codes[str(status)]
    assert provider.fake.request_count == 1
    assert set(result) == DEAD_LETTERED_SHAPE
    assert (result["error_code"], result["provider"]) == (code, provider.name)
    assert result["request_id"] == provider.fake.last_request.request_id
    assert again == result
    [message] = model_env.dead_letters()
    assert message["body"] == event
    assert message["attributes"]["ERROR_CODE"] == code
    assert message["attributes"]["REQUEST_ID"] == provider.fake.last_request.request_id


@pytest.mark.parametrize(
    ("headers", "low", "high"),
    [({"retry-after": "7"}, 7, 7), ({}, 3, 5)],  # no header: 5 s x 2^0, jitter [0.5, 1]
    ids=["retry-after", "no-retry-after"],
)
def test_a_429_waits_on_the_buffer_queue_and_spends_no_attempt(
    make_step, provider, model_env, buffer, outcomes, headers, low, high
):
    provider.fake.script = [Reply(status=429, headers=headers)]
    event = fresh_event()

    response = make_step(on_outcome=outcomes).handle(buffer.batch(event), FakeLambdaContext())

    assert response == {"batchItemFailures": []}
    [copy] = buffer.requeued()
    body = json.loads(copy["MessageBody"])
    assert body.pop("model_step_key")["first_seen"] > 0  # the key's first-seen time rides on
    assert body == event
    assert low <= copy["DelaySeconds"] <= high
    [budget] = model_env.budgets().values()
    assert (budget["attempts"]["N"], budget["rate_limited"]["N"]) == ("0", "1")
    [(_, outcome)] = outcomes.seen
    assert (outcome["status"], outcome["model_requests"], outcome["rate_limited"]) == (
        "rate_limited",
        0,
        1,
    )
    assert provider.fake.request_count == 1


@pytest.mark.parametrize("entry", [500, "timeout"])
def test_a_transient_failure_is_retried_then_its_last_attempt_is_stored(
    make_step, provider, model_env, monkeypatch, entry
):
    if entry == "timeout":  # a 500 keeps the conftest's 5 s: load cannot make it a timeout
        monkeypatch.setenv("MODEL_TIMEOUT_SECONDS", "0.5")
    provider.fake.script = [entry] * 3
    step = make_step()
    event = make_event()

    for _ in range(2):
        with pytest.raises((anthropic.APIStatusError, anthropic.APITimeoutError)):
            step.handle(event, FakeLambdaContext())
        assert model_env.idempotency_items() == []  # released: the retry really runs
    result = step.handle(event, FakeLambdaContext())

    code = provider.codes["timeout" if entry == "timeout" else "500"]
    assert provider.fake.request_count == 3  # MAX_ATTEMPTS billed requests, no more
    assert set(result) == DEAD_LETTERED_SHAPE
    assert (result["error_code"], result["provider"]) == (code, provider.name)
    assert model_env.dead_letters()[0]["attributes"]["ERROR_CODE"] == code


@pytest.mark.parametrize(
    ("stop_reason", "code"), [("refusal", "ModelRefused"), ("max_tokens", "MaxTokensReached")]
)
def test_an_incomplete_answer_is_a_stored_dead_letter(make_step, provider, stop_reason, code):
    provider.fake.script = [Reply(text="", stop_reason=stop_reason)]
    step = make_step()

    result = step.handle(make_event(), FakeLambdaContext())
    again = step.handle(make_event(), FakeLambdaContext())

    assert provider.fake.request_count == 1
    assert set(result) == DEAD_LETTERED_SHAPE
    assert (result["error_code"], result["provider"]) == (code, provider.name)
    assert result["request_id"] == provider.fake.last_request.request_id
    assert again == result


@pytest.mark.parametrize("ttl", ["5m", "1h"])
def test_the_prompt_cache_mark_is_sent_and_its_usage_recorded(
    make_step, provider, monkeypatch, ttl
):
    # Bedrock takes the Messages API's cache_control on Claude through InvokeModel and
    # reports the same usage fields: prompt_cache works on both providers, unchanged.
    monkeypatch.setenv("PROMPT_CACHE", ttl)
    usage = {
        "input_tokens": 20,
        "output_tokens": 1,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 4096,
    }
    body = {
        "id": "msg_cached",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-5-5",
        "content": [{"type": "text", "text": "warm"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }
    provider.fake.script = [Reply(body=body)]

    result = make_step().handle(make_event(), FakeLambdaContext())

    [block] = provider.fake.last_request.body["system"]
    assert block["cache_control"] == {"type": "ephemeral", "ttl": ttl}
    assert result["usage"] == usage
