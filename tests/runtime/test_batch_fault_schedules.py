"""Issue 19: seeded random fault schedules over the whole batch path.

Each seed draws: one to three buffer deliveries (merged into one batch when rows wait),
faults around create (dropped before or after the batch exists, a 500
after it, 413 and 429), a result type per request (succeeded, errored invalid/api_error,
expired, canceled), a results stream dropped halfway, and kills at random DynamoDB calls of
the handler and of the ticks (``LambdaKilled`` before the call is made: nothing after it
runs). A killed delivery is handed over again, a killed tick is followed by a new container.

Deliveries and ticks run in one warm execution environment, as Lambda reuses one between
invocations: the ``ModelStep`` (its clients, its Powertools objects, the API key read from
Secrets Manager) is built on the first invocation and kept until a kill. A kill, and only a
kill, ends the environment: the next invocation starts a new one (a cold start), with nothing
the killed one held in memory. Nothing else in the schedule is a cold start.

Whatever the schedule, per key: at most one billed request over every batch, and a stored
label or a stored coded dead letter; at least one terminal ``on_outcome`` per key (a kill
right after ``on_outcome`` returned, before the row is marked, calls it again).
"""

from __future__ import annotations

import random

import pytest

from constructs_lib.local_engine.local_aws import unsigned_moto_requests

from .batch_rows import (
    PAST_GRACE,
    LambdaKilled,
    assert_every_key_ends_once,
    rows,
    sqs_batch,
    tick,
)
from .conftest import TABLE, FakeLambdaContext, ShiftedClock, boto3_session

#: 40 schedules, about 45 CPU-s and a minute and a half of one worker: ``long`` puts the file
#: with the long ones at the front of ``make test``'s order (tests/conftest.py), so it never
#: starts last and keeps one worker busy after the others have finished.
pytestmark = pytest.mark.long

SEEDS = range(40)


@pytest.fixture(scope="module", autouse=True)
def unsigned_requests():
    """The steps' requests to moto go unsigned, as a local run's do
    (``constructs_lib.local_engine.local_aws.unsigned_moto_requests`` says why that hides
    nothing): signing was about 6 % of this module's CPU. The run's sessions sign again
    after the module."""
    with unsigned_moto_requests(boto3_session()):
        yield


@pytest.fixture
def killer():
    """``state["at"] = n``: the n-th next DynamoDB call dies before it is made."""
    state = {"at": None}
    events = boto3_session().events

    def before_send(request, **kwargs):
        if state["at"] is None:
            return
        state["at"] -= 1
        if state["at"] <= 0:
            state["at"] = None
            raise LambdaKilled("killed before a DynamoDB call")

    events.register("before-send.dynamodb", before_send)
    yield state
    events.unregister("before-send.dynamodb", before_send)


class ExecutionEnvironment:
    """One Lambda execution environment: its ``ModelStep`` is built on the first invocation
    and reused by the next ones until :meth:`kill`."""

    def __init__(self, make_step, outcomes) -> None:
        self._make_step = make_step
        self._outcomes = outcomes
        self._step = None

    def step(self):
        """The warm step, or a new one if the environment is cold."""
        if self._step is None:
            self._step = self._make_step(on_outcome=self._outcomes)
        return self._step

    def kill(self) -> None:
        """The invocation died: the next one starts a new environment."""
        self._step = None


def expire_held_records(aws) -> None:
    """A killed invocation's record locks expire at its deadline (Powertools reads the
    wall clock, which the test does not move): set them in the past, as that time passing
    would."""
    for item in aws.idempotency_items():
        if item.get("status", {}).get("S") == "INPROGRESS":
            aws.dynamodb.update_item(
                TableName=TABLE,
                Key={"id": item["id"]},
                UpdateExpression="SET in_progress_expiration = :past",
                ExpressionAttributeValues={":past": {"N": "1"}},
            )


@pytest.mark.parametrize("seed", SEEDS)
def test_a_random_fault_schedule_ends_every_key_once(
    make_step, fake_api, batch_env, buffer, outcomes, monkeypatch, killer, seed
):
    rng = random.Random(seed)
    clock = ShiftedClock(monkeypatch)
    faults = ["disconnect", "disconnect_after_create", "error_after_create", 413, 429]
    fake_api.batches.create_faults = rng.sample(faults, rng.randint(0, 3))
    kinds = ["succeeded"] * 6 + ["invalid_request_error", "api_error", "expired", "canceled"]
    fake_api.batches.decide = lambda custom_id, params: rng.choice(kinds)
    if rng.random() < 0.5:
        fake_api.batches.results_drop_after = rng.randint(1, 5)
    events = rows(rng.randint(2, 7))
    if rng.random() < 0.5:  # rows wait: several deliveries' submissions are merged
        monkeypatch.setenv("BATCH_MAX_WAIT_SECONDS", "300")
    cuts = sorted(rng.sample(range(1, len(events)), rng.randint(0, min(2, len(events) - 1))))
    chunks = [events[a:b] for a, b in zip([0, *cuts], [*cuts, len(events)], strict=True)]
    clock.shift(2)
    kills_left = 3
    lambda_env = ExecutionEnvironment(make_step, outcomes)

    # Each buffer delivery, handed over again after each kill (SQS keeps the messages).
    for chunk in chunks:
        delivery = sqs_batch(buffer, chunk)
        for _ in range(4):
            if kills_left and rng.random() < 0.6:
                killer["at"] = rng.randint(1, 12 * len(chunk))
                kills_left -= 1
            try:
                lambda_env.step().handle(delivery, FakeLambdaContext())
                break
            except LambdaKilled:
                lambda_env.kill()
                expire_held_records(batch_env)
                continue
        killer["at"] = None
        lambda_env.step().handle(delivery, FakeLambdaContext())

    # Ticks, some killed, until nothing is open.
    for _ in range(40):
        clock.shift(PAST_GRACE)
        if kills_left and rng.random() < 0.3:
            killer["at"] = rng.randint(1, 30)
            kills_left -= 1
        try:
            summary = tick(lambda_env.step(), remaining_millis=120_000)
        except LambdaKilled:
            lambda_env.kill()
            killer["at"] = None
            clock.shift(121)  # the killed tick's lease ends with its deadline...
            expire_held_records(batch_env)  # ...and so do the record locks it held
            continue
        killer["at"] = None
        state = summary["model_step_batch"]
        if isinstance(state, dict) and state["open"] == 0:
            break
    else:
        pytest.fail("the batch path did not settle")

    # The warm step names the keys' records: the last tick lived, so it is the same step
    # (same settings) a fresh one would be, with nothing built again.
    assert_every_key_ends_once(
        batch_env, lambda_env.step(), fake_api, events, outcomes, exactly_once=False
    )
