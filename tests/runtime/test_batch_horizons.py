"""Issue 33, item 1: every row ends in a stored outcome or a coded, alarmed dead letter, over
any horizon. The step's own defaults (the key's memory derived from ``max_event_age`` and
the queues' retention, ``MAX_EVENT_AGE_SECONDS`` 24 h), the real handler, the strict
emulator (batches that end ``expired`` at 24 h), moto, and a clock moved by days."""

from __future__ import annotations

from collections import Counter

import pytest

from .batch_rows import custom_id_for, rows, stored, tick
from .conftest import SECRET_VALUE, ShiftedClock
from .test_batch_delivery import staged, ticks_until_done

HOUR = 3600


@pytest.fixture
def clock(monkeypatch) -> ShiftedClock:
    return ShiftedClock(monkeypatch)


@pytest.mark.parametrize(
    ("kind", "code"), [("expired", "BatchExpired"), ("canceled", "BatchCanceled")]
)
def test_a_row_that_ends_unanswered_past_max_event_age_is_that_dead_letter(
    make_step, fake_api, batch_env, buffer, outcomes, clock, monkeypatch, kind, code
):
    """Before, the key's budget expired 24 h after its claim and read as new (age 0), so a
    row expired again and again until its row item expired at 72 h: no record, no row,
    nothing on the DLQ. Now its first-seen time lives as long as the key can be retried,
    and its first end past MAX_EVENT_AGE_SECONDS is the documented dead letter."""
    monkeypatch.delenv("IDEMPOTENCY_EXPIRES_AFTER_SECONDS", raising=False)  # the default
    fake_api.batches.processing_delay = 10**9  # nothing finishes: it expires at 24 h
    fake_api.batches.cancel_survivor_rate = 0.0
    events = rows(2)
    staged(make_step, buffer, clock, outcomes, events)
    [first] = fake_api.batches.batches.values()
    if kind == "canceled":
        clock.shift(23.9 * HOUR)
        fake_api.batches.cancel(first.id)  # an operator cancels it just before it expires
        clock.shift(0.2 * HOUR)
    else:
        clock.shift(24 * HOUR + 120)

    step = ticks_until_done(make_step, outcomes, clock, count=12)

    for event in events:
        outcome = stored(batch_env, step, event)
        assert (outcome.status, outcome.error_code) == ("dead_lettered", code)
    assert sorted(m["attributes"]["ERROR_CODE"] for m in batch_env.dead_letters()) == [code] * 2
    assert fake_api.batches.billed == 0
    assert not [i for i in batch_env.idempotency_items() if "#batch-row#" in i["id"]["S"]]


def test_a_billed_answer_that_arrives_after_its_batch_was_lost_is_stored(
    make_step, fake_api, batch_env, buffer, outcomes, clock
):
    """The API key sits in another Workspace for 6 h: the batch is unknown (404) past its
    bound, so its rows go again in a new batch. The key is back; the lost batch had ended
    and billed its answers, and the hourly late look stores them: the new batch's answers
    then find their rows done. Each key is billed twice (both batches ran) within
    its budget, and stored once."""
    import model_step.batch_limits

    events = rows(2)
    step = staged(make_step, buffer, clock, outcomes, events)
    [lost] = list(fake_api.batches.batches)
    fake_api.batches.workspaces[SECRET_VALUE] = "wrkspc_elsewhere"
    clock.shift(61)
    tick(step)  # 404: noted
    fake_api.batches.processing_delay = 10 * HOUR  # the new batch takes its time
    clock.shift(model_step.batch_limits.LOST_UNKNOWN_SECONDS)
    assert tick(step)["model_step_batch"]["lost"] == 1
    fake_api.batches.workspaces.clear()  # the key is back
    clock.shift(61)
    tick(step)  # the rows go again as a new batch
    assert len(fake_api.batches.batches) == 2

    clock.shift(model_step.batch_limits.LATE_POLL_SECONDS + 61)
    tick(step)

    for event in events:
        outcome = stored(batch_env, step, event)
        assert (outcome.status, outcome.batch_id) == ("completed", lost)
    clock.shift(10 * HOUR)  # the new batch ends too: its answers find their rows done
    step = ticks_until_done(make_step, outcomes, clock, count=24)
    billed = Counter(fake_api.batches.billed_by_custom_id)
    assert billed == {custom_id_for(step, e): 2 for e in events}
    terminal = [o for _, o in outcomes.seen if o["status"] == "completed" and not o["replayed"]]
    assert len(terminal) == 2
