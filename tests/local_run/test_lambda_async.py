"""Lambda async invocation: retries per the invoke config, one request id, on-failure record."""

from __future__ import annotations

import dataclasses
import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from constructs_lib.local_engine.assembly import FunctionSpec
from constructs_lib.local_engine.lambda_async import (
    AsyncFunction,
    AsyncSettings,
    function_identity,
)
from constructs_lib.local_engine.scheduling import Scheduler, WorkTracker
from constructs_lib.local_engine.targets import LambdaTarget, render_input


class IdempotencyAlreadyInProgressError(Exception):
    """Stand-in with Powertools' name: to Lambda it is just an error."""


@pytest.fixture
def world():
    executor = ThreadPoolExecutor(max_workers=2)
    scheduler = Scheduler()
    tracker = WorkTracker()
    yield executor, scheduler, tracker
    scheduler.stop()
    executor.shutdown()


def _function(world, handler, retry_attempts=2, records=None):
    executor, scheduler, tracker = world
    spec = FunctionSpec("Fn", "S/Fn/Resource", "m.handler", {}, retry_attempts=retry_attempts)
    return AsyncFunction(
        spec,
        handler,
        function_identity("fn"),
        executor=executor,
        scheduler=scheduler,
        tracker=tracker,
        settings=AsyncSettings(seconds_per_minute=0.01),
        on_failure=None if records is None else records.append,
    )


def test_errors_are_retried_then_sent_on_failure_with_lambdas_record_shape(world):
    contexts, remaining, records = [], [], []

    def handler(event, context):
        contexts.append(context)
        remaining.append((context.get_remaining_time_in_millis(), time.monotonic()))
        raise IdempotencyAlreadyInProgressError("in progress")

    function = _function(world, handler, retry_attempts=2, records=records)
    invoked = time.monotonic()
    function.invoke({"detail": {"row_number": 1}})
    assert world[2].wait_idle(10)
    assert len(contexts) == 3  # 1 attempt + MaximumRetryAttempts 2
    assert len({c.aws_request_id for c in contexts}) == 1  # one request id per invocation
    # The first attempt's context had the template default, 3 s, from when it was made (after
    # the invoke): read in the handler, at most 3 s and at least 3 s less the time since the
    # invoke, whatever the load
    left_ms, read_at = remaining[0]
    assert (3.0 - (read_at - invoked)) * 1000 - 1 <= left_ms <= 3000
    (record,) = records
    json.dumps(record)  # it is sent to SQS as JSON
    assert record["requestContext"]["condition"] == "RetriesExhausted"
    assert record["requestContext"]["approximateInvokeCount"] == 3
    assert record["requestContext"]["requestId"] == contexts[0].aws_request_id
    assert record["requestContext"]["functionArn"].endswith(":function:fn:$LATEST")
    assert record["requestPayload"] == {"detail": {"row_number": 1}}
    assert record["responsePayload"]["errorType"] == "IdempotencyAlreadyInProgressError"
    assert record["responsePayload"]["errorMessage"] == "in progress"
    assert record["responseContext"]["functionError"] == "Unhandled"
    stats = function.stats
    assert (stats.deliveries, stats.attempts, stats.retries, stats.on_failure) == (1, 3, 2, 1)


def test_a_later_success_settles_without_an_on_failure_record(world):
    calls, records = [], []

    def handler(event, context):
        calls.append(1)
        if len(calls) < 2:
            raise RuntimeError("transient")
        return {"ok": True}

    function = _function(world, handler, records=records)
    function.invoke({})
    assert world[2].wait_idle(10)
    assert len(calls) == 2 and not records
    assert function.stats.succeeded == 1


def test_duplicates_deliver_two_at_once_then_the_rest(world):
    seen = []
    function = _function(world, lambda event, context: seen.append(event["id"]))
    LambdaTarget(function, world[2], duplicates=4).deliver({"id": "e1"})
    assert world[2].wait_idle(10)
    assert seen == ["e1"] * 4
    assert function.stats.deliveries == 4


def test_input_transformer_renders_cdk_text_templates():
    class Target:
        input = None
        input_path = None
        input_transformer = {
            "InputPathsMap": {"id": "$.detail.upload_id", "n": "$.detail.invalid"},
            "InputTemplate": '"Upload <id> had <n> invalid rows"',
        }

    event = {"detail": {"upload_id": 'a"b', "invalid": 3}}
    assert render_input(event, Target()) == 'Upload a"b had 3 invalid rows'


def test_an_attempt_past_its_deadline_is_counted_as_an_overrun_pass_or_fail(world):
    # GIVEN a context that reports 0.05 s, and handlers that sleep 0.1 s (longer on any
    # machine: a load only stretches a sleep), one returning and one raising
    executor, scheduler, tracker = world
    spec = FunctionSpec("Fn", "S/Fn/Resource", "m.handler", {}, retry_attempts=0)

    def slow(event, context):
        time.sleep(0.1)
        if event.get("fail"):
            raise RuntimeError("late and failed")

    function = AsyncFunction(
        spec,
        slow,
        function_identity("fn"),
        executor=executor,
        scheduler=scheduler,
        tracker=tracker,
        settings=AsyncSettings(seconds_per_minute=0.01, timeout_cap_seconds=0.05),
        on_failure=None,
    )
    # WHEN both run THEN both are overruns (Lambda would have killed them), and a quick
    # attempt is not
    function.invoke({"fail": False})
    function.invoke({"fail": True})
    assert tracker.wait_idle(10)
    assert function.stats.overruns == 2
    # An attempt that ends with a minute left (not 0.05 s, which a pause before the check
    # could use up) is no overrun
    quick = dataclasses.replace(function.context("quick"), deadline=time.monotonic() + 60)
    function.count_overrun(quick)
    assert function.stats.overruns == 2
