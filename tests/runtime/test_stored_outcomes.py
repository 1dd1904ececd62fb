"""Non-retryable outcomes are stored like answers; the DLQ hand-off is idempotent on its own;
an operator's retry carries a replay generation that joins the key (issue 9.1, 9.2)."""

from __future__ import annotations

import hashlib
import json
import threading

import pytest
from model_step import default_user_message

from tests.fakes import Reply

from .conftest import FakeLambdaContext, make_event, prospect_detail


@pytest.mark.parametrize(
    "entry",
    [400, 403, Reply(text="lukewarm")],
    ids=["400", "403", "label-not-allowed"],
)
def test_duplicates_of_a_dead_lettered_event_make_no_request_and_no_second_message(
    make_step, fake_api, model_env, monkeypatch, entry
):
    monkeypatch.setenv("ALLOWED_LABELS", "hot,warm,cold")
    fake_api.script = [entry]
    step = make_step()

    results = [step.handle(make_event(), FakeLambdaContext()) for _ in range(3)]
    # A new container (a second ModelStep) replays it from the table too.
    results.append(make_step().handle(make_event(), FakeLambdaContext()))

    assert fake_api.request_count == 1
    assert results[0]["status"] == "dead_lettered"
    assert all(result == results[0] for result in results)
    assert len(model_env.dead_letters()) == 1


def test_concurrent_duplicates_of_a_dead_lettered_event_send_one_message(
    make_step, fake_api, model_env
):
    fake_api.script = [400]
    fake_api.delay = 0.3
    step = make_step()
    barrier = threading.Barrier(5)
    outcomes: list[object] = [None] * 5

    def deliver(index: int) -> None:
        barrier.wait()
        try:
            outcomes[index] = step.handle(make_event(), FakeLambdaContext())
        except Exception as exc:  # in-progress duplicates, asserted below
            outcomes[index] = exc

    threads = [threading.Thread(target=deliver, args=(i,)) for i in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    # Lambda retries the in-progress ones later: they replay.
    for index, outcome in enumerate(outcomes):
        if not isinstance(outcome, dict):
            outcomes[index] = step.handle(make_event(), FakeLambdaContext())

    assert fake_api.request_count == 1
    assert len({o["dead_letter_message_id"] for o in outcomes}) == 1
    assert len(model_env.dead_letters()) == 1


def test_operator_retry_makes_exactly_one_request_and_a_double_press_replays(
    make_step, fake_api, model_env
):
    fake_api.script = [500, 400, 200]
    step = make_step()
    with pytest.raises(Exception):  # noqa: B017 (a transient 500: record released)
        step.handle(make_event(), FakeLambdaContext())
    assert step.handle(make_event(), FakeLambdaContext())["error_code"] == "BadRequestError"
    original_content = fake_api.last_request.body["messages"][0]["content"]
    assert len(model_env.dead_letters()) == 1

    retry = make_event(prospect_detail(replay_generation=1))
    first = step.handle(retry, FakeLambdaContext())
    second = step.handle(retry, FakeLambdaContext())  # the same generation pressed twice

    assert fake_api.request_count == 3
    assert first == second
    assert first["status"] == "completed"
    # The generation is not part of the request: the retry asks exactly the same question.
    assert fake_api.last_request.body["messages"][0]["content"] == original_content
    assert model_env.dead_letters() == []
    # The next generation is a new key again.
    step.handle(make_event(prospect_detail(replay_generation=2)), FakeLambdaContext())
    assert fake_api.request_count == 4


def test_a_retried_row_that_fails_again_is_dead_lettered_again_once(make_step, fake_api, model_env):
    fake_api.script = [400, 400]
    step = make_step()
    step.handle(make_event(), FakeLambdaContext())
    retry = make_event(prospect_detail(replay_generation=1))
    again = step.handle(retry, FakeLambdaContext())
    step.handle(retry, FakeLambdaContext())

    assert again["replay_generation"] == 1
    messages = model_env.dead_letters()
    assert len(messages) == 2
    assert messages[1]["body"]["detail"]["replay_generation"] == 1
    assert fake_api.request_count == 2


def test_a_retry_generation_buys_exactly_one_request_even_when_it_fails_transiently(
    make_step, fake_api, model_env
):
    # GIVEN a row dead-lettered as a transient failure (its 3 attempts spent, issue 36 item 1)
    fake_api.script = [500, 500, 500, 500, 500, 200]
    step = make_step()
    for _ in range(2):
        with pytest.raises(Exception):  # noqa: B017 (transient: raised so it is retried)
            step.handle(make_event(), FakeLambdaContext())
    assert step.handle(make_event(), FakeLambdaContext())["status"] == "dead_lettered"
    assert fake_api.request_count == 3
    # WHEN the operator retries it once and the provider fails again
    retry = make_event(prospect_detail(replay_generation=1))
    again = step.handle(retry, FakeLambdaContext())
    # THEN that one request was the whole budget: dead-lettered at once, not raised
    assert fake_api.request_count == 4
    assert again["status"] == "dead_lettered"
    assert again["replay_generation"] == 1
    [_, message] = model_env.dead_letters()
    assert "attempt 1 of 1" in message["attributes"]["ERROR_MESSAGE"]
    # and its duplicate replays the stored outcome: no second request
    assert step.handle(retry, FakeLambdaContext()) == again
    assert fake_api.request_count == 4


@pytest.mark.parametrize("value", ["2", 0, -1, True, 1.5, None, [1]])
def test_bad_replay_generation_is_a_recorded_dead_letter(make_step, fake_api, model_env, value):
    event = make_event(prospect_detail(replay_generation=value))

    result = make_step().handle(event, FakeLambdaContext())
    again = make_step().handle(event, FakeLambdaContext())  # Lambda redelivers the same event

    assert fake_api.request_count == 0
    assert result["status"] == "dead_lettered"
    assert result["error_code"] == "InvalidReplayGeneration"
    assert again == result
    [message] = model_env.dead_letters()
    assert message["body"] == event
    assert message["attributes"]["ERROR_CODE"] == "InvalidReplayGeneration"


def test_replay_generation_is_not_in_the_payload_validation(make_step, fake_api, model_env):
    make_step().handle(make_event(prospect_detail(replay_generation=3)), FakeLambdaContext())

    [item] = model_env.idempotency_items()
    # Powertools' validation hash (md5 of the sorted JSON) is of the detail WITHOUT the field,
    # and the user message never sees it either.
    without = prospect_detail()
    expected = hashlib.md5(json.dumps(without, sort_keys=True).encode()).hexdigest()
    assert item["validation"]["S"] == expected
    assert fake_api.last_request.body["messages"][0]["content"] == default_user_message(without)
