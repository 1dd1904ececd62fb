"""Whole local runs with Lambda faults (issue 15, "Prove it": the local run): kills after a
sent request and throttled receives keep every record key within its attempt budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.scale import write_csv
from constructs_lib.prospect_uploader.local_run import (
    RunOptions,
    RunResult,
    check_invariants,
    run_pipeline,
)

from .billing import assert_one_billed_request_per_row
from .conftest import FAST_CLOCK


def _assert_invariants(result: RunResult) -> None:
    failing = [check for check in check_invariants(result) if not check.ok]
    assert not failing, failing


@pytest.mark.slow
def test_kills_and_throttles_keep_every_key_within_its_budget(cdk_out: Path, tmp_path):
    # GIVEN 20 generated rows with two copies each, model faults, Lambda kills after a sent
    # request and throttled receives (issue 15, "Prove it": the 2,000-row run's options,
    # with more kills so that 20 rows meet some; docs/local-run.md has the 2,000-row figures)
    result = run_pipeline(
        RunOptions(
            csv_path=write_csv(tmp_path / "rows.csv", 20),
            cdk_out=cdk_out,
            duplicates=2,
            fault_rate=0.2,
            kill_rate=0.2,
            throttle_rate=0.2,
            seed=3,
            seconds_per_minute=FAST_CLOCK,
            log_file=tmp_path / "handlers.log",
        )
    )
    # THEN every invariant holds: each row labelled or failed with a code, no key billed
    # beyond MAX_ATTEMPTS, no uncoded dead letter of a row the function ran with
    _assert_invariants(result)
    assert result.kills > 0 and result.throttles > 0
    assert 1 <= result.max_requests_per_key <= result.max_attempts == 3
    assert result.uncoded_dead_letters == 0
    (buffer,) = [q for q in result.queues.values() if q["path"] == "Classify/BufferQueue"]
    assert buffer["throttles"] > 0 and buffer["kills"] > 0
    assert result.redriven == sum(result.redriven_by_queue.values())
    assert "Classify/BufferQueue" in result.redriven_by_queue


@pytest.mark.slow
def test_throttles_alone_cost_no_request(cdk_out: Path, tmp_path):
    # GIVEN a third of all receives throttled and no other fault  WHEN 12 rows run twice each
    result = run_pipeline(
        RunOptions(
            csv_path=write_csv(tmp_path / "rows.csv", 12),
            cdk_out=cdk_out,
            duplicates=2,
            throttle_rate=0.3,
            seed=1,
            seconds_per_minute=FAST_CLOCK,
            log_file=tmp_path / "handlers.log",
        )
    )
    # THEN a throttle is not an attempt: still one billed request per row, none failed
    # (exactly, unless a loaded machine timed a request out after the model counted it)
    _assert_invariants(result)
    assert result.throttles > 0 and result.kills == 0
    assert_one_billed_request_per_row(result)
