"""What counts as an answer: stop reasons (9.4), x-should-retry (9.5), parser errors (9.10)."""

from __future__ import annotations

import json

import anthropic
import pytest
from model_step import RetryableAnswerError

from tests.fakes import Reply

from .conftest import FakeLambdaContext, make_event


@pytest.mark.parametrize(
    ("stop_reason", "text", "error_code"),
    [
        ("max_tokens", "The answer is", "MaxTokensReached"),
        ("refusal", "", "ModelRefused"),
        ("tool_use", "", "IncompleteAnswer"),
        ("pause_turn", "", "IncompleteAnswer"),
        ("model_context_window_exceeded", "warm", "IncompleteAnswer"),
        ("something_new", "warm", "IncompleteAnswer"),
    ],
)
def test_an_incomplete_stop_reason_is_a_stored_dead_letter_never_a_success(
    make_step, fake_api, model_env, stop_reason, text, error_code
):
    fake_api.script = [Reply(text=text, stop_reason=stop_reason)]
    step = make_step()

    result = step.handle(make_event(), FakeLambdaContext())
    again = step.handle(make_event(), FakeLambdaContext())

    assert result["status"] == "dead_lettered"
    assert result["error_code"] == error_code
    assert result["request_id"] == fake_api.last_request.request_id
    assert stop_reason in result["error_message"]
    assert again == result
    assert fake_api.request_count == 1
    [message] = model_env.dead_letters()
    assert message["attributes"]["ERROR_CODE"] == error_code


@pytest.mark.parametrize("stop_reason", ["end_turn", "stop_sequence"])
def test_complete_stop_reasons_are_answers(make_step, fake_api, stop_reason):
    fake_api.script = [Reply(text="warm", stop_reason=stop_reason)]
    result = make_step().handle(make_event(), FakeLambdaContext())
    assert (result["status"], result["stop_reason"]) == ("completed", stop_reason)


@pytest.mark.parametrize("status", [500, 529, 429, 408])
def test_x_should_retry_false_dead_letters_a_retryable_status(
    make_step, fake_api, model_env, status
):
    fake_api.script = [Reply(status=status, headers={"x-should-retry": "false"})]

    result = make_step().handle(make_event(), FakeLambdaContext())

    assert result["status"] == "dead_lettered"
    assert str(status) in result["error_message"]
    assert fake_api.request_count == 1
    assert len(model_env.dead_letters()) == 1


@pytest.mark.parametrize(
    ("status", "expected"),
    [(400, anthropic.BadRequestError), (403, anthropic.PermissionDeniedError)],
)
def test_x_should_retry_true_makes_a_4xx_transient(
    make_step, fake_api, model_env, status, expected
):
    fake_api.script = [Reply(status=status, headers={"x-should-retry": "true"}), 200]
    step = make_step()

    with pytest.raises(expected):
        step.handle(make_event(), FakeLambdaContext())
    assert model_env.idempotency_items() == []
    assert step.handle(make_event(), FakeLambdaContext())["status"] == "completed"
    assert model_env.dead_letters() == []


def test_a_json_parser_error_costs_one_billed_call_not_three(make_step, fake_api, model_env):
    # The README's own example: parse_answer=json.loads on an answer that is not JSON.
    fake_api.text = "Sure! Here is the JSON: {"
    step = make_step(parse_answer=json.loads)

    results = [step.handle(make_event(), FakeLambdaContext()) for _ in range(3)]

    assert fake_api.request_count == 1
    assert results[0]["status"] == "dead_lettered"
    assert results[0]["error_code"] == "InvalidAnswer"
    assert "JSONDecodeError" in results[0]["error_message"]
    assert results[0]["request_id"] == fake_api.last_request.request_id
    assert all(result == results[0] for result in results)
    assert len(model_env.dead_letters()) == 1


def test_any_parser_exception_is_an_invalid_answer(make_step, fake_api):
    result = make_step(parse_answer=lambda text: text["missing"]).handle(
        make_event(), FakeLambdaContext()
    )
    assert (result["error_code"], fake_api.request_count) == ("InvalidAnswer", 1)


def test_a_retryable_answer_error_releases_the_record_for_a_new_request(
    make_step, fake_api, model_env
):
    answers = iter(["draft", "final"])
    fake_api.script = lambda index, body: Reply(text=next(answers))

    def parse(text: str) -> str:
        if text == "draft":
            raise RetryableAnswerError("model not ready")
        return text

    step = make_step(parse_answer=parse)
    with pytest.raises(RetryableAnswerError):
        step.handle(make_event(), FakeLambdaContext())
    result = step.handle(make_event(), FakeLambdaContext())

    assert result["parsed"] == "final"
    assert fake_api.request_count == 2
    assert model_env.dead_letters() == []
