"""Issue 19: every crash point around a Message Batch, proven with an injected kill.

Each test drives the real handler (Powertools, the SDK over HTTP to the fake Messages API's
batch endpoints, moto), kills the invocation at one point (``LambdaKilled``, a
``BaseException``: nothing after it runs, as after a real kill), starts a NEW step (a new
container) and ticks until every key is done. Then, per key: at most one billed request
(succeeded results over every batch), and a stored label or a stored coded dead letter.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import pytest

from .batch_rows import (
    PAST_GRACE,
    LambdaKilled,
    assert_every_key_ends_once,
    memory_for_requests,
    rows,
    sqs_batch,
    tick,
)
from .conftest import FakeLambdaContext, ShiftedClock, boto3_session, log_records


@pytest.fixture
def clock(monkeypatch) -> ShiftedClock:
    return ShiftedClock(monkeypatch)


@pytest.fixture
def kill_create(monkeypatch) -> Iterator[dict]:
    """``state["when"] = "before" | "after"``: the next ``messages.batches.create`` dies
    before its request leaves, or after its answer arrived (before the runtime sees it)."""
    state: dict = {"when": None}
    real = httpx2.HTTPTransport.handle_request

    def handle_request(transport, request):
        is_create = request.method == "POST" and request.url.path == "/v1/messages/batches"
        when = state["when"] if is_create else None
        if when == "before":
            state["when"] = None
            raise LambdaKilled("killed before create was sent")
        response = real(transport, request)
        if when == "after":
            state["when"] = None
            response.read()
            raise LambdaKilled("killed after create answered")
        return response

    monkeypatch.setattr(httpx2.HTTPTransport, "handle_request", handle_request)
    yield state


@pytest.fixture
def kill_aws_call():
    """``arm(operation, match)``: the next call of ``operation`` whose body contains
    ``match`` dies before it is made."""
    armed: list[tuple[str, str]] = []
    events = boto3_session().events

    def before_send(request, **kwargs):
        operation = request.headers.get("X-Amz-Target", b"")
        operation = operation.decode() if isinstance(operation, bytes) else str(operation)
        body = request.body or b""
        body = body if isinstance(body, bytes) else body.encode()
        for fault in list(armed):
            if operation.endswith("." + fault["operation"]) and fault["match"].encode() in body:
                if fault["skip"] > 0:
                    fault["skip"] -= 1
                    continue
                armed.remove(fault)
                raise LambdaKilled(f"killed before {fault['operation']}")

    def arm(operation: str, match: str = "", skip: int = 0) -> None:
        armed.append({"operation": operation, "match": match, "skip": skip})

    events.register("before-send.dynamodb", before_send)
    yield arm
    events.unregister("before-send.dynamodb", before_send)


def run_until_done(make_step, clock, outcomes, ticks: int = 6) -> object:
    """A new container ticking (each a minute, past every grace) until nothing is open."""
    step = make_step(on_outcome=outcomes)
    for _ in range(ticks):
        clock.shift(PAST_GRACE)
        summary = tick(step)["model_step_batch"]
        if isinstance(summary, dict) and summary["open"] == 0:
            return step
    return step


def stage(make_step, buffer, clock, outcomes, count: int = 4):
    step = make_step(on_outcome=outcomes)
    events = rows(count)
    clock.shift(2)
    return step, events, sqs_batch(buffer, events)


def test_an_adopted_batch_open_past_24_hours_is_alarmed_never_canceled(
    make_step, fake_api, batch_env, buffer, outcomes, clock, monkeypatch, capsys, log_capture
):
    """A batch found by reconciliation may be another workload's on the same API key: when
    it stays open past 24.5 h, the tick leaves it alone and keeps reporting its age (the
    alarm fires); once it ends, its results are collected as any batch's."""
    import json

    monkeypatch.setenv("MAX_EVENT_AGE_SECONDS", "200000")
    # The key's memory outlives max_event_age plus a batch's hold (model_step.lifetime).
    monkeypatch.setenv("IDEMPOTENCY_EXPIRES_AFTER_SECONDS", "400000")
    step, events, delivery = stage(make_step, buffer, clock, outcomes, count=2)
    fake_api.batches.processing_delay = 10**9
    fake_api.batches.lifetime_seconds = 10**9  # stuck open: the API never ends it
    fake_api.batches.create_faults = ["disconnect_after_create"]  # created, answer lost
    step.handle(delivery, FakeLambdaContext())
    clock.shift(PAST_GRACE)
    tick(make_step(on_outcome=outcomes))  # reconciled: the batch is adopted
    [batch] = fake_api.batches.batches.values()

    clock.shift(24.6 * 3600)
    capsys.readouterr()
    tick(make_step(on_outcome=outcomes))

    assert batch.cancel_initiated_at is None
    # Read on the step's own logger at the level log_capture sets: a Powertools Logger of
    # the service keeps the level of the first one made in the process, so a bare handler
    # saw nothing in a worker where an earlier test had made it at a higher level.
    warned = [record["message"] for record in log_records(log_capture)]
    assert "adopted batch open past its 24 h: not canceled" in warned
    printed = capsys.readouterr().out  # the EMF metrics
    ages = [
        json.loads(line)["OldestOpenBatchAgeSeconds"][0]
        for line in printed.splitlines()
        if "OldestOpenBatchAgeSeconds" in line
    ]
    assert ages and ages[-1] >= 86_400  # OldestOpenBatchAlarm's threshold
    batch.finish_times = [batch.created_at] * len(batch.requests)  # it ends at last: its
    batch.delay = 0.0  # results are collected like any batch's
    step = run_until_done(make_step, clock, outcomes)
    assert fake_api.batches.create_calls == 1  # the lost create's batch answered every row
    assert fake_api.batches.result_counts == {"succeeded": 2}
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)


def test_a_kill_before_create_is_sent_submits_once_after_the_grace(
    make_step, fake_api, batch_env, buffer, outcomes, clock, kill_create
):
    step, events, delivery = stage(make_step, buffer, clock, outcomes)
    kill_create["when"] = "before"

    with pytest.raises(LambdaKilled):
        step.handle(delivery, FakeLambdaContext())
    # The messages were not deleted: SQS hands them over again; the rows are already staged.
    step = make_step(on_outcome=outcomes)
    assert step.handle(delivery, FakeLambdaContext()) == {"batchItemFailures": []}
    assert fake_api.batches.create_calls == 0

    step = run_until_done(make_step, clock, outcomes)

    assert len(fake_api.batches.batches) == 1
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)


def test_a_kill_after_create_answered_adopts_the_batch_instead_of_a_second_one(
    make_step, fake_api, batch_env, buffer, outcomes, clock, kill_create
):
    step, events, delivery = stage(make_step, buffer, clock, outcomes)
    kill_create["when"] = "after"

    with pytest.raises(LambdaKilled):
        step.handle(delivery, FakeLambdaContext())
    step = make_step(on_outcome=outcomes)
    step.handle(delivery, FakeLambdaContext())  # the redelivery: duplicates, no request

    step = run_until_done(make_step, clock, outcomes)

    assert len(fake_api.batches.batches) == 1, "the created batch was adopted, not repeated"
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)


@pytest.mark.parametrize("fault", ["disconnect", "disconnect_after_create", "error_after_create"])
def test_a_create_that_fails_during_the_call_is_reconciled_before_any_resend(
    make_step, fake_api, batch_env, buffer, outcomes, clock, fault
):
    step, events, delivery = stage(make_step, buffer, clock, outcomes)
    fake_api.batches.create_faults = [fault]

    assert step.handle(delivery, FakeLambdaContext()) == {"batchItemFailures": []}
    assert fake_api.batches.create_calls == 1
    # Before the grace has passed nothing is sent again, whatever the tick.
    clock.shift(60)
    tick(make_step(on_outcome=outcomes))
    assert fake_api.batches.create_calls == 1

    step = run_until_done(make_step, clock, outcomes)

    created_by_fault = 0 if fault == "disconnect" else 1
    assert len(fake_api.batches.batches) == 1
    assert fake_api.batches.create_calls == 1 + (1 - created_by_fault)
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)


def test_a_kill_before_the_submission_is_written_loses_no_row(
    make_step, fake_api, batch_env, buffer, outcomes, clock, kill_aws_call
):
    step, events, delivery = stage(make_step, buffer, clock, outcomes)
    kill_aws_call("PutItem", "batch-submission")

    with pytest.raises(LambdaKilled):
        step.handle(delivery, FakeLambdaContext())
    # The rows are staged under a submission that never existed: the redelivery adopts them.
    step = make_step(on_outcome=outcomes)
    assert step.handle(delivery, FakeLambdaContext()) == {"batchItemFailures": []}

    step = run_until_done(make_step, clock, outcomes)

    assert len(fake_api.batches.batches) == 1
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)


def test_a_kill_between_the_submissions_of_one_invocation_sends_each_row_once(
    make_step, fake_api, batch_env, buffer, outcomes, clock, kill_aws_call, monkeypatch
):
    """The invocation's memory sends about three requests a batch, so its 7 rows are staged
    into three submissions; the kill comes after the first is written and before the
    second. The redelivery finds the first one's rows owned (no request) and adopts the
    rest, whose owners were never written; each row is sent in one batch."""
    step, events, delivery = stage(make_step, buffer, clock, outcomes, count=7)
    small = memory_for_requests(step, monkeypatch, 3.5)
    kill_aws_call("PutItem", "batch-submission", skip=1)

    with pytest.raises(LambdaKilled):
        step.handle(delivery, FakeLambdaContext(**small))
    step = make_step(on_outcome=outcomes)
    assert step.handle(delivery, FakeLambdaContext(**small)) == {"batchItemFailures": []}

    step = make_step(on_outcome=outcomes)
    for _ in range(6):
        clock.shift(PAST_GRACE)
        if tick(step, **small)["model_step_batch"]["open"] == 0:
            break

    sent = [c for b in fake_api.batches.batches.values() for c, _ in b.requests]
    assert len(sent) == len(set(sent)) == 7
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)


def test_a_kill_before_the_batch_id_is_recorded_adopts_the_batch(
    make_step, fake_api, batch_env, buffer, outcomes, clock, kill_aws_call
):
    step, events, delivery = stage(make_step, buffer, clock, outcomes)
    kill_aws_call("UpdateItem", "msgbatch_")  # recording the created batch's id

    with pytest.raises(LambdaKilled):
        step.handle(delivery, FakeLambdaContext())

    step = run_until_done(make_step, clock, outcomes)

    assert len(fake_api.batches.batches) == 1
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)


def test_a_kill_between_storing_a_result_and_on_outcome_resumes_without_a_repeat(
    make_step, fake_api, batch_env, buffer, outcomes, clock
):
    step, events, delivery = stage(make_step, buffer, clock, outcomes, count=6)
    step.handle(delivery, FakeLambdaContext())
    calls = {"n": 0}

    def dies_on_the_third(event, outcome):
        calls["n"] += 1
        if calls["n"] == 3:
            raise LambdaKilled("killed between the stored result and on_outcome")
        outcomes(event, outcome)

    clock.shift(61)
    with pytest.raises(LambdaKilled):
        tick(make_step(on_outcome=dies_on_the_third))
    assert len(outcomes.seen) == 2

    step = run_until_done(make_step, clock, outcomes)

    assert len(fake_api.batches.batches) == 1
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)


def test_a_kill_halfway_through_the_results_stream_resumes_by_custom_id(
    make_step, fake_api, batch_env, buffer, outcomes, clock, kill_aws_call
):
    """The fourth row's delete dies: three rows are done, the fourth is stored and
    notified but still staged. The next tick reads the results again, in another order
    (the API promises none), and applies each by custom_id: the three done rows are gone
    (a no-op), the fourth replays its stored record, the rest are applied once."""
    step, events, delivery = stage(make_step, buffer, clock, outcomes, count=8)
    step.handle(delivery, FakeLambdaContext())
    kill_aws_call("DeleteItem", "#batch-row#", skip=3)
    clock.shift(61)

    with pytest.raises(LambdaKilled):
        tick(make_step(on_outcome=outcomes))
    assert len(outcomes.seen) == 4

    step = run_until_done(make_step, clock, outcomes)

    assert fake_api.batches.calls["results"] == 2
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes, exactly_once=False)
    stored_once = [e for e, o in outcomes.seen if not o["replayed"]]
    assert len(stored_once) == 8 + 1  # the fourth is notified again, as a realtime retry


def test_a_results_stream_that_drops_halfway_resumes_on_the_next_tick(
    make_step, fake_api, batch_env, buffer, outcomes, clock
):
    step, events, delivery = stage(make_step, buffer, clock, outcomes, count=7)
    step.handle(delivery, FakeLambdaContext())
    fake_api.batches.results_drop_after = 5
    clock.shift(61)

    summary = tick(make_step(on_outcome=outcomes))["model_step_batch"]

    assert summary["failed_calls"] == 1  # recorded on the batch, not raised from the tick
    assert 0 < len(outcomes.seen) < len(events)
    step = run_until_done(make_step, clock, outcomes)
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)


def test_a_kill_halfway_through_a_merge_sends_each_row_once(
    make_step, fake_api, batch_env, buffer, outcomes, clock, kill_aws_call, monkeypatch
):
    monkeypatch.setenv("BATCH_MAX_WAIT_SECONDS", "300")
    events = rows(6)
    step = make_step(on_outcome=outcomes)
    for start in (0, 3):
        step.handle(sqs_batch(buffer, events[start : start + 3]), FakeLambdaContext())
    # The merge moves rows one UpdateItem each; the fourth move dies.
    kill_aws_call("UpdateItem", "submission = :new", skip=3)
    clock.shift(250)

    with pytest.raises(LambdaKilled):
        tick(make_step(on_outcome=outcomes))

    step = run_until_done(make_step, clock, outcomes)
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)
    assert sum(len(b.requests) for b in fake_api.batches.batches.values()) == 6


def test_a_kill_while_a_submissions_parts_are_written_sends_each_row_once(
    make_step, fake_api, batch_env, buffer, outcomes, clock, kill_aws_call, monkeypatch
):
    """A submission longer than one item is written index, parts, item: a kill after its
    first part leaves an index entry without an item, whose rows (owner absent) the
    redelivery adopts."""
    import model_step.batch_store

    monkeypatch.setattr(model_step.batch_store, "IDS_PER_ITEM", 2)
    events = rows(5)
    delivery = sqs_batch(buffer, events)
    kill_aws_call("PutItem", "#part#", skip=1)
    clock.shift(2)

    with pytest.raises(LambdaKilled):
        make_step(on_outcome=outcomes).handle(delivery, FakeLambdaContext())
    assert fake_api.batches.create_calls == 0
    make_step(on_outcome=outcomes).handle(delivery, FakeLambdaContext())  # the redelivery

    step = run_until_done(make_step, clock, outcomes)
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)
    assert sorted(len(b.requests) for b in fake_api.batches.batches.values()) == [5]


def test_a_staging_that_fails_after_its_row_was_written_is_still_sent(
    make_step, fake_api, batch_env, buffer, outcomes, clock, monkeypatch
):
    # The second row's claim answers an error after its row was staged: the row is written
    # under the invocation's submission, and the submission the other rows go out in must
    # list it, or its redelivery (finding it owned by a submission that exists) never sends
    # it. The same holds when the release of the key's record fails.
    import model_step.budget

    real_claim = model_step.budget.AttemptBudget.claim
    calls = {"n": 0}

    def claim(budget):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("the claim's UpdateItem answered an error")
        return real_claim(budget)

    monkeypatch.setattr(model_step.budget.AttemptBudget, "claim", claim)
    step, events, delivery = stage(make_step, buffer, clock, outcomes, count=3)

    answer = step.handle(delivery, FakeLambdaContext())
    assert len(answer["batchItemFailures"]) == 1
    # The failed row's message comes back: a duplicate of a row its submission sends.
    failed = answer["batchItemFailures"][0]["itemIdentifier"]
    again = {"Records": [r for r in delivery["Records"] if r["messageId"] == failed]}
    assert make_step(on_outcome=outcomes).handle(again, FakeLambdaContext()) == {
        "batchItemFailures": []
    }

    step = run_until_done(make_step, clock, outcomes)

    assert sum(len(b.requests) for b in fake_api.batches.batches.values()) == 3
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)
