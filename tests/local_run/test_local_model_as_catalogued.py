"""Issue 32: the local model behaves as the model catalogue says the model does.

The real SDK over HTTP to the shipped local model (and its Bedrock face): adaptive thinking
by default with its tokens in ``max_tokens`` and ``output_tokens``, the model's 400s
(sampling parameters, prefill, thinking, effort, ``max_tokens``), a 404 for a model it does
not know, injected refusals, the per-model cache minimum, and all ten Bedrock errors.
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from constructs_lib.local_engine.local_bedrock import BEDROCK_FAULTS
from constructs_lib.local_engine.local_model import LocalMessagesAPI, label_for
from constructs_lib.testing.bedrock_api import ERROR_STATUSES

ROW = {"role": "user", "content": "row 1: Ada Lovelace, CTO"}


def _ask(api: LocalMessagesAPI, **params: Any):
    client = anthropic.Anthropic(api_key="sk-local", base_url=api.base_url, max_retries=0)
    request: dict[str, Any] = {
        "model": "claude-haiku-5-5",
        "max_tokens": 1024,
        "messages": [ROW],
        **params,
    }
    return client.messages.create(**request)


def _text(message) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


def test_the_default_model_thinks_first_and_its_thinking_is_billed_output():
    with LocalMessagesAPI() as api:
        message = _ask(api)

    thinking, text = message.content
    assert (thinking.type, text.type, message.stop_reason) == ("thinking", "text", "end_turn")
    assert text.text == label_for(ROW["content"])
    # 40-400 tokens of thought at effort medium, then a one-token label.
    assert 41 <= message.usage.output_tokens <= 401
    assert api.output_tokens == message.usage.output_tokens


def test_a_max_tokens_the_thought_uses_up_ends_at_max_tokens_without_an_answer():
    with LocalMessagesAPI() as api:
        message = _ask(api, max_tokens=16)

    assert message.stop_reason == "max_tokens"
    assert [block.type for block in message.content] == ["thinking"]
    assert message.usage.output_tokens == 16


def test_thinking_off_answers_the_label_alone():
    with LocalMessagesAPI() as api:
        message = _ask(api, max_tokens=16, thinking={"type": "disabled"})

    assert [block.type for block in message.content] == ["text"]
    assert (message.stop_reason, message.usage.output_tokens) == ("end_turn", 1)


def test_effort_scales_the_thought():
    with LocalMessagesAPI() as api:
        low = _ask(api, max_tokens=4096, output_config={"effort": "low"})
        high = _ask(api, max_tokens=4096, output_config={"effort": "max"})

    assert low.usage.output_tokens < high.usage.output_tokens
    assert _text(low) == _text(high)


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        # This SDK no longer takes them as arguments; a raw body still can send them.
        ({"extra_body": {"temperature": 0.2}}, "temperature"),
        ({"extra_body": {"top_p": 0.9}}, "top_p"),
        ({"extra_body": {"top_k": 5}}, "top_k"),
        (
            {"messages": [ROW, {"role": "assistant", "content": "The label is"}]},
            "prefill",
        ),
        ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking.type"),
        (
            {"thinking": {"type": "adaptive", "budget_tokens": 1024}},
            "thinking.adaptive.budget_tokens",
        ),
        (
            {"thinking": {"type": "disabled"}, "output_config": {"effort": "xhigh"}},
            "with thinking off",
        ),
        ({"max_tokens": 200_000, "timeout": 5.0}, "maximum allowed number of output tokens"),
    ],
)
def test_a_request_the_model_refuses_is_a_400_in_the_apis_shape(params, reason):
    with LocalMessagesAPI() as api:
        with pytest.raises(anthropic.BadRequestError) as raised:
            _ask(api, **params)

    assert raised.value.body["error"]["type"] == "invalid_request_error"
    assert reason in raised.value.body["error"]["message"]
    assert api.model_refused == {400: 1} and api.input_tokens == 0


def test_a_default_temperature_is_no_change_and_is_accepted():
    with LocalMessagesAPI() as api:
        assert _ask(api, extra_body={"temperature": 1.0}).stop_reason == "end_turn"


def test_a_model_the_catalogue_does_not_know_is_a_404():
    with LocalMessagesAPI() as api:
        with pytest.raises(anthropic.NotFoundError) as raised:
            _ask(api, model="claude-sonnet-9-9")

    assert raised.value.body["error"]["type"] == "not_found_error"


def test_an_older_model_takes_sampling_parameters_but_not_adaptive_thinking():
    with LocalMessagesAPI() as api:
        message = _ask(
            api, model="claude-haiku-4-5", extra_body={"temperature": 0.0}, max_tokens=16
        )
        with pytest.raises(anthropic.BadRequestError, match="thinking"):
            _ask(api, model="claude-haiku-4-5", thinking={"type": "adaptive"})

    assert [block.type for block in message.content] == ["text"]


def test_refusals_can_be_injected_seeded_per_row():
    with LocalMessagesAPI(refusal_rate=1.0) as api:
        message = _ask(api)

    assert (message.stop_reason, message.content) == ("refusal", [])
    assert api.refusals == 1


def test_the_cache_minimum_is_the_models():
    # 600 tokens of system prompt: over Haiku 5.5's 512, under Haiku 4.5's 4,096.
    system = [{"type": "text", "text": "x" * 2400, "cache_control": {"type": "ephemeral"}}]
    with LocalMessagesAPI() as api:
        haiku_5_5 = _ask(api, system=system, max_tokens=16, thinking={"type": "disabled"})
        haiku_4_5 = _ask(api, system=system, max_tokens=16, model="claude-haiku-4-5")

    assert haiku_5_5.usage.cache_creation_input_tokens == 600
    assert haiku_4_5.usage.cache_creation_input_tokens == 0


def test_the_local_bedrock_can_return_all_ten_invoke_model_errors():
    returned = {name for names in BEDROCK_FAULTS.values() for name in names}
    assert returned == set(ERROR_STATUSES)
