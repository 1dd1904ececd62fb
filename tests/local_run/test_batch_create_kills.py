"""Kills around a Message Batch create in a whole local run (issue 19): the crash points of
``tests/runtime/test_batch_crash_points.py`` (before the create is sent, after the model
created the batch, after the answer before the batch id is recorded), injected by the
engine with ``batch_create_kill_rate`` into the real ``ClassifyBatch`` invocations, the SQS
ones and the schedule's ticks. Whatever the point, no row is lost and no key is billed twice.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from bench.scale import write_csv
from constructs_lib.local_engine.errors import UsageError
from constructs_lib.local_engine.event_bus import DEFAULT_BUS
from constructs_lib.local_engine.identity import acting_as
from constructs_lib.local_engine.lambda_faults import (
    BATCH_CREATE_KILL_POINTS,
    FaultRates,
    LambdaFaults,
)
from constructs_lib.prospect_uploader.local_run import RunOptions
from constructs_lib.prospect_uploader.local_run.options import validate_options
from constructs_lib.prospect_uploader.local_run.pipeline import LocalPipeline
from constructs_lib.prospect_uploader.local_run.s3_events import s3_object_created_event

from .conftest import FAST_CLOCK

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("rate", [-0.1, 1.5, float("nan")])
def test_a_batch_create_kill_rate_outside_0_to_1_is_a_usage_error(tmp_path, rate):
    options = RunOptions(csv_path=write_csv(tmp_path / "rows.csv", 1), batch_create_kill_rate=rate)
    with pytest.raises(UsageError, match=r"--batch-create-kill-rate must be between 0 and 1, got"):
        validate_options(options)


def test_a_batch_create_kill_needs_the_local_model(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-not-used")
    options = RunOptions(
        csv_path=write_csv(tmp_path / "rows.csv", 1),
        model="anthropic",
        batch_create_kill_rate=0.5,
    )
    with pytest.raises(UsageError, match="--batch-create-kill-rate needs --model local"):
        validate_options(options)


def test_the_kill_points_are_drawn_per_create_in_order_and_reproduced_by_the_seed():
    def draws(seed: int, rate: float) -> list[str | None]:
        faults = LambdaFaults(FaultRates(seed=seed, batch_create_kill_rate=rate))
        return [faults.kill_around_batch_create() for _ in range(200)]

    first = draws(124, 0.5)
    assert first == draws(124, 0.5)
    assert first[:3] == ["before_batch_id_recorded", "after_create", "before_create"]
    assert set(first) == {None, *BATCH_CREATE_KILL_POINTS}
    assert 60 < sum(point is not None for point in first) < 140
    assert set(draws(124, 0.0)) == {None}


def _upload(pipeline: LocalPipeline, path: Path) -> None:
    """Upload ``path`` as a user would during the run."""
    engine = pipeline.engine
    assert pipeline.assembly is not None
    bucket = engine.aws.ref(pipeline.assembly.upload_bucket().logical_id)
    body = path.read_bytes()
    answer = engine.aws.client("s3").put_object(Bucket=bucket, Key=path.name, Body=body)
    event = s3_object_created_event(
        bucket, path.name, len(body), answer["ETag"], answer.get("VersionId")
    )
    assert engine.put_event(DEFAULT_BUS, event)


def _upload_at_each_create(pipeline: LocalPipeline, files: list[Path]) -> None:
    """Upload ``files[n]`` during the run's (n+1)-th batch create, before its request is
    sent: each upload's rows are a delivery, a submission and a create of their own, in a
    fixed order whatever the machine's load. The create waits for the upload, so the run
    cannot settle before it (a thread polling for the n-th create missed it on a loaded
    machine, and wall-clock spacing merged two uploads). The upload is the user's, made as
    the operator (``acting_as(None)``), not with the creating handler's role."""
    faults = pipeline.engine.faults
    draw = faults.kill_around_batch_create
    waiting = list(files)
    turn = threading.Lock()

    def draw_then_upload() -> str | None:
        with turn:
            point = draw()
            if waiting:
                with acting_as(None):
                    _upload(pipeline, waiting.pop(0))
        return point

    faults.kill_around_batch_create = draw_then_upload  # type: ignore[method-assign]


def test_kills_at_every_create_point_lose_no_row_and_bill_each_key_once(cdk_out: Path, tmp_path):
    # GIVEN three uploads of 10 rows, each made after the run's previous create (so each
    # is its own buffer delivery, submission and create), every event delivered twice, half
    # the creates killed; seed 124 kills the three first creates at the three points, in
    # the run's order of creates: before_batch_id_recorded, after_create, before_create
    # (the resend of the last one lives)
    files = [write_csv(tmp_path / f"rows-{n}.csv", 10) for n in range(3)]
    options = RunOptions(
        csv_path=files[0],
        cdk_out=cdk_out,
        duplicates=2,
        delivery="batch",
        batch_create_kill_rate=0.5,
        seed=124,
        seconds_per_minute=FAST_CLOCK,
        log_file=tmp_path / "handlers.log",
    )
    with LocalPipeline(options) as pipeline:
        # The first file is the run's own upload; each other one comes with a create.
        _upload_at_each_create(pipeline, files[1:])
        result = pipeline.run()
        engine = pipeline.engine
        dynamodb = engine.aws.session.resource("dynamodb")
        prospects = dynamodb.Table(engine.variable("PROSPECTS_TABLE_NAME")).scan()["Items"]
        failures = dynamodb.Table(engine.variable("FAILURES_TABLE_NAME")).scan()["Items"]
    # THEN each point killed one invocation
    assert result.batch_create_kills == dict.fromkeys(BATCH_CREATE_KILL_POINTS, 1), result
    # AND every row of the three uploads ended classified, each billed by one batch request
    summaries = [item for item in failures if item.get("kind") == "summary"]
    assert sorted(int(item["valid"]) for item in summaries) == [10, 10, 10]
    labelled = {
        (item["upload_id"], int(item["row_number"])) for item in prospects if item.get("label")
    }
    assert len(labelled) == 30
    assert not [item for item in failures if item.get("kind") == "model"]
    assert result.model_requests == result.batch_billed == result.billed_requests == 30
    assert result.max_requests_per_key == 1
    assert result.left_on_queue == 0
