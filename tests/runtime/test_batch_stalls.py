"""Rows that together make a batch go at once, not after ``BATCH_MAX_WAIT_SECONDS``
(Bedrock, issue 37; the local run's 120-row upload, ``duplicates=2``, stalled both ways).

A due remnant: an invocation that runs short of time stages part of its delivery and
reports the rest as failures; those come back after the buffer queue's visibility timeout,
older than ``BATCH_MAX_WAIT_SECONDS``, so their submission is due at its flush. Sent on its
own it was below Bedrock's minimum of 100 records a job and went as single requests at the
realtime price, while the rows staged first waited out their own ``BATCH_MAX_WAIT_SECONDS``
(112 rows pending for an hour of the runtime's clock, 8 sent singly). Merged with the
pending submissions at its flush, as a tick merges, they go as one job.

Concurrent copies: two invocations given copies of the same rows; the second adopts the
rows of the first's submission, not written yet, and the first then writes it listing
them. Counted as its own, they kept two submissions that together own a full batch from
merging (merges go by counts), so both waited out ``BATCH_MAX_WAIT_SECONDS``. A flushed
submission's count is now that of the rows it still owns.

The real handler and Powertools, moto, the local Bedrock control plane (its fixtures are
those of :mod:`.test_bedrock_batch_delivery`).
"""

from __future__ import annotations

import threading

from model_step.batch_store import number, text
from model_step.batch_submit import BatchSubmitter

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


def hour_window(monkeypatch, requests: int) -> ShiftedClock:
    """The local run's window (``BATCH_MAX_REQUESTS`` a whole batch, the hour of wait the
    step allows, on a clock the test moves): rows wait unless they make a batch or are due."""
    monkeypatch.setenv("BATCH_MAX_REQUESTS", str(requests))
    monkeypatch.setenv("BATCH_MAX_WAIT_SECONDS", "3600")
    return ShiftedClock(monkeypatch)


def assert_every_staged_row_is_counted_once_by_an_open_submission(step) -> None:
    """The invariants a stall breaks: a staged row's owner is listed in the index, still
    sends or collects it, and lists it; a pending submission counts the rows it owns."""
    store = step._components().batch.store
    opened = set(store.open_submissions())
    owned: dict[str, int] = dict.fromkeys(opened, 0)
    for item in store._client.scan(TableName=store._table)["Items"]:
        if "#batch-row#" not in item["id"]["S"] or text(item, "state") != "staged":
            continue
        owner = text(item, "submission") or ""
        submission = store.submission(owner)
        assert owner in opened and submission is not None, (item["id"], owner)
        custom_id = item["id"]["S"].rsplit("#", 1)[-1]
        assert custom_id in store.custom_ids(owner, submission), (custom_id, owner)
        owned[owner] += 1
    for owner, count in owned.items():
        submission = store.submission(owner) or {}
        if text(submission, "state") == "pending":
            assert number(submission, "count") == count, (owner, submission)


def test_a_due_remnant_joins_the_pending_rows_as_one_job(
    make_step, jobs, runtime, buffer, model_env, outcomes, monkeypatch
):
    import model_step.batch_limits

    monkeypatch.setattr(model_step.batch_limits, "BEDROCK_MIN_REQUESTS", MINIMUM)
    clock = hour_window(monkeypatch, ROWS)
    events = rows(ROWS)
    step = make_step(on_outcome=outcomes)
    first, rest = events[:FIRST], events[FIRST:]
    # GIVEN rows staged (two copies of each, as the local run's duplicates), pending
    result = step.handle(sqs_batch(buffer, first + first), FakeLambdaContext())
    assert result == {"batchItemFailures": []}
    assert jobs.create_calls == 0
    assert_every_staged_row_is_counted_once_by_an_open_submission(step)

    # WHEN the rest come back, due (they waited out a visibility timeout), below the minimum
    result = step.handle(aged(sqs_batch(buffer, rest + rest), 3_700), FakeLambdaContext())

    # THEN all go as one job at the batch price, none singly
    assert result == {"batchItemFailures": []}
    assert runtime.request_count == 0
    assert jobs.create_calls == 1
    assert_every_staged_row_is_counted_once_by_an_open_submission(step)
    ticks_until_done(step, clock)
    [job] = jobs.jobs.values()
    assert (job.status, len(job.records)) == ("Completed", ROWS)
    assert tick(step)["model_step_batch"]["open"] == 0
    assert_each_key_ends_once(model_env, step, jobs, events, outcomes)


def test_copies_adopted_by_a_concurrent_invocation_leave_a_full_batch_to_go_at_once(
    make_step, jobs, buffer, model_env, outcomes, monkeypatch
):
    clock = hour_window(monkeypatch, 6)
    events = rows(6)
    step = make_step(on_outcome=outcomes)
    first_thread = threading.current_thread()
    at_flush, resume = threading.Event(), threading.Event()
    flush = BatchSubmitter.flush

    def held_flush(self, *args):
        if threading.current_thread() is not first_thread:
            at_flush.set()
            assert resume.wait(30)
        flush(self, *args)

    monkeypatch.setattr(BatchSubmitter, "flush", held_flush)
    one, two = sqs_batch(buffer, events[:4]), sqs_batch(buffer, events[:2] + events[4:])
    # GIVEN an invocation that staged rows 1-4 and has not written its submission yet
    answered: list[dict] = []
    first = threading.Thread(target=lambda: answered.append(step.handle(one, FakeLambdaContext())))
    first.start()
    assert at_flush.wait(30)
    # WHEN another, given copies of rows 1-2 and rows 5-6, adopts 1-2 and writes its own
    assert step.handle(two, FakeLambdaContext()) == {"batchItemFailures": []}
    resume.set()
    first.join()
    assert answered == [{"batchItemFailures": []}]

    # THEN the two submissions count the 6 rows once, and the next tick sends them as one
    assert_every_staged_row_is_counted_once_by_an_open_submission(step)
    clock.shift(61)
    assert tick(step)["model_step_batch"]["submitted"] == 1
    ticks_until_done(step, clock)
    [job] = jobs.jobs.values()
    assert len(job.records) == 6
    assert_each_key_ends_once(model_env, step, jobs, events, outcomes)
