"""Issue 19: the batch delivery's settings, read and checked like every other variable."""

from __future__ import annotations

import pytest
from model_step import ConfigurationError, Settings
from model_step import environment as env

from .conftest import FakeLambdaContext, make_event, prospect_detail
from .prompts import shipped

BASE = {
    "IDEMPOTENCY_TABLE_NAME": "t",
    "DEAD_LETTER_QUEUE_URL": "https://sqs/q",
    "IDEMPOTENCY_KEY": "[upload_id, row_number]",
    "PROMPT_VERSION": "v1",
}


@pytest.fixture
def base() -> dict:
    return {**BASE, "SYSTEM_PROMPT_SHA256": shipped("Answer hot, warm or cold.")}


def test_the_defaults_are_the_declared_ones(base):
    settings = Settings.from_environment(base)
    assert settings.model_delivery == env.by_name(env.MODEL_DELIVERY).default == "realtime"
    assert str(settings.batch_max_requests) == env.by_name(env.BATCH_MAX_REQUESTS).default
    assert str(settings.batch_max_wait_seconds) == env.by_name(env.BATCH_MAX_WAIT_SECONDS).default


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("MODEL_DELIVERY", "bulk", "MODEL_DELIVERY must be one of"),
        ("BATCH_MAX_REQUESTS", "100001", "BATCH_MAX_REQUESTS must be at most 100000"),
        ("BATCH_MAX_REQUESTS", "0", "BATCH_MAX_REQUESTS must be positive"),
        ("BATCH_MAX_WAIT_SECONDS", "3601", "BATCH_MAX_WAIT_SECONDS must be at most 3600"),
    ],
)
def test_a_bad_value_names_the_variable(base, name, value, message):
    with pytest.raises(ConfigurationError, match=message):
        Settings.from_environment({**base, "MODEL_DELIVERY": "batch", name: value})


BEDROCK_BATCH = {
    "MODEL_DELIVERY": "batch",
    "MODEL_PROVIDER": "bedrock",
    "BATCH_BUCKET_NAME": "step-batch-bucket",
    "BATCH_ROLE_ARN": "arn:aws:iam::123456789012:role/step-batch-role",
}


def test_bedrock_batch_reads_its_bucket_role_and_prefix(base):
    settings = Settings.from_environment({**base, **BEDROCK_BATCH, "BATCH_S3_PREFIX": "jobs"})

    assert (settings.batch_bucket_name, settings.batch_role_arn, settings.batch_s3_prefix) == (
        "step-batch-bucket",
        "arn:aws:iam::123456789012:role/step-batch-role",
        "jobs/",
    )


@pytest.mark.parametrize("missing", ["BATCH_BUCKET_NAME", "BATCH_ROLE_ARN"])
def test_bedrock_batch_without_its_bucket_or_role_is_refused(base, missing):
    env = {**base, **BEDROCK_BATCH}
    del env[missing]
    with pytest.raises(ConfigurationError, match=missing):
        Settings.from_environment(env)


def test_bedrock_batch_refuses_more_requests_than_a_job_holds(base):
    with pytest.raises(ConfigurationError, match="at most 50000 with MODEL_PROVIDER=bedrock"):
        Settings.from_environment({**base, **BEDROCK_BATCH, "BATCH_MAX_REQUESTS": "50001"})


def test_bedrock_batch_refuses_an_event_age_past_a_jobs_168_hours(base):
    env = {**base, **BEDROCK_BATCH, "MAX_EVENT_AGE_SECONDS": str(169 * 3600)}
    env["IDEMPOTENCY_EXPIRES_AFTER_SECONDS"] = str(40 * 86_400)
    with pytest.raises(ConfigurationError, match="at most 168 h"):
        Settings.from_environment(env)


def test_a_bare_event_under_batch_is_staged_and_a_tick_answers_it(
    make_step, fake_api, batch_env, outcomes, monkeypatch
):
    from .batch_rows import stored, tick
    from .conftest import ShiftedClock

    clock = ShiftedClock(monkeypatch)
    step = make_step(on_outcome=outcomes)
    event = make_event(prospect_detail(row_number=9))

    assert step.handle(event, FakeLambdaContext()) == {"status": "staged"}
    assert step.handle(event, FakeLambdaContext()) == {"status": "staged"}  # a duplicate
    for _ in range(3):
        clock.shift(61)
        tick(step)

    assert stored(batch_env, step, event).status == "completed"
    assert fake_api.batches.billed == 1 and fake_api.request_count == 0


def test_rows_left_when_time_runs_short_come_back_unstaged(
    make_step, fake_api, batch_env, buffer, outcomes
):
    from .batch_rows import rows, sqs_batch

    step = make_step(on_outcome=outcomes)
    delivery = sqs_batch(buffer, rows(3))

    response = step.handle(delivery, FakeLambdaContext(remaining_millis=10_000))

    assert len(response["batchItemFailures"]) == 3
    assert fake_api.batches.create_calls == 0
