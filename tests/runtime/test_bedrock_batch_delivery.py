"""Bedrock batch inference (issue 37): rows staged, sent as model invocation jobs, collected
by recordId on the schedule tick. The real handler and Powertools, boto3 over HTTP to the
local Bedrock control plane (SigV4 checked), moto for DynamoDB, SQS and S3."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import pytest
from model_step.bedrock_batch_wire import custom_id_of_record, record_id_of

from constructs_lib.local_engine.bedrock_batch_jobs import LocalBedrockBatchJobs
from constructs_lib.model_prices import PRICE_TABLE
from tests.fakes import FakeBedrockRuntime
from tests.fixture_clients import fixture_client

from .batch_rows import (
    PAST_GRACE,
    LambdaKilled,
    custom_id_for,
    outcome_in,
    rows,
    sqs_batch,
    stored,
    stored_by_key,
    tick,
)
from .conftest import FakeLambdaContext, ShiftedClock

BUCKET = "step-batch-bucket"
ROLE = "arn:aws:iam::123456789012:role/step-batch-role"
MODEL = "us.anthropic.claude-haiku-5-5"
USAGE = {"input_tokens": 1000, "output_tokens": 10}


def answer(model_input: dict, record_id: str, model_id: str) -> dict:
    return {
        "id": f"msg_{record_id[:12]}",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-5-5",
        "content": [{"type": "text", "text": "warm"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": dict(USAGE),
    }


@pytest.fixture
def jobs(model_env, buffer, monkeypatch) -> Iterator[LocalBedrockBatchJobs]:
    """Batch delivery on Bedrock: the step's bucket in moto, the local control plane on the
    runtime's clock (jobs end 60 s after submission; a minimum of 1 record unless a test
    says otherwise)."""
    import model_step.batch_limits
    import model_step.clock

    monkeypatch.setattr(model_step.batch_limits, "BEDROCK_MIN_REQUESTS", 1)
    s3 = fixture_client("s3")
    s3.create_bucket(Bucket=BUCKET)
    with LocalBedrockBatchJobs(
        lambda: s3,
        answer,
        clock=lambda: model_step.clock.now(),
        processing_delay=60,
        min_records=1,
    ) as server:
        for name, value in {
            "MODEL_PROVIDER": "bedrock",
            "MODEL_ID": MODEL,
            "MODEL_DELIVERY": "batch",
            "BATCH_MAX_WAIT_SECONDS": "1",
            "BATCH_BUCKET_NAME": BUCKET,
            "BATCH_ROLE_ARN": ROLE,
            "AWS_ENDPOINT_URL_BEDROCK": server.base_url,
        }.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("ANTHROPIC_API_KEY_SECRET_ARN", raising=False)
        yield server


def staged(make_step, buffer, clock, outcomes, events):
    step = make_step(on_outcome=outcomes)
    clock.shift(2)
    assert step.handle(sqs_batch(buffer, events), FakeLambdaContext()) == {"batchItemFailures": []}
    return step


def ticks_until_done(step, clock, count: int = 8) -> None:
    for _ in range(count):
        clock.shift(61)
        summary = tick(step)["model_step_batch"]
        if isinstance(summary, dict) and summary["open"] == 0:
            return


def assert_each_key_ends_once(aws, step, jobs, events, outcomes) -> None:
    """Per key: at most one billed record over every job, a stored label or coded dead
    letter, one terminal on_outcome; and the outcomes' model_requests are the billed ones."""
    billed = jobs.billed_by_record
    assert all(count <= 1 for count in billed.values()), billed
    stored_now = stored_by_key(aws, step)
    for event in events:
        outcome = outcome_in(stored_now, event)
        assert outcome.status in ("completed", "dead_lettered"), (event["detail"], outcome)
    terminal = Counter(
        e["detail"]["row_number"]
        for e, o in outcomes.seen
        if o["status"] in ("completed", "dead_lettered") and not o["replayed"]
    )
    assert all(terminal[e["detail"]["row_number"]] == 1 for e in events), terminal
    assert sum(o["model_requests"] for _, o in outcomes.seen) == jobs.billed


def s3_keys() -> list[str]:
    listed = fixture_client("s3").list_objects_v2(Bucket=BUCKET)
    return [item["Key"] for item in listed.get("Contents", [])]


def test_record_ids_are_alphanumeric_and_map_back_to_their_custom_ids():
    custom_id = "kAbc-_0123456789abcdefghijklmnopqrstuv"[:33]

    record_id = record_id_of(custom_id)

    assert record_id.isalnum()
    assert custom_id_of_record(record_id) == custom_id


def test_rows_go_as_one_job_and_the_tick_stores_each_answer_by_record_id(
    make_step, jobs, buffer, model_env, outcomes, monkeypatch
):
    clock = ShiftedClock(monkeypatch)
    events = rows(5)

    step = staged(make_step, buffer, clock, outcomes, events)

    [job] = jobs.jobs.values()
    assert (job.model_id, job.role_arn, job.timeout_hours) == (MODEL, ROLE, 24)
    assert job.token is not None and job.input_uri.startswith(f"s3://{BUCKET}/bedrock-batch/input/")
    clock.shift(61)
    assert tick(step)["model_step_batch"]["results"] == 5
    assert_each_key_ends_once(model_env, step, jobs, events, outcomes)
    stored_now = stored_by_key(model_env, step)
    for event in events:
        outcome = outcome_in(stored_now, event)
        assert (outcome.status, outcome.delivery, outcome.batch_id) == (
            "completed",
            "batch",
            job.arn,
        )


def test_a_collected_job_leaves_no_input_or_output_in_the_bucket(
    make_step, jobs, buffer, model_env, outcomes, monkeypatch
):
    clock = ShiftedClock(monkeypatch)
    step = staged(make_step, buffer, clock, outcomes, rows(3))
    clock.shift(61)
    tick(step)
    assert s3_keys() == []


def test_a_result_is_priced_at_the_catalogues_batch_price(
    make_step, jobs, buffer, model_env, outcomes, monkeypatch
):
    clock = ShiftedClock(monkeypatch)
    step = staged(make_step, buffer, clock, outcomes, rows(1))
    clock.shift(61)
    tick(step)

    [(_, outcome)] = outcomes.seen
    price = PRICE_TABLE["claude-haiku-5-5"]
    expected = (1000 * price.input + 10 * price.output) / 1e6 * (1 - price.batch_discount)
    assert outcome["cost_usd"] == pytest.approx(expected)


@pytest.mark.parametrize(
    ("code", "status", "error_code", "billed"),
    [
        (400, "dead_lettered", "ValidationException", 0),
        (424, "dead_lettered", "ModelErrorException", 0),
        (500, "completed", None, 1),
        (429, "completed", None, 1),
    ],
)
def test_a_partially_completed_jobs_record_errors_dead_letter_4xx_and_retry_the_rest(
    make_step, jobs, buffer, model_env, outcomes, monkeypatch, code, status, error_code, billed
):
    clock = ShiftedClock(monkeypatch)
    events = rows(2)
    step = make_step()
    bad = record_id_of(custom_id_for(step, events[0]))
    seen: Counter[str] = Counter()

    def decide(record_id, model_input):
        seen[record_id] += 1
        return code if record_id == bad and seen[record_id] == 1 else "succeeded"

    jobs.decide = decide
    step = staged(make_step, buffer, clock, outcomes, events)
    ticks_until_done(step, clock)

    assert [j.status for j in jobs.jobs.values()][0] == "PartiallyCompleted"
    outcome = stored(model_env, step, events[0])
    assert (outcome.status, outcome.error_code) == (status, error_code)
    assert jobs.billed_by_record[bad] == billed
    assert len(jobs.jobs) == 1 + (status == "completed")
    assert_each_key_ends_once(model_env, step, jobs, events, outcomes)


@pytest.mark.parametrize("state", ["Failed", "Stopped", "Expired", "Completed"])
def test_each_terminal_state_ends_every_row_once(
    make_step, jobs, buffer, model_env, outcomes, monkeypatch, state
):
    """Failed answers nothing (each row goes again, its attempt spent); Stopped and Expired
    answer a part (the rest go again, their attempts given back); nothing is lost or billed
    twice."""
    clock = ShiftedClock(monkeypatch)
    events = rows(6)
    jobs.end_state = lambda number: state if number == 1 else None
    step = staged(make_step, buffer, clock, outcomes, events)

    ticks_until_done(step, clock)

    first = next(iter(jobs.jobs.values()))
    assert first.status == state
    assert len(jobs.jobs) == (1 if state == "Completed" else 2)
    assert_each_key_ends_once(model_env, step, jobs, events, outcomes)
    stored_now = stored_by_key(model_env, step)
    assert all(outcome_in(stored_now, e).status == "completed" for e in events)


def test_a_job_stuck_open_past_its_timeout_is_stopped_and_its_rows_go_again(
    make_step, jobs, buffer, model_env, outcomes, monkeypatch
):
    clock = ShiftedClock(monkeypatch)
    events = rows(2)
    jobs.stuck = True
    step = staged(make_step, buffer, clock, outcomes, events)
    clock.shift(24 * 3600 + 1801)
    tick(step)
    jobs.stuck = False

    ticks_until_done(step, clock)

    assert jobs.stop_calls == 1
    assert next(iter(jobs.jobs.values())).status == "Stopped"
    assert_each_key_ends_once(model_env, step, jobs, events, outcomes)


@pytest.fixture
def runtime(monkeypatch) -> Iterator[FakeBedrockRuntime]:
    """bedrock-runtime InvokeModel, for rows sent as single requests."""
    with FakeBedrockRuntime(timeout_sleep=3.0) as bedrock:
        monkeypatch.setenv("ANTHROPIC_BEDROCK_BASE_URL", bedrock.base_url)
        yield bedrock


def test_a_submission_below_the_jobs_minimum_goes_as_single_requests_at_the_realtime_price(
    make_step, jobs, runtime, buffer, model_env, outcomes, monkeypatch
):
    import model_step.batch_limits

    monkeypatch.setattr(model_step.batch_limits, "BEDROCK_MIN_REQUESTS", 100)
    clock = ShiftedClock(monkeypatch)
    events = rows(3)

    step = staged(make_step, buffer, clock, outcomes, events)

    assert jobs.create_calls == 0
    assert runtime.request_count == 3
    price = PRICE_TABLE["claude-haiku-5-5"]
    for event, outcome in outcomes.seen:
        assert stored(model_env, step, event).status == "completed"
        assert outcome.get("delivery") is None and outcome["model_requests"] == 1
        usage = outcome["usage"]
        full = (usage["input_tokens"] * price.input + usage["output_tokens"] * price.output) / 1e6
        assert outcome["cost_usd"] == pytest.approx(full)
    assert len(outcomes.seen) == 3


def test_a_transient_failure_below_the_minimum_is_retried_within_the_budget(
    make_step, jobs, runtime, buffer, model_env, outcomes, monkeypatch
):
    import model_step.batch_limits

    monkeypatch.setattr(model_step.batch_limits, "BEDROCK_MIN_REQUESTS", 100)
    runtime.script = [500, 500]
    clock = ShiftedClock(monkeypatch)
    [event] = rows(1)
    step = staged(make_step, buffer, clock, outcomes, [event])
    assert outcomes.seen == []

    ticks_until_done(step, clock)

    assert runtime.request_count == 3
    assert stored(model_env, step, event).status == "completed"
    assert [int(i["attempts"]["N"]) for i in model_env.budgets().values()] == [3]
    assert jobs.create_calls == 0


# -- crash points around CreateModelInvocationJob ----------------------------------------------
def _kill_on(monkeypatch, when: str) -> None:
    """A Lambda kill in the invocation that creates the job: before the request is sent, or
    after Bedrock made the job (its answer lost), or after the answer before it is recorded."""
    import botocore.client

    original = botocore.client.BaseClient._make_api_call
    fired = {"done": False}

    def make_api_call(self, operation, params):
        if operation != "CreateModelInvocationJob" or fired["done"]:
            return original(self, operation, params)
        fired["done"] = True
        if when == "before_send":
            raise LambdaKilled()
        answered = original(self, operation, params)
        raise LambdaKilled()  # after_send and after_answer: the job exists, unrecorded
        return answered

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", make_api_call)


@pytest.mark.parametrize("when", ["before_send", "after_answer"])
def test_a_kill_around_the_create_makes_one_job_and_bills_each_row_once(
    make_step, jobs, buffer, model_env, outcomes, monkeypatch, when
):
    clock = ShiftedClock(monkeypatch)
    events = rows(4)
    _kill_on(monkeypatch, when)
    step = make_step(on_outcome=outcomes)
    clock.shift(2)
    with pytest.raises(LambdaKilled):
        step.handle(sqs_batch(buffer, events), FakeLambdaContext())
    clock.shift(PAST_GRACE)

    ticks_until_done(step, clock)

    assert len(jobs.jobs) == 1
    # Before the send Bedrock never saw the first create; after its answer it saw both, and
    # the second, with the same token, named the first job.
    assert jobs.create_calls == (1 if when == "before_send" else 2)
    assert_each_key_ends_once(model_env, step, jobs, events, outcomes)


@pytest.mark.parametrize("fault", ["disconnect_after_create", "error_after_create", "disconnect"])
def test_a_create_whose_answer_is_lost_is_created_again_with_the_same_token(
    make_step, jobs, buffer, model_env, outcomes, monkeypatch, fault
):
    clock = ShiftedClock(monkeypatch)
    events = rows(4)
    jobs.create_faults = [fault]
    step = staged(make_step, buffer, clock, outcomes, events)
    clock.shift(PAST_GRACE)

    ticks_until_done(step, clock)

    assert jobs.create_calls == 2
    assert len(jobs.jobs) == 1
    assert_each_key_ends_once(model_env, step, jobs, events, outcomes)


def test_a_jobs_in_progress_quota_waits_without_spending_an_attempt(
    make_step, jobs, buffer, model_env, outcomes, monkeypatch
):
    clock = ShiftedClock(monkeypatch)
    events = rows(2)
    jobs.create_faults = ["ServiceQuotaExceededException"]
    step = staged(make_step, buffer, clock, outcomes, events)
    assert jobs.jobs == {}

    ticks_until_done(step, clock)

    assert len(jobs.jobs) == 1
    assert_each_key_ends_once(model_env, step, jobs, events, outcomes)
    assert [int(item["attempts"]["N"]) for item in model_env.budgets().values()] == [1, 1]


def test_a_create_past_the_jobs_in_progress_quota_waits_for_the_running_job(
    make_step, jobs, buffer, model_env, outcomes, monkeypatch
):
    """Bedrock's "jobs in progress" quota, enforced by the stand-in: the second submission's
    create is refused while the first job runs, and is sent once it ended."""
    jobs.jobs_in_progress = 1
    clock = ShiftedClock(monkeypatch)
    first, second = rows(2), rows(2, start=3)
    step = staged(make_step, buffer, clock, outcomes, first)
    staged(make_step, buffer, clock, outcomes, second)
    assert (len(jobs.jobs), jobs.create_calls) == (1, 2)

    ticks_until_done(step, clock)

    assert len(jobs.jobs) == 2
    assert_each_key_ends_once(model_env, step, jobs, first + second, outcomes)
    assert [int(i["attempts"]["N"]) for i in model_env.budgets().values()] == [1, 1, 1, 1]


def test_created_between_lists_the_steps_jobs_of_a_window(
    make_step, jobs, buffer, model_env, outcomes, monkeypatch
):
    import model_step.clock

    clock = ShiftedClock(monkeypatch)
    step = staged(make_step, buffer, clock, outcomes, rows(3))
    provider = step._components().batch.provider
    now = model_step.clock.now()

    [(arn, created)] = provider.created_between(now - 600, now + 600, 3)

    assert arn == next(iter(jobs.jobs))
    assert abs(created - now) < 600
    assert provider.created_between(now - 600, now + 600, 4) == []
    assert provider.created_between(now + 600, now + 1200, 3) == []


def test_a_tick_reads_its_jobs_states_from_one_list(
    make_step, jobs, buffer, model_env, outcomes, monkeypatch
):
    """GetModelInvocationJob and ListModelInvocationJobs on the same tick: one list serves
    every open job's state; Get is asked only for a job's data locations when it ended."""
    clock = ShiftedClock(monkeypatch)
    step = staged(make_step, buffer, clock, outcomes, rows(2))
    staged(make_step, buffer, clock, outcomes, rows(2, start=3))
    staged(make_step, buffer, clock, outcomes, rows(2, start=5))
    assert len(jobs.jobs) == 3
    jobs.calls.clear()
    clock.shift(10)

    tick(step)  # every job still open

    assert jobs.calls == {"ListModelInvocationJobs": 1}
    clock.shift(61)
    jobs.calls.clear()
    summary = tick(step)["model_step_batch"]  # every job ended: read, then deleted
    assert (summary["collected"], summary["deleted"]) == (3, 3), summary
    assert jobs.calls["ListModelInvocationJobs"] == 1
    assert jobs.calls["GetModelInvocationJob"] == 3 * 2, jobs.calls  # the read, then the delete


def test_an_unsigned_control_plane_call_is_refused(jobs):
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        jobs.base_url + "/model-invocation-job", data=json.dumps({}).encode(), method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request)
    assert refused.value.code == 403
    assert jobs.jobs == {}
