"""The buffer-queue (SQS) path of ``ModelStep.handle`` (issues 8.2 and 15).

The buffer queue is a real moto queue: records are sent to it, received with their real
receipt handles and attributes, and handed to the handler in Lambda's SQS event shape. What
the runtime sends back to SQS is observed with a botocore ``before-parameter-build`` hook.
"""

from __future__ import annotations

import json
import threading

import pytest

from tests.fakes import Reply

from . import kill_points
from .conftest import (
    FakeLambdaContext,
    ShiftedClock,
    boto3_session,
    fresh_event,
    make_event,
    prospect_detail,
)
from .kill_points import HeldFirstRequest, stopped_clock
from .test_combined_faults import LambdaKilled, run


def test_an_sqs_batch_is_answered_with_batch_item_failures(make_step, fake_api, buffer, outcomes):
    step = make_step(on_outcome=outcomes)
    event = fresh_event()

    response = step.handle(buffer.batch(event), FakeLambdaContext())
    duplicate = step.handle(buffer.batch(event), FakeLambdaContext())

    assert response == {"batchItemFailures": []}
    assert duplicate == {"batchItemFailures": []}
    assert fake_api.request_count == 1
    [(first_event, first), (_, second)] = outcomes.seen
    assert first_event == event
    assert first["status"] == "completed"
    assert (first["replayed"], first["model_requests"], first["rate_limited"]) == (False, 1, 0)
    # The default model thinks first: its thinking tokens are billed as output (issue 32).
    assert first["usage"] == fake_api.last_usage
    assert first["usage"]["output_tokens"] > 3
    assert first["result"]["answer"] == "warm"
    assert first["error_code"] is None
    assert (second["replayed"], second["model_requests"]) == (True, 0)
    assert second["usage"] == {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    assert second["result"] == first["result"]


@pytest.mark.parametrize(
    ("headers", "low", "high"),
    [
        ({"retry-after-ms": "2500"}, 3, 3),
        ({"retry-after": "7"}, 7, 7),
        ({}, 3, 5),  # no header: 5 s x 2^0 with jitter in [0.5, 1]
    ],
)
@pytest.mark.parametrize("status", [429, 529])
def test_a_rate_limit_re_enqueues_a_delayed_copy_and_is_no_attempt(
    make_step, fake_api, model_env, buffer, outcomes, capsys, status, headers, low, high
):
    fake_api.script = [Reply(status=status, headers=headers)]
    step = make_step(on_outcome=outcomes)
    event = fresh_event()

    response = step.handle(buffer.batch(event, receive_count=2), FakeLambdaContext())

    assert response == {"batchItemFailures": []}  # the original counts as processed
    [copy] = buffer.requeued()
    body = json.loads(copy["MessageBody"])
    # The copy is the event plus the key's first-seen time (model_step.lifetime), so it can
    # never restart the key's memory from now.
    stamp = body.pop("model_step_key")
    assert body == event
    assert stamp["record"].startswith("model-step#")
    [budget_item] = model_env.budgets().values()
    assert stamp["first_seen"] == pytest.approx(float(budget_item["first_seen"]["N"]))
    assert low <= copy["DelaySeconds"] <= high
    # The copy carries nothing of this message: the key's budget is on the key.
    assert "MessageAttributes" not in copy
    assert model_env.dead_letters() == []
    assert model_env.idempotency_items() == []
    # The rate limit is no attempt: the claim was given back, the wait counted.
    [budget] = model_env.budgets().values()
    assert (budget["attempts"]["N"], budget["rate_limited"]["N"]) == ("0", "1")
    [(_, outcome)] = outcomes.seen
    assert outcome["status"] == "rate_limited"
    assert (outcome["model_requests"], outcome["rate_limited"], outcome["result"]) == (0, 1, None)
    emf = [json.loads(x) for x in capsys.readouterr().out.splitlines() if '"_aws"' in x]
    assert [{k for k in m if k[0].isupper()} for m in emf] == [{"RateLimited"}]


def test_a_rate_limited_row_past_its_max_event_age_is_a_stored_dead_letter(
    make_step, fake_api, model_env, buffer, outcomes, monkeypatch
):
    monkeypatch.setenv("MAX_EVENT_AGE_SECONDS", "3600")
    fake_api.script = [Reply(status=429, headers={"retry-after": "60"})] * 2
    step = make_step(on_outcome=outcomes)
    event = fresh_event()
    clock = ShiftedClock(monkeypatch)

    first = step.handle(buffer.batch(event), FakeLambdaContext())  # first seen now: it waits
    clock.shift(3_570)  # 3570 s after the step first saw it + 60 s wait > 3600 s
    response = step.handle(buffer.batch(event), FakeLambdaContext())
    step.handle(buffer.batch(event), FakeLambdaContext())  # a duplicate replays it

    assert first == response == {"batchItemFailures": []}
    assert len(buffer.requeued()) == 1
    assert fake_api.request_count == 2
    [message] = model_env.dead_letters()
    assert message["body"] == event
    assert message["attributes"]["ERROR_CODE"] == "RateLimitExhausted"
    assert message["attributes"]["REQUEST_ID"] == fake_api.last_request.request_id
    assert "still rate limited" in message["attributes"]["ERROR_MESSAGE"]
    statuses = [o["status"] for _, o in outcomes.seen]
    assert statuses == ["rate_limited", "dead_lettered", "dead_lettered"]
    assert outcomes.seen[1][1]["rate_limited"] == 1
    assert outcomes.seen[2][1]["replayed"] is True


def test_a_transient_failure_below_max_attempts_is_a_spaced_batch_item_failure(
    make_step, fake_api, model_env, buffer, outcomes
):
    fake_api.script = [500, 500]
    step = make_step(on_outcome=outcomes)
    event = fresh_event()
    first = buffer.batch(event)
    step.handle(first, FakeLambdaContext())
    batch = buffer.batch(event)  # another copy of the event: the same key, the same budget

    response = step.handle(batch, FakeLambdaContext())

    message_id = batch["Records"][0]["messageId"]
    assert response == {"batchItemFailures": [{"itemIdentifier": message_id}]}
    first_change, change = buffer.visibility_changes()
    assert first_change["VisibilityTimeout"] == 60  # attempt 1: Lambda's 1-minute spacing
    assert change["VisibilityTimeout"] == 120  # attempt 2 of the KEY: 2 minutes
    assert change["ReceiptHandle"] == batch["Records"][0]["receiptHandle"]
    assert model_env.idempotency_items() == []
    [budget] = model_env.budgets().values()
    assert (budget["attempts"]["N"], budget["last_error"]["S"]) == ("2", "InternalServerError")
    (_, outcome) = outcomes.seen[-1]
    assert (outcome["status"], outcome["error_code"]) == ("retry", "InternalServerError")
    assert outcome["model_requests"] == 1


@pytest.mark.parametrize(
    ("entry", "error_code"),
    [(500, "InternalServerError"), ("disconnect", "APIConnectionError")],
)
def test_the_last_transient_attempt_is_dead_lettered_by_the_runtime(
    make_step, fake_api, model_env, buffer, outcomes, entry, error_code
):
    fake_api.script = [entry] * 3
    step = make_step(on_outcome=outcomes)
    event = fresh_event()
    for _ in range(2):  # two attempts of the key fail, each on its own copy of the event
        step.handle(buffer.batch(event), FakeLambdaContext())

    response = step.handle(buffer.batch(event), FakeLambdaContext())
    again = step.handle(buffer.batch(event), FakeLambdaContext())

    assert response == again == {"batchItemFailures": []}
    assert fake_api.request_count == 3
    [message] = model_env.dead_letters()
    assert message["attributes"]["ERROR_CODE"] == error_code
    assert outcomes.seen[2][1]["status"] == "dead_lettered"
    assert outcomes.seen[2][1]["result"]["error_code"] == error_code


def test_a_concurrent_duplicate_waits_for_the_holder_and_is_no_attempt(
    make_step, fake_api, model_env, buffer, outcomes, monkeypatch
):
    # The holder's request is held until the duplicate has returned, so the duplicate always
    # meets a live lock; the clock stands still, so the wait it computes does not shrink with
    # the real time the machine takes between the holder's save and the duplicate's check.
    # The holder's request may wait minutes of real time (its timeout and deadline).
    monkeypatch.setenv("MODEL_TIMEOUT_SECONDS", "600")
    held = fake_api.script = HeldFirstRequest()
    step = make_step(on_outcome=outcomes)
    event = fresh_event()
    holder_context = FakeLambdaContext(remaining_millis=600_000)
    with stopped_clock():
        holder = threading.Thread(target=step.handle, args=(event, holder_context), daemon=True)
        holder.start()
        try:
            # The holder has the lock once its request reached the model.
            assert held.reached.wait(timeout=60)
            response = step.handle(buffer.batch(event), FakeLambdaContext())
        finally:
            held.release.set()
            holder.join(timeout=60)
    assert not holder.is_alive()

    assert response == {"batchItemFailures": []}
    [copy] = buffer.requeued()
    # Until the holder's in-progress expiry (its Lambda deadline, 600 s here).
    assert 597 <= copy["DelaySeconds"] <= 602
    assert fake_api.request_count == 1
    statuses = [(o["status"], o["error_code"]) for _, o in outcomes.seen]
    assert ("retry", "IdempotencyAlreadyInProgressError") in statuses


def test_an_on_outcome_error_is_a_batch_item_failure_and_the_retry_replays(
    make_step, fake_api, buffer
):
    calls = []

    def flaky(event, outcome):
        calls.append(outcome["replayed"])
        if len(calls) == 1:
            raise RuntimeError("accounting table throttled")

    step = make_step(on_outcome=flaky)
    batch = buffer.batch(fresh_event())
    first = step.handle(batch, FakeLambdaContext())
    second = step.handle(batch, FakeLambdaContext())

    assert first == {"batchItemFailures": [{"itemIdentifier": batch["Records"][0]["messageId"]}]}
    assert second == {"batchItemFailures": []}
    assert calls == [False, True]
    assert fake_api.request_count == 1


def test_an_on_outcome_error_raises_on_the_direct_path(make_step, fake_api):
    def broken(event, outcome):
        raise RuntimeError("accounting table throttled")

    with pytest.raises(RuntimeError, match="throttled"):
        make_step(on_outcome=broken).handle(make_event(), FakeLambdaContext())


def test_on_outcome_on_the_direct_path_sees_every_status(make_step, fake_api, outcomes):
    fake_api.script = [200, 400, 529]
    step = make_step(on_outcome=outcomes)
    step.handle(make_event(), FakeLambdaContext())
    step.handle(make_event(), FakeLambdaContext())
    step.handle(make_event(prospect_detail(row_number=2)), FakeLambdaContext())
    with pytest.raises(Exception):  # noqa: B017 (OverloadedError: Lambda retries it)
        step.handle(make_event(prospect_detail(row_number=3)), FakeLambdaContext())

    summary = [
        (o["status"], o["replayed"], o["model_requests"], o["rate_limited"], o["error_code"])
        for _, o in outcomes.seen
    ]
    assert summary == [
        ("completed", False, 1, 0, None),
        ("completed", True, 0, 0, None),
        ("dead_lettered", False, 1, 0, "BadRequestError"),
        ("rate_limited", False, 0, 1, "OverloadedError"),
    ]


def test_a_body_that_is_not_an_event_is_dead_lettered(make_step, fake_api, model_env, buffer):
    response = make_step().handle(buffer.batch("not json {"), FakeLambdaContext())

    assert response == {"batchItemFailures": []}
    [message] = model_env.sqs.receive_message(
        QueueUrl=model_env.queue_url, MessageAttributeNames=["All"]
    )["Messages"]
    assert message["Body"] == "not json {"
    assert message["MessageAttributes"]["ERROR_CODE"]["StringValue"] == "InvalidMessageBody"
    assert fake_api.request_count == 0


def test_a_bare_event_with_records_like_fields_stays_on_the_direct_path(make_step, fake_api):
    event = make_event(prospect_detail(Records=[{"eventSource": "aws:sqs"}]))
    assert make_step().handle(event, FakeLambdaContext())["status"] == "completed"


def test_without_buffer_queue_url_the_queue_is_found_from_the_records_arn(
    make_step, fake_api, buffer, monkeypatch
):
    monkeypatch.delenv("BUFFER_QUEUE_URL")
    fake_api.script = [Reply(status=429, headers={"retry-after": "5"})]

    response = make_step().handle(buffer.batch(fresh_event()), FakeLambdaContext())

    assert response == {"batchItemFailures": []}
    [copy] = buffer.requeued()
    assert copy["DelaySeconds"] == 5


def test_x_should_retry_decides_whether_a_rate_limited_row_waits(
    make_step, fake_api, model_env, buffer, outcomes
):
    fake_api.script = [
        Reply(status=429, headers={"x-should-retry": "true", "retry-after": "2"}),
        Reply(status=529, headers={"x-should-retry": "false"}),
    ]
    step = make_step(on_outcome=outcomes)

    step.handle(buffer.batch(fresh_event(row_number=1)), FakeLambdaContext())
    step.handle(buffer.batch(fresh_event(row_number=2)), FakeLambdaContext())

    [copy] = buffer.requeued()  # the first waits...
    assert json.loads(copy["MessageBody"])["detail"]["row_number"] == 1
    [message] = model_env.dead_letters()  # ...the second is told not to retry
    assert message["attributes"]["ERROR_CODE"] == "OverloadedError"
    summary = [(o["status"], o["model_requests"], o["rate_limited"]) for _, o in outcomes.seen]
    assert summary == [("rate_limited", 0, 1), ("dead_lettered", 0, 1)]


def test_a_duplicate_waits_for_the_held_hand_off_lock_not_the_keys_expired_one(
    make_step, fake_api, model_env, buffer, outcomes
):
    """Issue 31 (DaySchedules 84): a delivery killed right after its DLQ send leaves the
    hand-off record's lock held; the key's own record is COMPLETED, its old in-progress
    deadline long past. A duplicate met the hand-off's lock but waited on the key's
    record's deadline (one second), so it came back every second until the holder's
    deadline: over a hundred invocations. It waits for the lock it met."""
    sends = {"to_dlq": False, "kill": 0}

    def note(params, **_kwargs):
        sends["to_dlq"] = params.get("QueueUrl") == model_env.queue_url

    def after(**_kwargs):
        if sends["to_dlq"] and sends["kill"]:
            sends["kill"] -= 1
            raise LambdaKilled("killed after the DLQ send")

    hooks = boto3_session().events
    hooks.register("before-parameter-build.sqs.SendMessage", note)
    hooks.register("after-call.sqs.SendMessage", after)
    try:
        # A stopped clock: the hand-off holder's deadline is exactly 26 s away below, however
        # long the machine takes between the kills and the duplicate's check.
        with stopped_clock() as clock:
            fake_api.script = [400]
            step = make_step(on_outcome=outcomes)
            event = fresh_event()
            sends["kill"] = 1
            assert run(step, buffer.batch(event)) == "killed"  # key's lock until +30 s
            clock.advance(kill_points.PAST_THE_DEADLINE)
            sends["kill"] = 1
            assert run(step, buffer.batch(event)) == "killed"  # hand-off's lock: +61 s
            clock.advance(4)
            assert step.handle(buffer.batch(event), FakeLambdaContext()) == {
                "batchItemFailures": []
            }
    finally:
        hooks.unregister("before-parameter-build.sqs.SendMessage", note)
        hooks.unregister("after-call.sqs.SendMessage", after)

    [copy] = buffer.requeued()
    assert 25 <= copy["DelaySeconds"] <= 28  # the hand-off holder's deadline, 26 s away
    assert fake_api.request_count == 1
    assert outcomes.seen[-1][1]["error_code"] == "IdempotencyAlreadyInProgressError"
