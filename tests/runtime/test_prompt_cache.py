"""Issue 20: the shipped system prompt, prompt caching's usage fields and metrics."""

from __future__ import annotations

import pytest
from model_step import ConfigurationError, Settings
from model_step.system_prompt import load_system_prompt, write_prompt

from tests.fakes import Reply

from .conftest import FakeLambdaContext, make_event, prospect_detail
from .prompts import shipped
from .test_observability import _emf_metrics

CACHED_USAGE = {
    "input_tokens": 40,
    "output_tokens": 1,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 6000,
}


def _body(usage: dict[str, int]) -> dict[str, object]:
    return {
        "id": "msg_cached",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-5-5",
        "content": [{"type": "text", "text": "warm"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }


def test_the_stored_result_carries_the_cache_usage(make_step, fake_api):
    fake_api.script = [Reply(body=_body(CACHED_USAGE))]
    result = make_step().handle(make_event(), FakeLambdaContext())

    assert result["usage"] == CACHED_USAGE


def test_an_answer_without_cache_fields_counts_zero_cached_tokens(make_step, fake_api):
    result = make_step().handle(make_event(), FakeLambdaContext())

    assert result["usage"]["cache_creation_input_tokens"] == 0
    assert result["usage"]["cache_read_input_tokens"] == 0


def test_cache_writes_and_reads_are_metrics(make_step, fake_api, capsys):
    written = {**CACHED_USAGE, "cache_creation_input_tokens": 6000, "cache_read_input_tokens": 0}
    fake_api.script = [Reply(body=_body(written)), Reply(body=_body(CACHED_USAGE))]
    step = make_step()
    step.handle(make_event(), FakeLambdaContext())
    step.handle(make_event(prospect_detail(row_number=2)), FakeLambdaContext())

    assert _emf_metrics(capsys.readouterr().out) == [
        {
            "ModelRequests": [1.0],
            "CacheWriteInputTokens": [6000.0],
            "InputTokens": [40.0],
            "OutputTokens": [1.0],
        },
        {
            "ModelRequests": [1.0],
            "CacheReadInputTokens": [6000.0],
            "InputTokens": [40.0],
            "OutputTokens": [1.0],
        },
    ]


def test_the_cache_setting_does_not_join_the_record_key(make_step, fake_api, monkeypatch):
    make_step().handle(make_event(), FakeLambdaContext())
    monkeypatch.setenv("PROMPT_CACHE", "1h")
    make_step().handle(make_event(), FakeLambdaContext())

    assert fake_api.request_count == 1


def test_the_full_prompt_text_joins_the_fingerprint(make_step, fake_api, monkeypatch):
    rubric = "Rubric. " * 20_000  # 160,000 bytes: only its tail differs below
    monkeypatch.setenv("SYSTEM_PROMPT_SHA256", shipped(rubric + "Answer hot."))
    make_step().handle(make_event(), FakeLambdaContext())
    monkeypatch.setenv("SYSTEM_PROMPT_SHA256", shipped(rubric + "Answer cold."))
    make_step().handle(make_event(), FakeLambdaContext())

    assert fake_api.request_count == 2
    [block] = fake_api.last_request.body["system"]
    assert block["text"] == rubric + "Answer cold."


def test_a_missing_prompt_file_fails_naming_the_hash(tmp_path):
    with pytest.raises(ConfigurationError, match="model_step_prompt/" + "0" * 64):
        load_system_prompt("0" * 64, search=[str(tmp_path)])


def test_a_prompt_file_that_does_not_match_its_hash_is_refused(tmp_path):
    sha256 = write_prompt(tmp_path, "Answer hot.")
    (tmp_path / "model_step_prompt" / f"{sha256}.txt").write_text("Answer cold.")

    with pytest.raises(ConfigurationError, match="different synths"):
        load_system_prompt(sha256, search=[str(tmp_path)])


@pytest.mark.parametrize("value", ["10m", "on"])
def test_an_unknown_prompt_cache_is_a_configuration_error(value):
    environ = {
        "IDEMPOTENCY_TABLE_NAME": "t",
        "DEAD_LETTER_QUEUE_URL": "q",
        "IDEMPOTENCY_KEY": "[a]",
        "PROMPT_VERSION": "v",
        "SYSTEM_PROMPT_SHA256": shipped("s"),
        "PROMPT_CACHE": value,
    }
    with pytest.raises(ConfigurationError, match="PROMPT_CACHE must be one of"):
        Settings.from_environment(environ)
