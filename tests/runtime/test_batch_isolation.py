"""Issue 33, items 2-5: one bad batch or line never holds up the others, waiting rows keep
the realtime contract, and each batch is deleted at the provider once its results are stored.

The real handler and Powertools, the real SDK over HTTP to the fake Messages API's batch
endpoints (the strict emulator: results in a new order on every read), moto for AWS."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from .batch_rows import rows, sqs_batch, stored, tick
from .conftest import SECRET_NAME, FakeLambdaContext, ShiftedClock, boto3_session
from .test_batch_delivery import staged, ticks_until_done

HOUR = 3600
ROTATED_KEY = "sk-ant-the-rotated-key-0123456"


@pytest.fixture
def clock(monkeypatch) -> ShiftedClock:
    return ShiftedClock(monkeypatch)


def emitted(capsys, metric: str) -> list[float]:
    """Every value of ``metric`` the step printed as EMF since the last read."""
    return [
        json.loads(line)[metric][0]
        for line in capsys.readouterr().out.splitlines()
        if f'"{metric}"' in line and '"_aws"' in line
    ]


def attempts(aws) -> list[int]:
    """The attempts claimed, per key (the budget items)."""
    return [int(item["attempts"]["N"]) for item in aws.budgets().values()]


def assert_each_key_ends_once(aws, step, fake_api, events, *, most_billed: int) -> None:
    """Per key: a stored label or coded dead letter, and at most ``most_billed`` billed
    requests (a batch lost after it ran may have billed one)."""
    for event in events:
        outcome = stored(aws, step, event)
        assert outcome.status in ("completed", "dead_lettered"), (event["detail"], outcome)
        if outcome.status == "dead_lettered":
            assert outcome.error_code
    billed = Counter(fake_api.batches.billed_by_custom_id)
    assert all(count <= most_billed for count in billed.values()), billed
    assert fake_api.request_count == 0


def two_batches(make_step, buffer, clock, outcomes, fake_api):
    """Two deliveries, sent as two batches: ``(events of the first, of the second, the
    first batch's id, the second's)``."""
    first, second = rows(2), rows(2, start=3)
    staged(make_step, buffer, clock, outcomes, first)
    staged(make_step, buffer, clock, outcomes, second)
    ids = list(fake_api.batches.batches)
    assert len(ids) == 2
    return first, second, ids[0], ids[1]


# -- one bad batch --------------------------------------------------------------------------
def test_a_batch_the_api_does_not_know_holds_up_no_other_and_goes_again_after_its_bound(
    make_step, fake_api, batch_env, buffer, outcomes, clock, capsys, monkeypatch
):
    """A batch deleted at the provider by someone else (or whose key moved to another
    Workspace) answers 404: the other batch is collected on the same tick, the open-batch
    age keeps growing, and once the bound passes its rows go again within their budget
    (the lost batch's attempt stays spent: it may have been billed). BatchesLost says so."""
    import model_step.batch_limits

    first, second, lost, fine = two_batches(make_step, buffer, clock, outcomes, fake_api)
    clock.shift(61)
    fake_api.batches.batches[lost].deleted = True  # ended, then deleted by someone else
    capsys.readouterr()

    summary = tick(make_step(on_outcome=outcomes))["model_step_batch"]

    assert summary["collected"] == 1 and summary["lost"] == 0
    assert all(stored(batch_env, make_step(), e).status == "completed" for e in second)
    assert all(stored(batch_env, make_step(), e).status is None for e in first)
    assert emitted(capsys, "OldestOpenBatchAgeSeconds")[-1] >= 61
    clock.shift(model_step.batch_limits.LOST_UNKNOWN_SECONDS - 60)
    tick(make_step(on_outcome=outcomes))
    assert emitted(capsys, "OldestOpenBatchAgeSeconds")[-1] >= 6 * HOUR, "it is not open"
    clock.shift(120)
    summary = tick(make_step(on_outcome=outcomes))["model_step_batch"]
    assert summary["lost"] == 1
    assert emitted(capsys, "BatchesLost") == [1]

    step = ticks_until_done(make_step, outcomes, clock)

    assert_each_key_ends_once(batch_env, step, fake_api, first + second, most_billed=2)
    assert {stored(batch_env, step, e).batch_id for e in first} - {lost, fine} != set()
    assert sorted(attempts(batch_env)) == [1, 1, 2, 2]


def test_a_lost_batch_past_max_event_age_is_a_batch_lost_dead_letter(
    make_step, fake_api, batch_env, buffer, outcomes, clock, monkeypatch
):
    """A batch still open 36 h after its creation, even once canceled, is lost: past
    MAX_EVENT_AGE_SECONDS (24 h by default) its rows are dead-lettered BatchLost, on the
    DLQ, never left waiting for a batch that will not end."""
    # The key's memory outlives the batch horizon, as the construct derives it.
    monkeypatch.setenv("IDEMPOTENCY_EXPIRES_AFTER_SECONDS", str(4 * 24 * HOUR))
    fake_api.batches.processing_delay = 10**9
    fake_api.batches.lifetime_seconds = 10**9
    fake_api.batches.cancel_delay_seconds = 10**9  # canceling forever
    events = rows(2)
    staged(make_step, buffer, clock, outcomes, events)
    [batch] = fake_api.batches.batches.values()
    clock.shift(25 * HOUR)
    tick(make_step(on_outcome=outcomes))
    assert batch.cancel_initiated_at is not None

    clock.shift(11 * HOUR)
    summary = tick(make_step(on_outcome=outcomes))["model_step_batch"]

    assert summary["lost"] == 1 and summary["open"] == 0
    codes = [d["attributes"]["ERROR_CODE"] for d in batch_env.dead_letters()]
    assert codes == ["BatchLost", "BatchLost"]
    assert_each_key_ends_once(batch_env, make_step(), fake_api, events, most_billed=1)


@pytest.mark.parametrize("status", [429, 500, 529])
def test_a_transient_error_on_one_batch_holds_up_no_other(
    make_step, fake_api, batch_env, buffer, outcomes, clock, status
):
    first, second, failing, _fine = two_batches(make_step, buffer, clock, outcomes, fake_api)
    faults = {"left": 1}

    def hook(operation, batch_id):
        if operation == "retrieve" and batch_id == failing and faults["left"]:
            faults["left"] -= 1
            return status
        return None

    fake_api.batches.fault_hook = hook
    clock.shift(61)

    summary = tick(make_step(on_outcome=outcomes))["model_step_batch"]

    assert (summary["failed_calls"], summary["collected"]) == (1, 1)
    assert all(stored(batch_env, make_step(), e).status == "completed" for e in second)
    step = ticks_until_done(make_step, outcomes, clock)
    assert_each_key_ends_once(batch_env, step, fake_api, first + second, most_billed=1)


def test_the_oldest_open_batch_age_is_true_when_the_api_fails(
    make_step, fake_api, batch_env, buffer, outcomes, clock, capsys
):
    staged(make_step, buffer, clock, outcomes, rows(1))
    fake_api.batches.fault_hook = lambda operation, batch_id: 500
    capsys.readouterr()
    clock.shift(25 * HOUR)

    tick(make_step(on_outcome=outcomes))

    assert emitted(capsys, "OldestOpenBatchAgeSeconds")[-1] >= 25 * HOUR


# -- one bad line ---------------------------------------------------------------------------
def test_an_on_outcome_that_fails_for_one_key_holds_up_no_other_and_ends_on_the_dlq(
    make_step, fake_api, batch_env, buffer, outcomes, clock
):
    """``on_outcome`` raises for one key, every time: the rest of the stream is stored and
    notified; the key's result (stored) is read again on later ticks, and after
    MAX_APPLY_FAILURES its event goes to the DLQ as BatchResultUnapplied (alarmed)."""
    events = rows(4)
    bad = events[1]["detail"]["row_number"]

    def hook(event, outcome):
        if event["detail"]["row_number"] == bad:
            raise RuntimeError("the recorder is down for this row")
        outcomes(event, outcome)

    staged(lambda **kw: make_step(on_outcome=hook), buffer, clock, outcomes, events)
    clock.shift(61)
    tick(make_step(on_outcome=hook))
    assert sorted(e["detail"]["row_number"] for e, _ in outcomes.seen) == [1, 3, 4]

    ticks_until_done(lambda **kw: make_step(on_outcome=hook), outcomes, clock, count=8)

    [dead] = batch_env.dead_letters()
    assert dead["attributes"]["ERROR_CODE"] == "BatchResultUnapplied"
    assert dead["body"]["detail"]["row_number"] == bad
    assert stored(batch_env, make_step(), events[1]).status == "completed"
    assert_each_key_ends_once(batch_env, make_step(), fake_api, events, most_billed=1)


def test_a_parser_asking_for_a_retry_sends_that_key_again_and_the_others_are_stored(
    make_step, fake_api, batch_env, buffer, outcomes, clock
):
    from model_step import RetryableAnswerError

    events = rows(3)
    asked = Counter()

    def parse(text: str) -> dict:
        asked["calls"] += 1
        if asked["calls"] == 2:  # the second line of the first read, whichever key
            raise RetryableAnswerError("the answer needs another try")
        return {"label": text}

    def parsing(**kwargs):
        return make_step(parse_answer=parse, **kwargs)

    staged(parsing, buffer, clock, outcomes, events)
    step = ticks_until_done(parsing, outcomes, clock)

    assert len(fake_api.batches.batches) == 2  # the retried key went in a second batch
    assert_each_key_ends_once(batch_env, step, fake_api, events, most_billed=2)
    assert sorted(attempts(batch_env)) == [1, 1, 2]
    assert all(stored(batch_env, step, e).status == "completed" for e in events)


# -- waiting rows keep the realtime contract ---------------------------------------------
def test_a_different_payload_under_a_waiting_key_is_a_payload_mismatch_dead_letter(
    make_step, fake_api, batch_env, buffer, outcomes, clock
):
    fake_api.batches.processing_delay = 10**6
    [event] = rows(1)
    staged(make_step, buffer, clock, outcomes, [event])
    changed = json.loads(json.dumps(event))
    changed["detail"]["company"] = "Another Company Ltd"

    make_step(on_outcome=outcomes).handle(sqs_batch(buffer, [changed]), FakeLambdaContext())

    [dead] = batch_env.dead_letters()
    assert dead["attributes"]["ERROR_CODE"] == "IdempotencyPayloadMismatch"
    assert dead["body"]["detail"]["company"] == "Another Company Ltd"
    [batch] = fake_api.batches.batches.values()
    assert len(batch.requests) == 1  # the waiting row is still the one that is sent


def test_a_batch_adopted_by_another_submission_spends_no_second_attempt(
    make_step, fake_api, batch_env, buffer, outcomes, clock
):
    """Submission A's create is lost before the API saw it; B's, with as many rows, goes
    through in the same minutes. A's reconciliation adopts B's batch (nothing tells them
    apart), which answers none of A's rows: they go again without a second claim."""
    first, second = rows(2), rows(2, start=3)
    fake_api.batches.create_faults = ["disconnect"]
    fake_api.batches.processing_delay = 600  # still open, so listed, when A reconciles
    staged(make_step, buffer, clock, outcomes, first)
    staged(make_step, buffer, clock, outcomes, second)
    assert len(fake_api.batches.batches) == 1

    step = ticks_until_done(make_step, outcomes, clock, count=30)

    assert_each_key_ends_once(batch_env, step, fake_api, first + second, most_billed=1)
    assert attempts(batch_env) == [1, 1, 1, 1]
    [record] = [
        item
        for item in batch_env.idempotency_items()
        if item["id"]["S"].endswith("#batch#msgbatch_fake_000001")
    ]
    assert record["adopted"]["BOOL"] and record["created"]["BOOL"]  # A adopted B's batch


def test_a_401_in_the_collector_reads_the_rotated_secret_once(
    make_step, fake_api, batch_env, buffer, outcomes, clock
):
    """The API key was rotated while the batch ran: the old key is refused (401), the
    collector re-reads the secret once, and collects with the new key."""
    from .conftest import SECRET_VALUE

    events = rows(2)
    reads: list[str] = []
    session = boto3_session()
    count = lambda model, **_: reads.append(model.name)  # noqa: E731
    # Before the step's clients exist: a client copies the session's handlers when made.
    session.events.register("before-call.secretsmanager", count)
    try:
        step = staged(make_step, buffer, clock, outcomes, events)  # created with the old key
        before = len(reads)
        secrets = session.client("secretsmanager")
        secrets.put_secret_value(SecretId=SECRET_NAME, SecretString=ROTATED_KEY)
        fake_api.batches.revoked_keys.add(SECRET_VALUE)
        clock.shift(61)
        summary = tick(step)["model_step_batch"]
    finally:
        session.events.unregister("before-call.secretsmanager", count)

    assert summary["collected"] == 1 and summary["failed_calls"] == 0
    assert reads[before:].count("GetSecretValue") == 1  # re-read once, after the 401
    assert fake_api.batches.calls["retrieve"] == 2  # refused once, then with the new key
    assert all(stored(batch_env, step, e).status == "completed" for e in events)


# -- delete at the provider ----------------------------------------------------------------
def test_each_batch_is_deleted_at_the_provider_once_its_results_are_stored(
    make_step, fake_api, batch_env, buffer, outcomes, clock
):
    """The delete comes after every result is stored (no row waits any more), and one
    that fails is tried again by a later tick."""
    events = rows(3)
    staged(make_step, buffer, clock, outcomes, events)
    [batch] = fake_api.batches.batches.values()
    waiting_at_delete: list[int] = []

    def hook(operation, batch_id):
        if operation != "delete":
            return None
        items = batch_env.dynamodb.scan(TableName="idempotency", ConsistentRead=True)["Items"]
        waiting_at_delete.append(sum("#batch-row#" in i["id"]["S"] for i in items))
        return 500 if len(waiting_at_delete) <= 2 else None  # this tick's two tries

    fake_api.batches.fault_hook = hook
    clock.shift(61)
    first = tick(make_step(on_outcome=outcomes))["model_step_batch"]
    assert (first["collected"], first["deleted"], batch.deleted) == (1, 0, False)

    clock.shift(61)
    second = tick(make_step(on_outcome=outcomes))["model_step_batch"]

    assert (second["deleted"], batch.deleted) == (1, True)
    assert waiting_at_delete == [0, 0, 0]
    assert_each_key_ends_once(batch_env, make_step(), fake_api, events, most_billed=1)


# -- invocations at once, and redriven copies -------------------------------------------------
def test_two_invocations_at_once_on_one_step_each_send_their_own_rows(
    make_step, fake_api, batch_env, buffer, outcomes, clock, monkeypatch
):
    """One container runs one invocation at a time, but a local run (or a test) runs several
    on one ``ModelStep`` at once: each keeps its own submission. The late one's row is
    written before the early one flushes and owned after it; shared, the early flush took
    the submission without it, and the row was owned by a submission that never listed it:
    never sent, never answered."""
    import threading

    early, late = rows(3), rows(1, start=4)
    step = make_step(on_outcome=outcomes)
    staging = step._components().batch.staging
    real_own = staging._own
    flushed = threading.Event()

    def own(submission, custom_id, size):
        if threading.current_thread().name == "late":
            flushed.wait(30)  # written, not yet owned: the early invocation flushes now
        real_own(submission, custom_id, size)

    monkeypatch.setattr(staging, "_own", own)
    clock.shift(2)
    late_delivery = sqs_batch(buffer, late)
    early_delivery = sqs_batch(buffer, early)
    answers: dict[str, dict] = {}
    thread = threading.Thread(
        target=lambda: answers.update(late=step.handle(late_delivery, FakeLambdaContext())),
        name="late",
    )
    thread.start()
    answers["early"] = step.handle(early_delivery, FakeLambdaContext())
    flushed.set()
    thread.join(60)

    assert answers == {"early": {"batchItemFailures": []}, "late": {"batchItemFailures": []}}
    step = ticks_until_done(make_step, outcomes, clock)
    assert_each_key_ends_once(batch_env, step, fake_api, early + late, most_billed=1)
    assert all(stored(batch_env, step, e).status == "completed" for e in early + late)


def test_a_redriven_copy_of_a_waiting_row_is_a_duplicate_not_a_dead_letter(
    make_step, fake_api, batch_env, buffer, redrive, outcomes, clock
):
    """SQS gave up on a copy (its deliveries took too long) while the key's row waits in a
    batch: under batch delivery the copy is staged as any copy is, so it is a duplicate,
    and the batch's answer is stored (it was a ReceivesExhausted dead letter, and the
    billed answer then replayed it)."""
    [event] = rows(1)
    fake_api.batches.processing_delay = 600
    staged(make_step, buffer, clock, outcomes, [event])

    step = make_step(on_outcome=outcomes)
    responses = [step.handle(redrive.batch(event), FakeLambdaContext()) for _ in range(3)]

    assert responses == [{"batchItemFailures": []}] * 3
    assert batch_env.dead_letters() == []
    assert buffer.requeued() == []  # acknowledged as duplicates, never bounced back
    clock.shift(600)
    step = ticks_until_done(make_step, outcomes, clock)
    assert stored(batch_env, step, event).status == "completed"
    assert_each_key_ends_once(batch_env, step, fake_api, [event], most_billed=1)
