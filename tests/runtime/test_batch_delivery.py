"""Message Batches delivery (issue 19): rows staged, submitted as batches, collected on the
schedule tick. The real handler and Powertools, the real SDK over HTTP to the fake Messages
API's batch endpoints, moto for AWS."""

from __future__ import annotations

from .batch_rows import (
    assert_every_key_ends_once,
    rows,
    sqs_batch,
    stored,
    tick,
)
from .conftest import FakeLambdaContext, ShiftedClock


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
