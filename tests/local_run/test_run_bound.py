"""The default run timeout, derived from the work (docs/local-run.md, "How long a run may
take"): the parts, their caps, and the template's queue chain."""

from __future__ import annotations

import pytest

from constructs_lib.local_engine.run_bound import (
    REDRIVE_ROUNDS,
    STARTUP_SECONDS,
    WALL_SECONDS_PER_RECEIVE,
    RunWork,
    derive_run_bound,
    queue_horizon_seconds,
)


def test_each_part_of_the_bound_comes_from_the_work():
    # GIVEN 2,000 rows, two copies each, 30 requests a minute of a 1 s minute, and a queue
    # chain a row may spend 7,560 AWS seconds in
    work = RunWork(
        rows=2_000,
        duplicates=2,
        seconds_per_minute=1.0,
        rate_limit=30,
        max_attempts=3,
        max_event_age_seconds=86_400,
        queue_horizon_seconds=7_560,
    )
    bound = derive_run_bound(work)
    # THEN: one receive per copy; 2,000 requests at 30 a minute; three passes of the chain
    assert bound.startup == STARTUP_SECONDS
    assert bound.processing == pytest.approx(4_000 * WALL_SECONDS_PER_RECEIVE)
    assert bound.rate_limit == pytest.approx(2_000 / 30)
    assert bound.tail == pytest.approx(REDRIVE_ROUNDS * 7_560 / 60)
    assert bound.total == pytest.approx(
        bound.startup + bound.processing + bound.rate_limit + bound.tail
    )
    # ... far above the 300 s the old fixed default gave this documented command
    assert bound.total > 3 * 300
    assert bound.describe().startswith(f"{bound.total:.0f} s = ")


def test_faults_kills_and_throttles_cost_receives():
    calm = derive_run_bound(RunWork(rows=1_000))
    rough = derive_run_bound(
        RunWork(rows=1_000, fault_rate=0.2, kill_rate=0.05, throttle_rate=0.2, max_attempts=3)
    )
    # A failing row may use every attempt; a throttled receive is made again.
    expected = 1_000 * (1 + 0.25 * 2) / 0.8
    assert rough.processing == pytest.approx(expected * WALL_SECONDS_PER_RECEIVE)
    assert rough.processing > calm.processing
    # A throttle rate of 1 (nothing ever runs) still has a finite bound.
    assert derive_run_bound(RunWork(rows=10, throttle_rate=1.0)).total < float("inf")


def test_the_rate_limit_and_the_tail_never_wait_past_the_maximum_event_age():
    # GIVEN more rows than one request a minute can serve within the event age
    work = RunWork(rows=100_000, rate_limit=1, max_event_age_seconds=3_600,
                   queue_horizon_seconds=10**6, seconds_per_minute=0.5)  # fmt: skip
    bound = derive_run_bound(work)
    # THEN rows beyond it are dead-lettered, not waited for: 60 minutes of 0.5 s each
    assert bound.rate_limit == pytest.approx(60 * 0.5)
    assert bound.tail == pytest.approx(3_600 * 0.5 / 60)


def test_a_run_clock_twice_as_slow_doubles_the_waits_not_the_work():
    fast = derive_run_bound(RunWork(rows=100, rate_limit=10, queue_horizon_seconds=600))
    slow = derive_run_bound(
        RunWork(rows=100, rate_limit=10, queue_horizon_seconds=600, seconds_per_minute=2.0)
    )
    assert slow.rate_limit == 2 * fast.rate_limit and slow.tail == 2 * fast.tail
    assert slow.processing == fast.processing


def test_the_queue_horizon_is_read_from_the_steps_redrive_chain(assembly):
    # GIVEN the synthesized stack: each queue of the step's chain with a redrive policy
    # gives maxReceiveCount receives of one visibility timeout
    step = assembly.model_step_function()
    expected = 0.0
    for resource in assembly.of_type("AWS::SQS::Queue"):
        props = resource.properties
        redrive = props.get("RedrivePolicy")
        if redrive and "/Classify/" in resource.path:
            expected += redrive["maxReceiveCount"] * props.get("VisibilityTimeout", 30)
    # THEN the horizon is their sum (the DLQ itself, without a redrive policy, adds nothing)
    assert expected > 0
    assert queue_horizon_seconds(assembly, step) == expected
