"""A due remnant of rows joins the pending submissions at its flush (Bedrock, issue 37).

An invocation that runs short of time stages part of its delivery and reports the rest as
failures; those come back after the buffer queue's visibility timeout, older than
``BATCH_MAX_WAIT_SECONDS``, so their submission is due at its flush. Sent on its own it was
below Bedrock's minimum of 100 records a job and went as single requests at the realtime
price, while the rows staged first waited out their own ``BATCH_MAX_WAIT_SECONDS`` (the
local run's 120-row upload: 112 rows pending for an hour of the runtime's clock, 8 sent
singly). Merged with the pending submissions, as a tick merges, they go as one job.

The real handler and Powertools, moto, the local Bedrock control plane (its fixtures are
those of :mod:`.test_bedrock_batch_delivery`).
"""

from __future__ import annotations

from model_step.batch_store import text

from . import test_bedrock_batch_delivery as bedrock
from .batch_rows import rows, sqs_batch, tick
from .conftest import FakeLambdaContext, ShiftedClock
from .test_bedrock_batch_delivery import assert_each_key_ends_once, ticks_until_done

#: The Bedrock fixtures: the local control plane (``jobs``) and InvokeModel (``runtime``).
jobs, runtime = bedrock.jobs, bedrock.runtime

#: The local run's 120 rows, 112 of them staged before the invocation ran short of time,
#: and Bedrock's minimum of 100 records a job, scaled down tenfold (the cost of the test).
ROWS, FIRST, MINIMUM = 12, 11, 10


def aged(batch: dict, seconds: float) -> dict:
    """``batch`` with every record sent ``seconds`` earlier (a message back after its
    visibility timeout keeps its first ``SentTimestamp``)."""
    for record in batch["Records"]:
        sent = int(record["attributes"]["SentTimestamp"])
        record["attributes"]["SentTimestamp"] = str(sent - int(seconds * 1000))
    return batch


def assert_every_staged_row_is_owned_by_an_open_submission(step) -> None:
    """The invariant a stall breaks: a staged row's owner is listed in the index and is
    a submission that still sends or collects it, and lists it."""
    store = step._components().batch.store
    opened = set(store.open_submissions())
    table = store._client.scan(TableName=store._table)["Items"]
    for item in table:
        if "#batch-row#" not in item["id"]["S"] or text(item, "state") != "staged":
            continue
        owner = text(item, "submission") or ""
        submission = store.submission(owner)
        assert owner in opened and submission is not None, (item["id"], owner)
        custom_id = item["id"]["S"].rsplit("#", 1)[-1]
        assert custom_id in store.custom_ids(owner, submission), (custom_id, owner)


def test_a_due_remnant_joins_the_pending_rows_as_one_job(
    make_step, jobs, runtime, buffer, model_env, outcomes, monkeypatch
):
    import model_step.batch_limits

    monkeypatch.setattr(model_step.batch_limits, "BEDROCK_MIN_REQUESTS", MINIMUM)
    monkeypatch.setenv("BATCH_MAX_REQUESTS", str(ROWS))
    monkeypatch.setenv("BATCH_MAX_WAIT_SECONDS", "3600")
    clock = ShiftedClock(monkeypatch)
    events = rows(ROWS)
    step = make_step(on_outcome=outcomes)
    first, rest = events[:FIRST], events[FIRST:]
    # GIVEN rows staged (two copies of each, as the local run's duplicates), pending
    result = step.handle(sqs_batch(buffer, first + first), FakeLambdaContext())
    assert result == {"batchItemFailures": []}
    assert jobs.create_calls == 0
    assert_every_staged_row_is_owned_by_an_open_submission(step)

    # WHEN the rest come back, due (they waited out a visibility timeout), below the minimum
    result = step.handle(aged(sqs_batch(buffer, rest + rest), 3_700), FakeLambdaContext())

    # THEN all go as one job at the batch price, none singly
    assert result == {"batchItemFailures": []}
    assert runtime.request_count == 0
    assert jobs.create_calls == 1
    assert_every_staged_row_is_owned_by_an_open_submission(step)
    ticks_until_done(step, clock)
    [job] = jobs.jobs.values()
    assert (job.status, len(job.records)) == ("Completed", ROWS)
    assert tick(step)["model_step_batch"]["open"] == 0
    assert_each_key_ends_once(model_env, step, jobs, events, outcomes)
