"""No save failure leaves a key locked; the stored result is capped (issue 9.3).

DynamoDB faults are injected at the AWS boundary (a botocore ``before-call`` hook on the session
the step's clients come from); moto enforces DynamoDB's 400 KB item limit itself.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

import pytest
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
)
from botocore.exceptions import ClientError
from model_step.model_call import MAX_STORED_ANSWER_BYTES
from model_step.persistence import ReleasingDynamoDBPersistenceLayer

from .conftest import TABLE, FakeLambdaContext, boto3_session, make_event, prospect_detail
from .kill_points import HeldFirstRequest, stopped_clock


@pytest.fixture
def failing_update_item():
    """Make the next N saves of a result (Powertools' UpdateItem that writes ``data``) fail
    the way DynamoDB throttling does."""
    state = {"left": 0}

    def hook(params, **_kwargs):
        if state["left"] > 0 and ":response_data" in params.get("ExpressionAttributeValues", {}):
            state["left"] -= 1
            raise ClientError(
                {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow"}},
                "UpdateItem",
            )

    events = boto3_session().events
    events.register("before-parameter-build.dynamodb.UpdateItem", hook)
    yield state
    events.unregister("before-parameter-build.dynamodb.UpdateItem", hook)


def test_failed_update_item_releases_the_record_so_the_retry_runs(
    make_step, fake_api, model_env, failing_update_item
):
    failing_update_item["left"] = 1
    step = make_step()
    event = make_event()

    with pytest.raises(Exception, match="Failed to update record"):
        step.handle(event, FakeLambdaContext())
    # Released, not left INPROGRESS until the attempt's deadline.
    assert model_env.idempotency_items() == []

    result = step.handle(event, FakeLambdaContext())
    assert result["status"] == "completed"
    assert fake_api.request_count == 2
    assert step.handle(event, FakeLambdaContext()) == result


def test_an_item_over_400_kb_is_released_not_left_in_progress(model_env):
    # The persistence layer on its own, against moto's real 400 KB item limit.
    layer = ReleasingDynamoDBPersistenceLayer(
        table_name=TABLE, boto3_client=boto3_session().client("dynamodb")
    )
    layer.configure(IdempotencyConfig(event_key_jmespath="key"), key_prefix="p")
    data = {"key": ["upload-001", 1]}
    layer.save_inprogress(data=data, remaining_time_in_millis=30_000)
    assert [i["status"]["S"] for i in model_env.idempotency_items()] == ["INPROGRESS"]

    with pytest.raises(ClientError, match="size"):
        layer.save_success(data=data, result={"answer": "x" * 450_000})
    assert model_env.idempotency_items() == []


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("A" * 450_000, id="ascii-450kb"),
        pytest.param("é" * 150_000, id="non-ascii-escaped-6x"),
        pytest.param("\x01" * 80_000, id="control-chars"),
    ],
)
def test_a_long_answer_is_stored_capped_and_replayed(make_step, fake_api, model_env, text):
    fake_api.text = text
    step = make_step()

    result = step.handle(make_event(), FakeLambdaContext())
    again = step.handle(make_event(), FakeLambdaContext())

    assert fake_api.request_count == 1
    assert result["answer_truncated"] is True
    assert len(json.dumps(result["answer"])) <= MAX_STORED_ANSWER_BYTES
    assert text.strip().startswith(result["answer"])
    assert again == result
    [item] = model_env.idempotency_items()
    assert item["status"]["S"] == "COMPLETED"


def test_a_short_answer_is_not_marked_truncated(make_step, fake_api):
    assert make_step().handle(make_event(), FakeLambdaContext())["answer_truncated"] is False


def test_a_parsed_value_too_large_to_store_is_a_stored_dead_letter(make_step, fake_api, model_env):
    step = make_step(parse_answer=lambda text: {"blob": "y" * 350_000})

    result = step.handle(make_event(), FakeLambdaContext())
    again = step.handle(make_event(), FakeLambdaContext())

    assert result["error_code"] == "ResultTooLarge"
    assert again == result
    assert fake_api.request_count == 1
    assert len(model_env.dead_letters()) == 1


@dataclass
class DeadlineContext(FakeLambdaContext):
    """A Lambda context whose FIRST reading of the remaining time (Powertools', at the
    in-progress save) is ``first_millis``; later readings (the SDK timeout) are the default."""

    first_millis: int = 1_000
    _read: bool = False

    def get_remaining_time_in_millis(self) -> int:
        if not self._read:
            self._read = True
            return self.first_millis
        return self.remaining_millis


def test_a_timed_out_holders_lock_expires_at_its_deadline(
    make_step, fake_api, model_env, monkeypatch
):
    """register_lambda_context: the in-progress record expires at the holder's Lambda deadline,
    so a duplicate after that deadline takes over instead of failing behind the lock."""
    # The holder is still waiting for its answer when its Lambda deadline passes: its request
    # is held until the takeover is done. The clock moves only when advanced, so "before"
    # and "after the deadline" are the test's moves, not the machine's speed. The holder's
    # request itself may wait minutes of real time (its SDK timeout reads the later readings).
    monkeypatch.setenv("MODEL_TIMEOUT_SECONDS", "600")
    held = fake_api.script = HeldFirstRequest()
    step = make_step()
    event = make_event()
    with stopped_clock() as clock:
        holder = threading.Thread(
            target=lambda: step.handle(
                event, DeadlineContext(first_millis=1_000, remaining_millis=600_000)
            ),
            daemon=True,
        )
        holder.start()
        try:
            # The holder saved its in-progress record before its request reached the model.
            assert held.reached.wait(timeout=60)
            with pytest.raises(IdempotencyAlreadyInProgressError):
                step.handle(event, FakeLambdaContext())  # before the deadline: a live holder

            clock.advance(1.001)  # just past the holder's deadline
            result = step.handle(event, FakeLambdaContext())
        finally:
            held.release.set()
            holder.join(timeout=60)
    assert not holder.is_alive()

    assert result["status"] == "completed"
    assert fake_api.request_count == 2


def test_record_expiry_is_the_configured_lifetime(make_step, fake_api, model_env, monkeypatch):
    monkeypatch.setenv("MAX_EVENT_AGE_SECONDS", "3600")
    monkeypatch.setenv("IDEMPOTENCY_EXPIRES_AFTER_SECONDS", "50000")
    before = time.time()
    make_step().handle(make_event(prospect_detail(row_number=4)), FakeLambdaContext())

    [item] = model_env.idempotency_items()
    expiration = int(item["expiration"]["N"])
    assert before + 50000 - 5 <= expiration <= time.time() + 50000 + 5
