"""The whole pipeline in-process: the real handlers, moto, the local model, the cdk.out rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from constructs_lib.prospect_uploader.local_run import (
    RunOptions,
    RunResult,
    check_invariants,
    run_pipeline,
)

from .billing import assert_billed, assert_one_billed_request_per_row
from .conftest import SAMPLE


def _assert_invariants(result: RunResult) -> None:
    failing = [check for check in check_invariants(result) if not check.ok]
    assert not failing, failing


@pytest.fixture(scope="module")
def duplicated_run(cdk_out: Path, tmp_path_factory) -> RunResult:
    log = tmp_path_factory.mktemp("logs") / "handlers.log"
    return run_pipeline(RunOptions(csv_path=SAMPLE, cdk_out=cdk_out, duplicates=3, log_file=log))


def _classify_queue(result: RunResult, name: str) -> dict:
    """The counters of Classify's ``BufferQueue`` or ``RedriveQueue`` (both feed its function)."""
    (queue,) = [
        q for queue_name, q in result.queues.items()
        if q.get("consumer") == "Classify/Function" and f"-Classify{name}" in queue_name
    ]  # fmt: skip
    return queue


def test_sample_with_three_deliveries_calls_the_model_once_per_row(duplicated_run):
    result = duplicated_run
    _assert_invariants(result)
    assert result.status == "completed"
    assert result.rows == result.summary_rows == 40
    assert result.valid > 0 and result.invalid > 0
    assert_one_billed_request_per_row(result)
    # --duplicates 3 re-ran the split twice (Lambda retries after a failed attempt). A repeat
    # within RowBus's 300 s window (the run's clock) is answered DEDUPLICATED and delivered
    # to no one; on a quiet machine both repeats are, so Classify sees only the copies
    # injected downstream of the bus (3 of each row). Under load a repeat can fall past the
    # window (make test-loaded: 34 of 68 deduplicated): its entries are delivered too, and
    # answered from their records. Either way each entry is one or the other.
    assert result.split_runs == 3
    assert result.row_entries_sent == 3 * result.valid
    assert result.valid <= result.row_entries_sent - result.deduplicated <= 3 * result.valid
    delivered = 3 * (result.row_entries_sent - result.deduplicated)
    if result.functions["Splitter"]["overruns"] == 0:
        assert result.deliveries == delivered
    else:  # A splitter past its (capped) deadline released its record and ran again.
        assert result.deliveries >= delivered and result.deliveries % 3 == 0
    assert result.failed == result.dlq  # 0 unless every attempt of a row was late (above)
    assert sum(result.labels.values()) == result.classified
    assert set(result.labels) <= {"hot", "warm", "cold"}
    # Concurrent duplicates met the first delivery's record IN_PROGRESS and came back later
    # (a batch item failure or a delayed copy); the mapping never exceeded its cap.
    classify = result.functions["Classify/Function"]
    assert classify["attempts"] > result.deliveries
    buffer = _classify_queue(result, "BufferQueue")
    assert buffer["first_receives"] >= result.deliveries
    assert 1 <= buffer["peak_concurrency"] <= buffer["max_concurrency"] == 10
    assert buffer["left"] == 0 and buffer["redriven"] == 0
    redrive = _classify_queue(result, "RedriveQueue")
    assert redrive["max_concurrency"] == 2 and redrive["received"] == redrive["left"] == 0
    assert result.alerts == 1  # the sample has invalid rows


def test_the_sample_writes_the_prompt_cache_at_most_once_a_ttl_and_reads_it_otherwise(
    duplicated_run,
):
    result = duplicated_run
    # Every billed answer used the cache: it wrote the classifier's rubric (longer than the
    # default model's minimum cacheable length) or read it.
    billed = result.model_requests - result.rate_limited
    assert result.cache_writes + result.cache_reads == billed
    # The first request wrote it; each read refreshes the 5 min TTL (the stack's
    # PROMPT_CACHE, on the run's clock), so a later write follows a gap of more than 5
    # run-minutes with no request. Those gaps are disjoint and within the run: at most one
    # write more per 5 minutes the run lasted. On a quiet machine the requests come closer
    # together (1 write, valid - 1 reads); a loaded machine can stretch a gap past the TTL
    # with no late attempt at all (3.7 s of the 5 s with two CPU hogs; a late attempt adds
    # a billed request, so a read, and its retry may come after such a gap).
    assert 1 <= result.cache_writes
    assert (result.cache_writes - 1) * 5 < result.run_minutes + 0.01, result
    # Each write is the whole rubric, and each read reads what the writes wrote.
    rubric, rest = divmod(result.cache_creation_input_tokens, result.cache_writes)
    assert rest == 0 and rubric >= 4096
    assert result.cache_read_input_tokens == result.cache_reads * rubric
    # Priced at the stack's MODEL_PRICE: the default model is in the price table.
    assert result.cost_usd is not None and result.cost_usd > 0


def test_handler_logs_go_to_the_log_file(duplicated_run):
    log = Path(duplicated_run.log_file).read_text()
    assert '"service":"prospect-splitter"' in log.replace(" ", "")
    assert '"_aws"' in log  # EMF metrics of the model step


def test_a_binding_rate_limit_loses_no_row_and_bills_each_row_once(cdk_out: Path, tmp_path):
    # 34 valid rows at 2 requests per run-minute (a minute lasting 0.5 s): 4 a second, which
    # binds even when a loaded machine offers fewer than 20 a second (10 per 0.5 s did not).
    # A 20 s context (17 s SDK timeout, 20 s in-progress expiry): with the default 4 s, a
    # loaded CI machine can time a request out after the model counted it, and the
    # transient retry is then a second billed request, a fault this test does not inject.
    result = run_pipeline(
        RunOptions(
            csv_path=SAMPLE,
            cdk_out=cdk_out,
            duplicates=2,
            rate_limit=2,
            seconds_per_minute=0.5,
            timeout_cap_seconds=20.0,
            log_file=tmp_path / "handlers.log",
        )
    )
    _assert_invariants(result)
    assert result.rate_limited > 0
    assert_one_billed_request_per_row(result)
    # One output token a billed answer (the label), a late attempt's answer included.
    assert_billed(result.output_tokens, result.classified, result.late_attempts, "output tokens")
    assert result.input_tokens > 0
    assert result.elapsed_s > 0 and result.run_minutes == pytest.approx(result.elapsed_s * 2)


def test_the_classic_bus_has_no_publish_side_dedup_and_the_consumer_key_holds(
    classic_cdk_out: Path, tmp_path
):
    # -c event_bus=classic: the same re-run splits publish every row again, nothing is
    # deduplicated, Classify gets each publish's copies, and still one request per row.
    result = run_pipeline(
        RunOptions(
            csv_path=SAMPLE,
            cdk_out=classic_cdk_out,
            duplicates=2,
            log_file=tmp_path / "handlers.log",
        )
    )
    _assert_invariants(result)
    assert result.status == "completed" and result.alerts == 1
    assert result.split_runs == 2
    assert result.deduplicated == 0
    assert result.row_entries_sent == 2 * result.valid
    assert result.deliveries == 2 * 2 * result.valid
    assert_one_billed_request_per_row(result)
