"""The batch step's own times on the run's clock (``engine._batch_create_on_the_run_clock``):
what waits a minute on AWS waits a run-minute locally, and each local tick sees the provider
as freshly as each AWS tick does."""

from __future__ import annotations

import pytest

from constructs_lib._paths import lambda_src_root
from constructs_lib.local_engine.engine import (
    MIN_SCHEDULE_PERIOD_SECONDS,
    _batch_create_on_the_run_clock,
)
from constructs_lib.local_engine.execution_environment import ExecutionEnvironment


@pytest.mark.parametrize("seconds_per_minute", [0.25, 1.0, 6.0])
def test_every_tick_lists_the_bedrock_jobs_afresh(seconds_per_minute):
    # GIVEN the runtime's modules of one run, on a run-minute of seconds_per_minute
    with ExecutionEnvironment(lambda_src_root()) as runtime:
        bedrock = runtime.module("model_step.bedrock_batches")
        tick = runtime.module("model_step.batch_limits").TICK_PERIOD_SECONDS
        # (on AWS the list is fresh for less than a tick)
        assert bedrock.LIST_FRESH_SECONDS < tick
        # WHEN the batch times go on the run's clock
        _batch_create_on_the_run_clock(runtime, seconds_per_minute)
        # THEN a list is fresh for less than the local tick's period (the engine fires a
        # rule at most once a MIN_SCHEDULE_PERIOD_SECONDS), so no tick reuses the last one
        local_tick = max(tick * seconds_per_minute / 60.0, MIN_SCHEDULE_PERIOD_SECONDS)
        assert bedrock.LIST_FRESH_SECONDS < local_tick
        # AND a create refused for its key waits a run-minute, not a wall minute
        wait = runtime.module("model_step.anthropic_batches").KEY_PROBLEM_WAIT_SECONDS
        assert wait == pytest.approx(seconds_per_minute)


def test_the_run_clock_stays_in_its_run():
    # GIVEN a run that put the batch times on a fast clock
    with ExecutionEnvironment(lambda_src_root()) as runtime:
        _batch_create_on_the_run_clock(runtime, 0.25)
    # WHEN the next run imports the runtime afresh
    with ExecutionEnvironment(lambda_src_root()) as runtime:
        # THEN it starts from the runtime's own times
        assert runtime.module("model_step.bedrock_batches").LIST_FRESH_SECONDS == 30.0
        assert runtime.module("model_step.anthropic_batches").KEY_PROBLEM_WAIT_SECONDS == 60.0
