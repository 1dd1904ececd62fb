"""Message Batches delivery (issue 19): rows staged, submitted as batches, collected on the
schedule tick. The real handler and Powertools, the real SDK over HTTP to the fake Messages
API's batch endpoints, moto for AWS."""

from __future__ import annotations

import json

import pytest

from constructs_lib.local_engine.message_batches import CreateFault
from tests.fixture_clients import fixture_client

from .batch_rows import (
    assert_every_key_ends_once,
    custom_id_for,
    memory_for_requests,
    rows,
    sqs_batch,
    stored,
    tick,
)
from .conftest import TABLE, FakeLambdaContext, ShiftedClock, boto3_session


def test_rows_go_as_one_batch_and_the_tick_stores_each_answer(
    make_step, fake_api, batch_env, buffer, outcomes, monkeypatch
):
    clock = ShiftedClock(monkeypatch)
    step = make_step(on_outcome=outcomes)
    events = rows(5)
    clock.shift(2)

    response = step.handle(sqs_batch(buffer, events), FakeLambdaContext())

    assert response == {"batchItemFailures": []}
    assert len(fake_api.batches.batches) == 1
    assert fake_api.request_count == 0
    assert outcomes.seen == []
    clock.shift(61)
    summary = tick(step)
    assert summary["model_step_batch"]["results"] == 5
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)
    [batch_id] = fake_api.batches.batches
    for event in events:
        outcome = stored(batch_env, step, event)
        assert (outcome.status, outcome.delivery, outcome.batch_id) == (
            "completed",
            "batch",
            batch_id,
        )


def test_the_collector_reads_rows_a_page_at_a_time_and_deletes_each_answered_row(
    make_step, fake_api, batch_env, buffer, outcomes, monkeypatch
):
    """Collection costs no GetItem a result: the rows of up to ROWS_PAGE result lines are
    read with one BatchGetItem. An answered row is deleted, its row data with it."""
    import model_step.batch_limits

    monkeypatch.setattr(model_step.batch_limits, "ROWS_PAGE", 4)
    clock = ShiftedClock(monkeypatch)
    events = rows(10)
    calls: list[str] = []
    counting = False

    def count(model, **_kwargs):
        if counting:
            calls.append(model.name)

    # Before the step's clients exist: a client copies the session's handlers when made.
    session = boto3_session()
    session.events.register("before-call.dynamodb", count)
    try:
        step = staged(make_step, buffer, clock, outcomes, events)
        clock.shift(61)
        counting = True
        assert tick(step)["model_step_batch"]["results"] == 10
        counting = False
    finally:
        session.events.unregister("before-call.dynamodb", count)

    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)
    # 10 lines in pages of 4, 4 and 2: one BatchGetItem each, besides the submission's own.
    assert calls.count("BatchGetItem") == 3 + 1
    assert calls.count("GetItem") < 10
    items = fixture_client("dynamodb").scan(TableName=TABLE, ConsistentRead=True)
    assert not [i for i in items["Items"] if "#batch-row#" in i["id"]["S"]]


def ticks_until_done(make_step, outcomes, clock, count: int = 8):
    step = make_step(on_outcome=outcomes)
    for _ in range(count):
        clock.shift(61)
        summary = tick(step)["model_step_batch"]
        if isinstance(summary, dict) and summary["open"] == 0:
            break
    return step


def staged(make_step, buffer, clock, outcomes, events):
    step = make_step(on_outcome=outcomes)
    clock.shift(2)
    assert step.handle(sqs_batch(buffer, events), FakeLambdaContext()) == {"batchItemFailures": []}
    return step


def test_duplicates_before_during_and_after_the_batch_make_no_request(
    make_step, fake_api, batch_env, buffer, outcomes, monkeypatch
):
    clock = ShiftedClock(monkeypatch)
    events = rows(3)
    # Before: two copies of every row in the first delivery.
    step = staged(make_step, buffer, clock, outcomes, events + [dict(e) for e in events])
    # During: copies while the batch is open.
    step.handle(sqs_batch(buffer, events), FakeLambdaContext())
    assert fake_api.batches.create_calls == 1
    [batch] = fake_api.batches.batches.values()
    assert len(batch.requests) == 3

    step = ticks_until_done(make_step, outcomes, clock)
    # After: copies replay the stored results.
    seen = len(outcomes.seen)
    step.handle(sqs_batch(buffer, events), FakeLambdaContext())

    assert fake_api.batches.create_calls == 1
    replays = outcomes.seen[seen:]
    assert [o["replayed"] for _, o in replays] == [True, True, True]
    assert all(o["model_requests"] == 0 for _, o in replays)
    assert_every_key_ends_once(batch_env, step, fake_api, events)


def test_a_key_answered_in_realtime_is_never_submitted(
    make_step, fake_api, batch_env, buffer, outcomes, monkeypatch
):
    clock = ShiftedClock(monkeypatch)
    [event] = rows(1)
    monkeypatch.setenv("MODEL_DELIVERY", "realtime")
    make_step().handle(sqs_batch(buffer, [event]), FakeLambdaContext())
    assert fake_api.request_count == 1
    monkeypatch.setenv("MODEL_DELIVERY", "batch")

    staged(make_step, buffer, clock, outcomes, [event])
    ticks_until_done(make_step, outcomes, clock)

    assert fake_api.batches.create_calls == 0
    assert fake_api.request_count == 1
    [(_, outcome)] = outcomes.seen
    assert outcome["replayed"] is True


def test_an_invalid_request_result_is_a_stored_coded_dead_letter_on_the_dlq(
    make_step, fake_api, batch_env, buffer, outcomes, monkeypatch
):
    clock = ShiftedClock(monkeypatch)
    events = rows(2)
    step = make_step()
    bad = custom_id_for(step, events[0])
    fake_api.batches.decide = lambda custom_id, params: (
        "invalid_request_error" if custom_id == bad else "succeeded"
    )

    staged(make_step, buffer, clock, outcomes, events)
    step = ticks_until_done(make_step, outcomes, clock)

    outcome = stored(batch_env, step, events[0])
    assert (outcome.status, outcome.error_code, outcome.delivery) == (
        "dead_lettered",
        "invalid_request_error",
        "batch",
    )
    [dead] = batch_env.dead_letters()
    assert dead["body"]["detail"] == events[0]["detail"]
    assert dead["attributes"]["ERROR_CODE"] == "invalid_request_error"
    assert fake_api.batches.create_calls == 1
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)


def _refusing_parser(text: str) -> dict:
    if text != "warm":
        raise ValueError("not the answer's JSON")
    return {"label": text}


@pytest.mark.parametrize(
    ("text", "stop_reason", "labels", "parser", "code"),
    [
        ("Lukewarm, probably", "end_turn", "hot,warm,cold", None, "LabelNotAllowed"),
        ("The answer is", "max_tokens", None, None, "MaxTokensReached"),
        ("", "refusal", None, None, "ModelRefused"),
        ("warm", "tool_use", None, None, "IncompleteAnswer"),
        ("{not json", "end_turn", None, _refusing_parser, "InvalidAnswer"),
    ],
)
def test_a_succeeded_result_meets_the_realtime_label_stop_reason_and_parser_checks(
    make_step, fake_api, batch_env, buffer, outcomes, monkeypatch, text, stop_reason, labels,
    parser, code,
):  # fmt: skip
    """A ``succeeded`` batch result is billed, so it is answered as a billed realtime answer
    is: a label outside ALLOWED_LABELS, an incomplete stop reason or a parser's refusal is
    a stored dead letter with the realtime code, on the DLQ, never a success and never sent
    again; the other row of the batch is labelled."""
    if labels:
        monkeypatch.setenv("ALLOWED_LABELS", labels)
    clock = ShiftedClock(monkeypatch)
    events = rows(2)
    bad = custom_id_for(make_step(), events[0])
    # The store asks for each request's result type, then for a succeeded one's Message.
    params_of: dict[str, dict] = {}
    decide = fake_api.batches.decide

    def remember(custom_id, params):
        params_of[custom_id] = params
        return decide(custom_id, params)

    def answer(params, request_id):
        if params is params_of[bad]:
            return fake_api._success_body(text, params, stop_reason)
        return fake_api._success_body("warm", params)

    fake_api.batches.decide, fake_api.batches.answer = remember, answer

    def parsing_step(**kwargs):
        return make_step(parse_answer=parser, **kwargs)

    staged(parsing_step, buffer, clock, outcomes, events)
    step = ticks_until_done(parsing_step, outcomes, clock)
    # A duplicate of both rows after the batch replays the stored outcomes.
    step.handle(sqs_batch(buffer, events), FakeLambdaContext())

    refused = stored(batch_env, step, events[0])
    assert (refused.status, refused.error_code, refused.delivery) == (
        "dead_lettered",
        code,
        "batch",
    )
    assert refused.batch_id in fake_api.batches.batches
    labelled = stored(batch_env, step, events[1])
    assert (labelled.status, labelled.delivery) == ("completed", "batch")
    [dead] = batch_env.dead_letters()
    assert dead["body"]["detail"] == events[0]["detail"]
    assert dead["attributes"]["ERROR_CODE"] == code
    assert fake_api.batches.create_calls == 1
    assert fake_api.batches.billed == 2
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)


def test_an_api_error_result_is_resubmitted_within_the_attempt_budget(
    make_step, fake_api, batch_env, buffer, outcomes, monkeypatch
):
    clock = ShiftedClock(monkeypatch)
    events = rows(2)
    step = make_step()
    flaky, broken = custom_id_for(step, events[0]), custom_id_for(step, events[1])
    seen: dict[str, int] = {}

    def decide(custom_id, params):
        seen[custom_id] = seen.get(custom_id, 0) + 1
        if custom_id == broken or (custom_id == flaky and seen[custom_id] == 1):
            return "api_error"
        return "succeeded"

    fake_api.batches.decide = decide

    staged(make_step, buffer, clock, outcomes, events)
    step = ticks_until_done(make_step, outcomes, clock, count=12)

    assert stored(batch_env, step, events[0]).status == "completed"
    broken_outcome = stored(batch_env, step, events[1])
    assert (broken_outcome.status, broken_outcome.error_code) == ("dead_lettered", "api_error")
    assert seen == {flaky: 2, broken: 3}  # MAX_ATTEMPTS=3 sends of the broken key, no more
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)


@pytest.mark.parametrize("kind", ["expired", "canceled"])
def test_expired_and_canceled_results_are_not_billed_and_go_again(
    make_step, fake_api, batch_env, buffer, outcomes, monkeypatch, kind
):
    clock = ShiftedClock(monkeypatch)
    events = rows(3)
    sent: dict[str, int] = {}

    def decide(custom_id, params):
        sent[custom_id] = sent.get(custom_id, 0) + 1
        return kind if sent[custom_id] <= 2 else "succeeded"

    fake_api.batches.decide = decide

    staged(make_step, buffer, clock, outcomes, events)
    step = ticks_until_done(make_step, outcomes, clock, count=12)

    assert all(count == 3 for count in sent.values()), sent
    assert fake_api.batches.result_counts[kind] == 6
    assert fake_api.batches.billed == 3
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)
    # Not billed: the two sends that ended unserved gave their attempts back.
    for item in batch_env.budgets().values():
        assert int(item["attempts"]["N"]) == 1


def test_a_row_expired_past_max_event_age_is_dead_lettered(
    make_step, fake_api, batch_env, buffer, outcomes, monkeypatch
):
    monkeypatch.setenv("MAX_EVENT_AGE_SECONDS", "120")
    clock = ShiftedClock(monkeypatch)
    events = rows(1)
    fake_api.batches.decide = lambda custom_id, params: "expired"

    staged(make_step, buffer, clock, outcomes, events)
    step = ticks_until_done(make_step, outcomes, clock, count=10)

    outcome = stored(batch_env, step, events[0])
    assert (outcome.status, outcome.error_code) == ("dead_lettered", "BatchExpired")
    assert fake_api.batches.billed == 0
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)


def test_a_batch_open_past_its_24_hours_is_canceled_and_its_rows_go_again(
    make_step, fake_api, batch_env, buffer, outcomes, monkeypatch
):
    monkeypatch.setenv("MAX_EVENT_AGE_SECONDS", "200000")
    # The key's memory outlives max_event_age plus a batch's hold (model_step.lifetime).
    monkeypatch.setenv("IDEMPOTENCY_EXPIRES_AFTER_SECONDS", "400000")
    clock = ShiftedClock(monkeypatch)
    events = rows(2)
    fake_api.batches.processing_delay = 10**9
    fake_api.batches.lifetime_seconds = 10**9  # stuck open: the API never ends it
    fake_api.batches.cancel_survivor_rate = 0.0  # no request was running when canceled

    step = staged(make_step, buffer, clock, outcomes, events)
    clock.shift(23 * 3600)
    summary = tick(step)["model_step_batch"]
    assert (summary["collected"], summary["results"], summary["open"]) == (0, 0, 1)
    first = next(iter(fake_api.batches.batches.values()))
    assert first.cancel_initiated_at is None
    fake_api.batches.processing_delay = 60
    clock.shift(1.6 * 3600)
    tick(step)
    assert first.cancel_initiated_at is not None
    step = ticks_until_done(make_step, outcomes, clock)

    assert fake_api.batches.result_counts["canceled"] == 2
    assert len(fake_api.batches.batches) == 2
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)


def test_a_413_on_create_splits_the_batch_and_loses_no_row(
    make_step, fake_api, batch_env, buffer, outcomes, monkeypatch
):
    clock = ShiftedClock(monkeypatch)
    events = rows(5)
    fake_api.batches.max_requests = 2

    staged(make_step, buffer, clock, outcomes, events)
    step = ticks_until_done(make_step, outcomes, clock, count=12)

    assert all(len(b.requests) <= 2 for b in fake_api.batches.batches.values())
    assert sum(len(b.requests) for b in fake_api.batches.batches.values()) == 5
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)


def test_a_429_on_create_waits_and_sends_once(
    make_step, fake_api, batch_env, buffer, outcomes, monkeypatch
):
    clock = ShiftedClock(monkeypatch)
    events = rows(3)
    fake_api.batches.create_faults = [429, 429]

    staged(make_step, buffer, clock, outcomes, events)
    step = ticks_until_done(make_step, outcomes, clock)

    assert fake_api.batches.create_calls == 3
    assert len(fake_api.batches.batches) == 1
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)


def test_a_request_the_create_rejects_is_isolated_and_dead_lettered(
    make_step, fake_api, batch_env, buffer, outcomes, monkeypatch
):
    clock = ShiftedClock(monkeypatch)
    events = rows(4)
    step = make_step()
    poisoned = custom_id_for(step, events[2])
    real_create = fake_api.batches.create

    def create(raw: bytes, workspace: str):
        if poisoned.encode() in raw:
            fake_api.batches.fault("create")  # counted as a create call
            return 400, None, CreateFault(status=400)
        return real_create(raw, workspace)

    fake_api.batches.create = create

    staged(make_step, buffer, clock, outcomes, events)
    step = ticks_until_done(make_step, outcomes, clock, count=12)

    outcome = stored(batch_env, step, events[2])
    assert (outcome.status, outcome.error_code) == ("dead_lettered", "BadRequestError")
    assert len(batch_env.dead_letters()) == 1
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)


def test_no_row_value_or_model_text_is_logged(
    make_step, fake_api, batch_env, buffer, outcomes, monkeypatch, log_capture
):
    clock = ShiftedClock(monkeypatch)
    fake_api.text = "warm-secret-answer"
    events = rows(2)
    staged(make_step, buffer, clock, outcomes, events)
    ticks_until_done(make_step, outcomes, clock)

    logged = log_capture.getvalue()
    assert "the row waits in a Message Batch" in logged  # the capture saw the step's logs
    assert "batch collected" in logged
    assert "ada1@example.com" not in logged
    assert "Analytical Engines" not in logged
    assert "warm-secret-answer" not in logged


def test_the_tick_reports_the_oldest_open_batch_age_and_the_batches_open(
    make_step, fake_api, batch_env, buffer, outcomes, monkeypatch, capsys
):
    clock = ShiftedClock(monkeypatch)
    fake_api.batches.processing_delay = 10**6
    step = staged(make_step, buffer, clock, outcomes, rows(1))
    capsys.readouterr()
    clock.shift(3600)

    tick(step)

    metrics = [
        json.loads(line)
        for line in capsys.readouterr().out.splitlines()
        if "OldestOpenBatchAgeSeconds" in line
    ]
    assert metrics and metrics[-1]["OldestOpenBatchAgeSeconds"][0] >= 3600
    assert metrics[-1]["OpenBatches"][0] == 1  # the dashboard's count of open batches


def test_a_submission_is_sent_by_the_last_tick_before_max_wait_and_not_earlier(
    make_step, fake_api, batch_env, buffer, outcomes, monkeypatch
):
    monkeypatch.setenv("BATCH_MAX_WAIT_SECONDS", "300")
    clock = ShiftedClock(monkeypatch)
    step = make_step(on_outcome=outcomes)
    step.handle(sqs_batch(buffer, rows(2)), FakeLambdaContext())
    assert fake_api.batches.create_calls == 0  # waited 0 s of 300

    clock.shift(200)
    tick(step)
    assert fake_api.batches.create_calls == 0  # the next tick (260 s) is still in time
    clock.shift(45)
    tick(step)
    assert fake_api.batches.create_calls == 1  # the next one (305 s) would be late


def test_max_requests_rows_are_sent_at_once(make_step, fake_api, batch_env, buffer, monkeypatch):
    monkeypatch.setenv("BATCH_MAX_WAIT_SECONDS", "3600")
    monkeypatch.setenv("BATCH_MAX_REQUESTS", "3")
    step = make_step()

    step.handle(sqs_batch(buffer, rows(3)), FakeLambdaContext())

    assert fake_api.batches.create_calls == 1


def test_each_batch_result_is_published_once_on_the_result_bus_with_its_batch_id(
    make_step, fake_api, batch_env, buffer, outcomes, monkeypatch
):
    from .test_result_events import SOURCE, ResultBus

    bus = ResultBus()
    monkeypatch.setenv("RESULT_BUS_ARN", bus.arn)
    monkeypatch.setenv("RESULT_EVENT_SOURCE", SOURCE)
    monkeypatch.setenv("ALLOWED_LABELS", "hot,warm,cold")
    clock = ShiftedClock(monkeypatch)
    events = rows(3)
    staged(make_step, buffer, clock, outcomes, events)
    ticks_until_done(make_step, outcomes, clock)
    make_step().handle(sqs_batch(buffer, events), FakeLambdaContext())  # duplicates after

    published = bus.received()

    assert len(published) == 3
    [batch_id] = fake_api.batches.batches
    assert {e["detail"]["result"]["batch_id"] for e in published} == {batch_id}
    assert {e["detail"]["result"]["delivery"] for e in published} == {"batch"}


def test_pending_submissions_are_merged_into_one_batch_when_due(
    make_step, fake_api, batch_env, buffer, outcomes, monkeypatch
):
    monkeypatch.setenv("BATCH_MAX_WAIT_SECONDS", "300")
    monkeypatch.setenv("BATCH_MAX_REQUESTS", "5")
    clock = ShiftedClock(monkeypatch)
    events = rows(6)
    step = make_step(on_outcome=outcomes)
    for start in (0, 2, 4):  # three small buffer deliveries, none due yet
        step.handle(sqs_batch(buffer, events[start : start + 2]), FakeLambdaContext())
    assert fake_api.batches.create_calls == 0

    clock.shift(250)
    step = ticks_until_done(make_step, outcomes, clock)

    sizes = sorted(len(b.requests) for b in fake_api.batches.batches.values())
    assert sizes == [2, 4]  # merged up to BATCH_MAX_REQUESTS=5: 2+2, then the last 2
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)


def test_a_merged_submission_longer_than_one_item_lists_its_rows_in_parts(
    make_step, fake_api, batch_env, buffer, outcomes, monkeypatch
):
    """``max_requests`` above 10,000: a batch's custom_ids are more than one table item
    holds (400 KB), so the submission lists them in part items (here 3 ids a part) and is
    still sent as ONE batch of every row."""
    import model_step.batch_store

    monkeypatch.setattr(model_step.batch_store, "IDS_PER_ITEM", 3)
    monkeypatch.setenv("BATCH_MAX_WAIT_SECONDS", "300")
    monkeypatch.setenv("BATCH_MAX_REQUESTS", "20")
    clock = ShiftedClock(monkeypatch)
    events = rows(8)
    step = make_step(on_outcome=outcomes)
    for start in (0, 4):  # two buffer deliveries of 4, merged into one of 8 at the tick
        step.handle(sqs_batch(buffer, events[start : start + 4]), FakeLambdaContext())
    assert fake_api.batches.create_calls == 0

    clock.shift(250)
    step = ticks_until_done(make_step, outcomes, clock)

    [batch] = fake_api.batches.batches.values()
    assert len(batch.requests) == 8
    assert sorted(custom_id for custom_id, _ in batch.requests) == sorted(
        custom_id_for(step, event) for event in events
    )
    items = fixture_client("dynamodb").scan(TableName=TABLE, ConsistentRead=True)
    parts: dict[str, int] = {}
    for item in items["Items"]:
        if "#part#" in item["id"]["S"]:
            submission = item["id"]["S"].split("#part#")[0]
            parts[submission] = parts.get(submission, 0) + 1
    # Each delivery's 4 rows in 2 parts (3 + 1), the merged 8 in 3 (3 + 3 + 2).
    assert sorted(parts.values()) == [2, 2, 3]
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)


def test_rows_are_staged_into_submissions_whose_create_body_the_memory_can_send(
    make_step, fake_api, batch_env, buffer, outcomes, monkeypatch
):
    """A long system prompt is repeated in every request: 10,000 requests of a 20 KB
    prompt are a 200 MB create body, more than a 512 MB function holds while it sends it.
    So an invocation closes a submission when the next row would take its body past
    ``create_bytes_limit`` (from ``memory_limit_in_mb``) and stages on into a new one, and
    each is sent as its own batch: no row is moved, none is sent twice."""
    import model_step.batch

    clock = ShiftedClock(monkeypatch)
    events = rows(7)
    step = make_step(on_outcome=outcomes)
    small = FakeLambdaContext(**memory_for_requests(step, monkeypatch, 3.5))
    limit = model_step.batch.create_bytes_limit(small)
    moves: list[dict] = []

    def record_move(params, **_kwargs):
        if "submission = :new" in params.get("UpdateExpression", ""):
            moves.append(params)

    session = boto3_session()
    session.events.register("provide-client-params.dynamodb.UpdateItem", record_move)
    try:
        step = make_step(on_outcome=outcomes)
        clock.shift(2)
        assert step.handle(sqs_batch(buffer, events), small) == {"batchItemFailures": []}
    finally:
        session.events.unregister("provide-client-params.dynamodb.UpdateItem", record_move)

    batches = list(fake_api.batches.batches.values())
    assert [len(b.requests) for b in batches] == [3, 3, 1]
    for batch in batches:
        body = sum(len(json.dumps({"custom_id": c, "params": p})) for c, p in batch.requests)
        assert body <= limit
    assert moves == []
    clock.shift(61)
    tick(step, memory_limit_in_mb=1)  # the same 1 MB as `small`
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)


def test_the_create_body_limit_follows_the_function_memory():
    from model_step.batch_limits import MAX_CREATE_BYTES, create_bytes_limit

    assert create_bytes_limit(FakeLambdaContext(memory_limit_in_mb=512)) == (512 - 160) * (
        2**20 // 3
    )
    assert create_bytes_limit(FakeLambdaContext(memory_limit_in_mb=1024)) == MAX_CREATE_BYTES
    assert create_bytes_limit(FakeLambdaContext(memory_limit_in_mb=128)) == 2**20
    assert create_bytes_limit(object()) == MAX_CREATE_BYTES


def test_a_pending_submission_too_big_for_the_senders_memory_is_split_to_fit(
    make_step, fake_api, batch_env, buffer, outcomes, monkeypatch
):
    """Staged by a function with more memory (a deploy lowered it, or rows staged before
    this version): the sender splits the submission into as many parts as its memory
    needs, at once, instead of halving it over several ticks."""

    monkeypatch.setenv("BATCH_MAX_WAIT_SECONDS", "300")  # staged, not yet due
    clock = ShiftedClock(monkeypatch)
    events = rows(7)
    step = staged(make_step, buffer, clock, outcomes, events)
    assert fake_api.batches.batches == {}
    small = memory_for_requests(step, monkeypatch, 2.5)

    clock.shift(301)
    tick(step, **small)  # splits into 4 parts, due at once
    tick(step, **small)  # sends them

    assert sorted(len(b.requests) for b in fake_api.batches.batches.values()) == [1, 2, 2, 2]
    for _ in range(3):
        clock.shift(61)
        tick(step, **small)
    assert_every_key_ends_once(batch_env, step, fake_api, events, outcomes)
