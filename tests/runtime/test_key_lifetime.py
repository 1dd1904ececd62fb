"""A key's memory outlives every path that can bring it back (issue 31, item 1).

GIVEN the runtime with the real Powertools store, moto and the fake Messages API on a clock
that every part reads (tests.faults.harness.MovableClock), WHEN copies of a key come back
days later, THEN the key's budget and first-seen time are the ones it had: no key is billed
past its budget, and a copy that outlives the key's memory is a coded dead letter.
"""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from tests.faults.harness import MovableClock

from .conftest import TABLE, FakeLambdaContext, boto3_session, fresh_event

HOUR = 3_600


@pytest.fixture
def clock():
    clock = MovableClock()
    with clock.installed():
        yield clock


def _deliver(step, buffer, event) -> dict:
    """One copy of ``event`` through the buffer queue. The copies the test delivered before
    are taken off first: on this moved clock they would be visible again, and the poller
    would hand one of them in its place."""
    while True:
        taken = buffer.sqs.receive_message(QueueUrl=buffer.url, MaxNumberOfMessages=10)
        if not taken.get("Messages"):
            break
        for message in taken["Messages"]:
            buffer.sqs.delete_message(QueueUrl=buffer.url, ReceiptHandle=message["ReceiptHandle"])
    return step.handle(buffer.batch(event), FakeLambdaContext())


def test_a_budget_outlives_a_mapping_paused_for_25_hours(
    make_step, fake_api, model_env, buffer, clock
):
    """The issue's case: two 500s, the buffer mapping paused 25 h (defaults), then more
    500s. Before the fix the budget expired 24 h after its last claim and the key was billed
    5 times for a budget of 3."""
    fake_api.script = lambda index, body: 500
    step = make_step()
    event = fresh_event()
    for _ in range(2):
        assert _deliver(step, buffer, event)["batchItemFailures"]
    clock.advance(25 * HOUR)
    for _ in range(4):
        _deliver(step, buffer, event)

    assert fake_api.request_count == 3
    [message] = model_env.dead_letters()
    assert message["attributes"]["ERROR_CODE"] == "InternalServerError"
    [budget] = [
        item
        for record, item in model_env.budgets().items()
        if not record.startswith("model-step#dead-letter")
    ]
    assert budget["attempts"]["N"] == "3"  # the key's own item, not its DLQ hand-off's


def test_first_seen_never_moves_while_the_key_is_remembered(
    make_step, fake_api, model_env, buffer, clock
):
    fake_api.script = lambda index, body: 500
    step = make_step()
    event = fresh_event()
    _deliver(step, buffer, event)
    [first] = model_env.budgets().values()
    clock.advance(3 * 86_400)
    _deliver(step, buffer, event)

    [later] = model_env.budgets().values()
    assert later["first_seen"] == first["first_seen"]
    # Every write keeps the item the key's lifetime after it.
    assert int(later["expiration"]["N"]) >= int(first["expiration"]["N"]) + 3 * 86_400


def test_a_row_put_back_past_max_event_age_is_receives_exhausted(
    make_step, fake_api, model_env, buffer, redrive, clock, monkeypatch
):
    """The issue's case: a row the buffer queue gave up on, put back 3,848 s after the step
    first saw it, with max_event_age 1 h, is a ReceivesExhausted dead letter."""
    monkeypatch.setenv("MAX_EVENT_AGE_SECONDS", str(HOUR))
    monkeypatch.setenv("IDEMPOTENCY_EXPIRES_AFTER_SECONDS", str(8 * HOUR))  # the minimum
    fake_api.script = [500]
    step = make_step()
    event = fresh_event()
    _deliver(step, buffer, event)
    clock.advance(3_848)

    assert step.handle(redrive.batch(event), FakeLambdaContext()) == {"batchItemFailures": []}
    [message] = model_env.dead_letters()
    assert message["attributes"]["ERROR_CODE"] == "ReceivesExhausted"
    assert fake_api.request_count == 1


def test_a_copy_back_after_the_keys_memory_expired_is_refused_unbilled(
    make_step, fake_api, model_env, buffer, clock, monkeypatch
):
    """A re-enqueued copy carries its key's first-seen time; if it comes back after the
    key's memory lifetime and the budget is gone, answering could bill the key again."""
    monkeypatch.setenv("MAX_EVENT_AGE_SECONDS", "600")
    monkeypatch.setenv("IDEMPOTENCY_EXPIRES_AFTER_SECONDS", "25800")
    fake_api.script = [429]
    step = make_step()
    assert _deliver(step, buffer, fresh_event()) == {"batchItemFailures": []}
    [copy] = buffer.requeued()
    clock.advance(25_801)  # the budget item is past its expiration (DynamoDB keeps it a while)

    result = _deliver(step, buffer, json.loads(copy["MessageBody"]))

    assert result == {"batchItemFailures": []}
    assert fake_api.request_count == 1  # only the 429
    [message] = model_env.dead_letters()
    assert message["attributes"]["ERROR_CODE"] == "KeyMemoryExpired"
    assert "model_step_key" not in message["body"]  # the stamp is the runtime's own note


def test_a_lost_budget_item_restarts_from_the_stamped_first_seen(
    make_step, fake_api, model_env, buffer, clock
):
    fake_api.script = [429, 500]
    step = make_step()
    _deliver(step, buffer, fresh_event())
    [copy] = buffer.requeued()
    stamped = json.loads(copy["MessageBody"])["model_step_key"]["first_seen"]
    for record_id in model_env.budgets():
        model_env.dynamodb.delete_item(TableName=TABLE, Key={"id": {"S": record_id + "#budget"}})
    clock.advance(HOUR)

    _deliver(step, buffer, json.loads(copy["MessageBody"]))

    [budget] = model_env.budgets().values()
    assert float(budget["first_seen"]["N"]) == pytest.approx(stamped, abs=0.01)
    assert fake_api.request_count == 2


def test_a_lost_claim_on_an_expired_budget_never_revives_its_old_count(
    make_step, fake_api, model_env, buffer, clock, monkeypatch
):
    """Issue 31 (DaySchedules 101): the key's memory expired and the row came back (a new
    life). Its first claim was an ADD on the expired item, applied with a new expiration but
    its answer lost: the old life's attempts came back to life, and the new life was
    dead-lettered having had one request of its three. A claim now never writes an expired
    item; it starts the item again first."""
    monkeypatch.setenv("MAX_EVENT_AGE_SECONDS", "600")
    monkeypatch.setenv("IDEMPOTENCY_EXPIRES_AFTER_SECONDS", "25800")
    lost = {"left": 0}

    def keep(params, context, **_kwargs):
        context["test.params"] = params

    def after(http_response, context, **_kwargs):
        expression = str((context.get("test.params") or {}).get("UpdateExpression") or "")
        if lost["left"] and http_response.status_code == 200 and "ADD #attempts :one" in expression:
            lost["left"] = 0
            error = {"Error": {"Code": "RequestTimeout", "Message": "answer lost"}}
            raise ClientError(error, "UpdateItem")

    # Before the step makes its client: botocore copies a session's handlers into each one.
    hooks = boto3_session().events
    hooks.register("before-parameter-build.dynamodb.UpdateItem", keep)
    hooks.register("after-call.dynamodb.UpdateItem", after)
    try:
        fake_api.script = [200, 500, 500]
        step = make_step()
        event = fresh_event()
        assert _deliver(step, buffer, event) == {"batchItemFailures": []}  # life 0: 1 attempt
        clock.advance(25_801)  # the key's record and budget are past their expiration
        lost["left"] = 1
        for _ in range(4):
            _deliver(step, buffer, event)
    finally:
        hooks.unregister("before-parameter-build.dynamodb.UpdateItem", keep)
        hooks.unregister("after-call.dynamodb.UpdateItem", after)

    assert lost["left"] == 0
    # Life 1: the lost claim (spent, never sent), then two billed 500s: its budget of 3.
    assert fake_api.request_count == 1 + 2
    [message] = model_env.dead_letters()
    assert message["attributes"]["ERROR_CODE"] == "InternalServerError"
