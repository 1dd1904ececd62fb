"""Issue 9.1 end to end: stored dead-letter outcomes and the viewer's operator retry.

A row the local model rejects with 400 (the ``invalid`` fault plan) is dead-lettered by the
step at once. Its duplicate deliveries replay the stored outcome: no model request and no
second dead letter. The viewer's Retry (the real handler, in-process, under its own role)
publishes the row again on RowBus with ``replay_generation`` 1: exactly one new request,
and its own duplicate deliveries replay that generation's outcome.

The faulted sample run (seed 7) whose deadline row is retried also shows where the run's
faults end: in the failure store, within the retry bound (one run for both).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from constructs_lib.local_engine import identity
from constructs_lib.prospect_uploader.local_run import RunOptions, RunResult, check_invariants
from constructs_lib.prospect_uploader.local_run.pipeline import LocalPipeline

from .billing import assert_billed, late_attempts
from .conftest import SAMPLE

# Seeded so that the sample has rows on the "invalid" plan (every request a 400).
FAULT_RATE, SEED = 0.3, 11


def _failure_queue(pipeline: LocalPipeline) -> dict:
    (queue,) = [
        q for q in pipeline.engine.queue_stats().values() if q.get("consumer") == "FailureRecorder"
    ]
    return queue


def _viewer(pipeline: LocalPipeline, path: str, body: dict) -> dict:
    assembly = pipeline.assembly
    assert assembly is not None
    resource = assembly.by_path_suffix("/Viewer/Resource", "AWS::Lambda::Function")
    function = pipeline.engine.functions[resource.logical_id]
    local_server = pipeline.engine.runtime.module("prospect_viewer.local_server")
    event = local_server.to_function_url_event(
        "POST",
        path,
        {"host": "viewer.local", "content-type": "application/json", "x-requested-with": "t"},
        json.dumps(body).encode(),
        "127.0.0.1",
    )
    with identity.acting_as(resource.logical_id):  # its calls are checked against its role
        answer = function.handler(event, None)
    return {"status": answer["statusCode"], "body": json.loads(answer.get("body") or "{}")}


def test_a_retry_makes_one_request_and_a_dead_letters_duplicates_none(
    cdk_out: Path, tmp_path: Path
):
    options = RunOptions(
        csv_path=SAMPLE,
        cdk_out=cdk_out,
        duplicates=2,
        fault_rate=FAULT_RATE,
        seed=SEED,
        log_file=tmp_path / "handlers.log",
    )
    with LocalPipeline(options) as pipeline:
        result = pipeline.run()
        model = pipeline.model
        assert model is not None
        invalid = {
            digest: count
            for digest, count in model.requests_by_content().items()
            if model.plan_of(digest).kind == "invalid"
        }
        assert invalid, "the seed put no row on the invalid plan"
        # Each rejected row: one request, though the row reached Classify twice (plus a
        # retry of each request a loaded machine timed out after the model counted it).
        late_before = late_attempts(pipeline.engine)
        assert_billed(sum(invalid.values()), len(invalid), late_before, "rejected rows' requests")
        assert result.deliveries >= 2 * result.valid
        # One dead letter per failed row, whatever the duplicates.
        assert result.failed == result.dlq > 0
        sent_before = _failure_queue(pipeline)["sent"]
        assert sent_before == result.dlq

        table = pipeline.engine.aws.session.resource("dynamodb").Table(
            pipeline.engine.environment["FAILURES_TABLE_NAME"]
        )
        items = table.scan()["Items"]
        rejected = [
            item
            for item in items
            if item.get("kind") == "model" and item.get("error_code") == "BadRequestError"
        ]
        assert rejected
        item = rejected[0]
        requests_before = model.request_count
        by_content_before = model.requests_by_content()

        key = {"upload_id": item["upload_id"], "failure_id": item["failure_id"]}
        answer = _viewer(pipeline, "/api/retry", {**key, "expected_generation": 0})
        assert answer["status"] == 200, answer
        assert answer["body"]["replay_generation"] == 1
        # The same generation pressed again: refused, nothing published.
        again = _viewer(pipeline, "/api/retry", {**key, "expected_generation": 0})
        assert again["status"] == 409, again

        pipeline.engine.wait_until_settled()
        pipeline.engine.drain_event_sources()

        # Exactly one new model request, for that row (the 400 is deterministic per row),
        # unless a loaded machine timed it out after the model counted it (then retried).
        late = late_attempts(pipeline.engine) - late_before
        assert_billed(model.request_count, requests_before + 1, late, "model requests")
        after = model.requests_by_content()
        changed = {d: n for d, n in after.items() if n != by_content_before.get(d, 0)}
        [(digest, count)] = changed.items()
        assert digest in invalid
        assert_billed(count, by_content_before[digest] + 1, late, "the retried row's requests")
        # The retry's generation dead-lettered once; its duplicate delivery replayed that.
        assert _failure_queue(pipeline)["sent"] == sent_before + 1
        stored = table.get_item(Key=key)["Item"]
        assert int(stored["replay_generation"]) == 1


def _viewer_get(pipeline: LocalPipeline, path: str, query: dict[str, str]) -> dict:
    assembly = pipeline.assembly
    assert assembly is not None
    resource = assembly.by_path_suffix("/Viewer/Resource", "AWS::Lambda::Function")
    function = pipeline.engine.functions[resource.logical_id]
    local_server = pipeline.engine.runtime.module("prospect_viewer.local_server")
    event = local_server.to_function_url_event(
        "GET", path + "?" + urlencode(query), {"host": "viewer.local"}, b"", "127.0.0.1"
    )
    with identity.acting_as(resource.logical_id):
        answer = function.handler(event, None)
    assert answer["statusCode"] == 200, answer
    return json.loads(answer["body"])


@dataclass
class DeadlineRetry:
    """A faulted run (seed 7) and what the operator's Retry of its deadline row did."""

    result: RunResult
    item: dict[str, Any]
    before: dict[str, Any]
    answer: dict[str, Any]
    billed_before: int
    billed: int
    late: int
    after: dict[str, Any]


@pytest.fixture(scope="module")
def deadline_retry(cdk_out: Path, tmp_path_factory: pytest.TempPathFactory) -> DeadlineRetry:
    """The sample run with 30 % model faults (seed 7), each event twice, whose one row
    every request of times out (ModelDeadlineExceeded after its 3 attempts), then Retry
    pressed on that row. One run for the two tests that read it (the failure store's
    outcome of the run, and the retry's); the pipeline is closed before they start, so
    no other run of this module meets it open."""
    tmp = tmp_path_factory.mktemp("deadline-retry")
    options = RunOptions(
        csv_path=SAMPLE,
        cdk_out=cdk_out,
        duplicates=2,
        fault_rate=0.3,
        seed=7,
        log_file=tmp / "handlers.log",
    )
    with LocalPipeline(options) as pipeline:
        result = pipeline.run()
        engine = pipeline.engine
        table = engine.aws.session.resource("dynamodb").Table(
            engine.environment["FAILURES_TABLE_NAME"]
        )
        [item] = [
            i for i in table.scan()["Items"] if i.get("error_code") == "ModelDeadlineExceeded"
        ]
        key = {"upload_id": item["upload_id"], "failure_id": item["failure_id"]}
        before = _viewer_get(pipeline, "/api/failures", {"upload_id": key["upload_id"]})
        billed_before = sum(engine.model_requests.billed.values())
        late_before = late_attempts(engine)

        # The operator presses Retry on it.
        answer = _viewer(pipeline, "/api/retry", {**key, "expected_generation": 0})
        engine.wait_until_settled()
        engine.drain_event_sources()

        return DeadlineRetry(
            result=result,
            item=item,
            before=before,
            answer=answer,
            billed_before=billed_before,
            billed=sum(engine.model_requests.billed.values()),
            late=late_attempts(engine) - late_before,
            after=_viewer_get(pipeline, "/api/failures", {"upload_id": key["upload_id"]}),
        )


def test_a_retried_deadline_row_bills_one_request_and_shows_its_own_outcome(
    deadline_retry: DeadlineRetry,
):
    # GIVEN a faulted run (seed 7) with a row whose every request times out: it ended
    # ModelDeadlineExceeded after its 3 attempts
    run = deadline_retry
    item = run.item
    [row] = [i for i in run.before["items"] if i["failure_id"] == item["failure_id"]]
    assert row["outcome"]["state"] == "failed" and row["outcome"]["attempt"] == 3

    # WHEN the operator presses Retry on it
    assert run.answer["status"] == 200, run.answer

    # THEN exactly one more billed request (unless a loaded machine made one late)
    assert_billed(run.billed, run.billed_before + 1, run.late, "billed requests of the retry")
    # and the row shows the retry's own outcome: failed again, attempt 1 of 1, its time
    [row] = [i for i in run.after["items"] if i["failure_id"] == item["failure_id"]]
    outcome = row["outcome"]
    assert outcome["state"] == "failed", outcome
    # (the row's plan fails each request in turn: 500, 500, a timeout, ...)
    assert outcome["generation"] == 1
    assert outcome["error_code"] in {"InternalServerError", "ModelDeadlineExceeded"}
    assert (outcome["attempt"], outcome["of"]) == (1, 1)
    assert outcome["recorded_at"] > item["recorded_at"]
    assert (row["error_code"], row["replay_generation"]) == (outcome["error_code"], 1)
    # with the history of both failures kept on the row
    assert [(a["generation"], a["error_code"]) for a in row["attempts"]] == [
        (0, "ModelDeadlineExceeded"),
        (1, outcome["error_code"]),
    ]
    assert "on attempt 1 of 1" in row["reason_text"]
    assert f"Code {outcome['error_code']}" in row["reason_text"]
    assert row["retryable"] is True  # failed again: it may be retried once more


def _assert_invariants(result: RunResult) -> None:
    failing = [check for check in check_invariants(result) if not check.ok]
    assert not failing, failing


def test_faults_end_in_the_failure_store_and_stay_within_the_retry_bound(
    deadline_retry: DeadlineRetry,
):
    # The run's own outcome, as it was when it settled (before the Retry).
    result = deadline_retry.result
    _assert_invariants(result)
    assert result.failed > 0
    assert result.failed == result.dlq
    billed = result.model_requests - result.rate_limited
    assert billed <= (result.retry_attempts + 1) * result.valid
    assert result.retry_attempts + 1 == 3  # the step's MAX_ATTEMPTS
    failures = {k: v for k, v in result.model_outcomes.items() if k != "200"}
    assert failures, "the local model injected no fault"
    # Transient failures were retried from the buffer queue, and nothing was left on it.
    (buffer,) = [q for q in result.queues.values() if q["path"] == "Classify/BufferQueue"]
    assert buffer["received"] > buffer["first_receives"] or buffer["delayed_sends"] > 0
    assert buffer["left"] == 0
    assert "400" in failures  # ... and the handler dead-lettered a rejected request itself
    assert result.left_on_queue == 0
