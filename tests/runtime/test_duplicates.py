"""A duplicate delivery, sequential or concurrent, never makes a second model request."""

from __future__ import annotations

import threading

import pytest
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
)

from .conftest import FakeLambdaContext, make_event, prospect_detail


def test_five_sequential_redeliveries_make_one_request(make_step, fake_api):
    step = make_step()
    event = make_event()

    results = [step.handle(event, FakeLambdaContext()) for _ in range(5)]

    assert fake_api.request_count == 1
    assert all(result == results[0] for result in results)
    assert results[0]["status"] == "completed"
    assert results[0]["answer"] == "warm"
    assert results[0]["key"] == ["upload-001", 1]
    assert results[0]["request_id"] == fake_api.last_request.request_id
    assert results[0]["prompt_version"] == "v1"
    assert results[0]["model"] == "claude-haiku-5-5"
    # The default model thinks first: its thinking tokens are billed as output (issue 32).
    assert results[0]["usage"] == fake_api.last_usage
    assert results[0]["usage"]["output_tokens"] > 3


def test_redelivery_to_a_new_container_is_served_from_the_table(make_step, fake_api):
    event = make_event()
    first = make_step().handle(event, FakeLambdaContext())
    # A second ModelStep is what a second Lambda container would have.
    second = make_step().handle(event, FakeLambdaContext())

    assert fake_api.request_count == 1
    assert second == first


def test_eight_concurrent_deliveries_make_one_request(make_step, fake_api, monkeypatch):
    # The first request (the lock's winner) is answered only once the other seven copies have
    # returned, so each of them meets the live lock however the threads are scheduled. Its
    # timeout and its lock (the Lambda deadline) are minutes: the others' time runs out first.
    monkeypatch.setenv("MODEL_TIMEOUT_SECONDS", "600")
    returned = threading.Semaphore(0)
    held: list[bool] = []

    def hold_until_the_others_returned(index: int, body: dict) -> int:
        if index == 0:
            held.append(all(returned.acquire(timeout=60) for _ in range(7)))
        return 200

    fake_api.script = hold_until_the_others_returned
    step = make_step()
    event = make_event()
    barrier = threading.Barrier(8)
    outcomes: list[object] = [None] * 8

    def deliver(index: int) -> None:
        barrier.wait()
        try:
            outcomes[index] = step.handle(event, FakeLambdaContext(remaining_millis=600_000))
        except Exception as exc:  # recorded and asserted on below
            outcomes[index] = exc
        finally:
            returned.release()

    threads = [threading.Thread(target=deliver, args=(i,), daemon=True) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert held == [True]  # the winner was answered after the seven others returned

    completed = [o for o in outcomes if isinstance(o, dict)]
    in_progress = [o for o in outcomes if isinstance(o, IdempotencyAlreadyInProgressError)]
    assert fake_api.request_count == 1
    assert len(completed) == 1
    assert len(in_progress) == 7, outcomes

    # Lambda's retry of a rejected duplicate gets the stored answer, without a request.
    retried = step.handle(event, FakeLambdaContext())
    assert retried == completed[0]
    assert fake_api.request_count == 1


def test_new_prompt_version_makes_a_new_request(make_step, fake_api, monkeypatch):
    event = make_event()
    first = make_step().handle(event, FakeLambdaContext())

    monkeypatch.setenv("PROMPT_VERSION", "v2")
    fake_api.text = "hot"
    second = make_step().handle(event, FakeLambdaContext())
    again = make_step().handle(event, FakeLambdaContext())

    assert fake_api.request_count == 2
    assert (first["prompt_version"], first["answer"]) == ("v1", "warm")
    assert (second["prompt_version"], second["answer"]) == ("v2", "hot")
    assert again == second


def test_new_model_id_makes_a_new_request(make_step, fake_api, monkeypatch):
    event = make_event()
    make_step().handle(event, FakeLambdaContext())
    monkeypatch.setenv("MODEL_ID", "claude-sonnet-5")
    result = make_step().handle(event, FakeLambdaContext())

    assert fake_api.request_count == 2
    assert fake_api.last_request.body["model"] == "claude-sonnet-5"
    assert result["model"] == "claude-sonnet-5"


@pytest.mark.parametrize("row_number", [2, "2"])
def test_different_business_keys_are_separate_requests(make_step, fake_api, row_number):
    step = make_step()
    step.handle(make_event(), FakeLambdaContext())
    step.handle(make_event(prospect_detail(row_number=row_number)), FakeLambdaContext())

    assert fake_api.request_count == 2


def test_one_table_item_per_key_with_ttl(make_step, model_env):
    make_step().handle(make_event(), FakeLambdaContext())

    items = model_env.idempotency_items()
    assert len(items) == 1
    item = items[0]
    assert item["status"]["S"] == "COMPLETED"
    # A stable per-step prefix (IDEMPOTENCY_RECORD_PREFIX, default "model-step"), never the
    # generated function name, so a replaced function keeps its records.
    assert item["id"]["S"].startswith("model-step#")
    assert "model-step-test" not in item["id"]["S"]
    assert int(item["expiration"]["N"]) > 0
    assert "validation" in item
