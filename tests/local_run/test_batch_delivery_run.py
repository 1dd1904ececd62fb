"""Whole local runs of the Message Batches path (issue 19, item 5): ``--delivery batch`` on
the synthesized stack (context ``delivery=auto``, so the batch step is in the template),
the batch runtime, the local model's batch endpoints and the schedule tick fired on the
run's clock. Tens of rows each, so the runs stay short."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.scale import write_csv
from constructs_lib.local_engine.errors import UsageError
from constructs_lib.prospect_uploader.cli import main
from constructs_lib.prospect_uploader.local_run import (
    RunOptions,
    RunResult,
    check_invariants,
    run_pipeline,
)

from .conftest import FAST_CLOCK

pytestmark = pytest.mark.slow


def _assert_invariants(result: RunResult) -> None:
    failing = [check for check in check_invariants(result) if not check.ok]
    assert not failing, failing


def _run(cdk_out: Path, tmp_path: Path, rows: int, **options: Any) -> RunResult:
    """A local run of ``rows`` generated rows on ``cdk_out`` with ``options``."""
    return run_pipeline(
        RunOptions(
            csv_path=write_csv(tmp_path / "rows.csv", rows),
            cdk_out=cdk_out,
            log_file=tmp_path / "handlers.log",
            **options,
        )
    )


def test_batch_delivery_bills_one_request_per_row_at_two_copies(cdk_out: Path, tmp_path):
    # GIVEN 20 rows sent by batch, every event delivered twice (and the split run twice)
    result = _run(cdk_out, tmp_path, 20, duplicates=2, delivery="batch")
    _assert_invariants(result)
    # THEN every row is classified by one billed batch request, none realtime
    assert result.delivery == "batch"
    assert (result.valid, result.classified, result.failed) == (20, 20, 0)
    assert result.model_requests == result.valid == result.batch_requests
    assert result.model_outcomes == {}  # no realtime request at all
    assert result.batches >= 1 and result.batch_results == {"succeeded": 20}
    assert result.max_requests_per_key == 1 and result.denied == 0
    # AND the split's repeat sent every row again, and each of its entries was answered
    # DEDUPLICATED by RowBus (within 300 s of the run's clock: all of them on a quiet
    # machine) or published, and both copies of each published entry reached the batch
    # step's buffer (40 when the repeat was all deduplicated), billed once per row (above)
    assert result.split_runs == 2 and result.row_entries_sent == 2 * result.valid
    published = result.row_entries_sent - result.deduplicated
    assert result.valid <= published <= 2 * result.valid
    assert result.deliveries == 2 * published


def test_errored_and_expired_results_are_sent_again_and_billed_once(cdk_out: Path, tmp_path):
    # GIVEN a local model whose batches answer about a third of the requests errored
    # (api_error, retried within the key's budget) or expired (not billed, resubmitted)
    result = _run(
        cdk_out,
        tmp_path,
        20,
        delivery="batch",
        batch_errored_rate=0.15,
        batch_expired_rate=0.15,
        seed=4,
    )
    # THEN rows came back in later batches, and each row ended once, billed at most once
    assert result.batches >= 2 and result.batch_requests > result.valid
    assert result.batch_results.get("api_error", 0) + result.batch_results.get("expired", 0) > 0
    assert result.classified + result.failed == result.valid == 20
    assert result.max_requests_per_key == 1
    assert result.model_requests == result.batch_results["succeeded"] == result.classified


def test_a_kill_partway_through_a_results_stream_resumes_and_bills_each_row_once(
    cdk_out: Path, tmp_path
):
    # GIVEN 150 rows by batch, every event delivered twice, and Lambda killing half the
    # reads of a batch's results partway (seed 3 kills the run's first read, after fewer
    # lines than its 150: the collector's lease and record locks are left as the kill
    # found them)
    result = _run(cdk_out, tmp_path, 150, delivery="batch", duplicates=2, kill_rate=0.5, seed=3)
    _assert_invariants(result)
    # THEN a later tick read the stream again (in another order) and applied each line by
    # custom_id: every row labelled once, one billed request each
    assert result.kills >= 1
    assert (result.valid, result.classified, result.failed) == (150, 150, 0)
    assert result.model_requests == result.batch_requests == result.valid
    assert result.batch_results == {"succeeded": 150} and result.max_requests_per_key == 1


def test_every_batch_fault_at_once_loses_no_row_and_bills_each_key_at_most_once(
    cdk_out: Path, tmp_path
):
    # GIVEN 80 rows by batch with every fault of the batch path at once: each event
    # delivered twice, Lambda throttling receives and killing results reads partway, kills
    # around creates, and batches answering errored (api_error) and expired results
    result = _run(
        cdk_out,
        tmp_path,
        80,
        delivery="batch",
        duplicates=2,
        kill_rate=0.9,
        throttle_rate=0.3,
        batch_create_kill_rate=0.3,
        batch_errored_rate=0.1,
        batch_expired_rate=0.1,
        seed=13,
        # A throttled receive waits out the buffer's visibility timeout (5,400 s of the run's
        # clock): 22.5 s here instead of 90 s at the default run-minute of 1 s.
        seconds_per_minute=FAST_CLOCK,
    )
    # THEN every per-key invariant holds: each row ends once, labelled or as a recorded
    # failure, and no key is billed twice (which faults fire, and how often, depends on how
    # the rows fell into receives and batches: seed 13 gave 1 results-read kill, 1 create
    # kill and 0-2 throttles over three runs)
    _assert_invariants(result)
    assert result.classified + result.failed == result.valid == 80, result
    assert result.max_requests_per_key == 1 and result.model_requests == result.classified
    assert result.batch_results.get("api_error", 0) + result.batch_results.get("expired", 0) > 0
    assert result.batch_requests > result.valid  # errored and expired rows went again


def test_auto_sends_a_small_upload_realtime(cdk_out: Path, tmp_path):
    # GIVEN the template's auto with batch_min_rows 2,000 and an upload of 12 rows
    result = _run(cdk_out, tmp_path, 12, delivery="auto")
    _assert_invariants(result)
    # THEN no batch was created: every row went realtime
    assert (result.batches, result.batch_requests, result.model_requests) == (0, 0, 12)


def test_json_reports_batches_and_batch_requests(cdk_out: Path, tmp_path, capsys):
    code = main(
        [
            "run",
            str(write_csv(tmp_path / "rows.csv", 10)),
            "--cdk-out",
            str(cdk_out),
            "--delivery",
            "batch",
            "--duplicates",
            "2",
            "--json",
            "--log-file",
            str(tmp_path / "handlers.log"),
        ]
    )
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0
    assert (line["delivery"], line["batch_requests"], line["model_requests"]) == ("batch", 10, 10)
    assert line["batches"] >= 1 and line["valid"] == 10


def test_delivery_batch_needs_the_batch_step(realtime_cdk_out: Path, tmp_path):
    with pytest.raises(UsageError, match="--delivery batch needs a Message Batches step"):
        _run(realtime_cdk_out, tmp_path, 2, delivery="batch")


def test_a_bad_delivery_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="--delivery must be one of realtime, batch, auto"):
        run_pipeline(RunOptions(csv_path=write_csv(tmp_path / "rows.csv", 1), delivery="later"))
