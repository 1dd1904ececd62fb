"""A key's result event is published at most once, in a bounded number of tries (issue 31,
item 2).

GIVEN the real handler, Powertools and moto on a movable clock (a killed holder's lock expires
when the clock passes its deadline), a classic bus in moto whose rule routes result events to
a queue, and a v2 bus answered by a botocore hook that deduplicates as EventBridge v2 does
(a repeated ``DeduplicationId`` within 300 s is dropped), WHEN deliveries are killed between
PutEvents and the hand-off's record, or the bus refuses every publish, THEN one event per key
at most, and a row that never ends in an unbounded cycle.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError, ReadTimeoutError
from model_step.result_events import COMPLETED

from tests.faults.harness import MovableClock

from . import kill_points
from .conftest import FakeLambdaContext, boto3_session, fresh_event
from .kill_points import PAST_THE_DEADLINE
from .test_combined_faults import emf, metric_total, run
from .test_result_events import SOURCE, ResultBus

V2_BUS_ARN = "arn:aws:events:us-east-1:123456789012:event-busv2/results/1"


@pytest.fixture
def clock():
    with kill_points.movable_clock() as clock:
        yield clock


@pytest.fixture
def kill_after_put_events() -> Iterator[dict]:
    with kill_points.after_put_events() as state:
        yield state


@pytest.fixture
def classic_bus(model_env, monkeypatch) -> ResultBus:
    """A classic bus in moto whose rule sends the step's result events to a queue."""
    bus = ResultBus()
    monkeypatch.setenv("RESULT_BUS_ARN", bus.arn)
    monkeypatch.setenv("RESULT_EVENT_SOURCE", SOURCE)
    monkeypatch.setenv("ALLOWED_LABELS", "hot,warm,cold")
    return bus


class DeduplicatingV2Bus:
    """Answers ``eventbridgev2`` PutEvents as EventBridge v2 does (moto has no v2 bus): an
    entry whose DeduplicationId was accepted in the last 300 s is answered DEDUPLICATED and
    not delivered."""

    WINDOW = 300

    def __init__(self, clock: MovableClock) -> None:
        self.clock = clock
        self.calls: list[dict] = []
        self.delivered: list[dict] = []
        self._accepted: dict[str, float] = {}

    def record(self, params, **_kwargs):
        self.calls.append(json.loads(json.dumps(params)))

    def answer(self, **_kwargs):
        [entry] = self.calls[-1]["Entries"]
        dedup_id = entry["SystemMetadata"]["DeduplicationId"]
        now = self.clock.now()
        first = self._accepted.get(dedup_id)
        if first is not None and now - first < self.WINDOW:
            answer = {"EventId": "dup", "SuccessCode": "DEDUPLICATED"}
        else:
            self._accepted[dedup_id] = now
            self.delivered.append(entry)
            answer = {"EventId": f"e-{len(self.delivered)}"}
        parsed = {"Entries": [answer], "ResponseMetadata": {"HTTPStatusCode": 200}}
        return AWSResponse("https://events.local", 200, {}, None), parsed


@pytest.fixture
def v2_bus(model_env, clock, monkeypatch) -> Iterator[DeduplicatingV2Bus]:
    bus = DeduplicatingV2Bus(clock)
    monkeypatch.setenv("RESULT_BUS_ARN", V2_BUS_ARN)
    monkeypatch.setenv("RESULT_BUS_KIND", "v2")
    monkeypatch.setenv("RESULT_EVENT_SOURCE", SOURCE)
    hooks = boto3_session().events
    hooks.register("provide-client-params.eventbridgev2.PutEvents", bus.record)
    hooks.register("before-call.eventbridgev2.PutEvents", bus.answer)
    yield bus
    hooks.unregister("provide-client-params.eventbridgev2.PutEvents", bus.record)
    hooks.unregister("before-call.eventbridgev2.PutEvents", bus.answer)


@pytest.fixture
def refusing_bus() -> Iterator[dict]:
    """The classic bus refuses every PutEvents (AccessDenied) while ``state["on"]``."""
    state = {"on": True, "refused": 0}

    def refuse(**_kwargs):
        if state["on"]:
            state["refused"] += 1
            raise ClientError({"Error": {"Code": "AccessDeniedException"}}, "PutEvents")

    hooks = boto3_session().events
    hooks.register("before-call.events.PutEvents", refuse)
    yield state
    hooks.unregister("before-call.events.PutEvents", refuse)


# -- a kill between PutEvents and its record -----------------------------------------------------
@pytest.mark.parametrize("kills", [1, 2])
def test_on_a_classic_bus_a_kill_after_put_events_publishes_no_second_event(
    make_step, fake_api, buffer, classic_bus, clock, kill_after_put_events, kills, capsys
):
    """The issue's case: 2 "Model Step Completed" events for one key after one kill, 3
    after two."""
    step = make_step()
    batch = buffer.batch(fresh_event())
    for _ in range(kills):  # every PutEvents of these deliveries is followed by a kill
        kill_after_put_events["left"] = 1
        run(step, batch)
        clock.advance(PAST_THE_DEADLINE)
    kill_after_put_events["left"] = 0
    for _ in range(2):
        assert step.handle(batch, FakeLambdaContext()) == {"batchItemFailures": []}

    [event] = classic_bus.received()
    assert event["detail-type"] == COMPLETED
    assert fake_api.request_count == 1
    # Which of the two it was, nobody can tell on a classic bus: counted, and alarmed.
    assert metric_total(emf(capsys), "ResultEventsUncertain") == 1


@pytest.mark.parametrize(
    ("later", "sends", "uncertain"),
    [(PAST_THE_DEADLINE, 2, 0), (300, 1, 1)],
    ids=["within-the-window-sent-again", "past-the-window-not-sent"],
)
def test_on_a_v2_bus_a_kill_after_put_events_is_sent_again_only_where_the_bus_drops_it(
    make_step, fake_api, buffer, v2_bus, clock, kill_after_put_events, capsys, later, sends,
    uncertain,
):  # fmt: skip
    """Within the 300 s window (less 60 s) the same DeduplicationId goes again and the bus
    drops it; past it, a re-send could arrive after the bus forgot the first: not sent."""
    step = make_step()
    batch = buffer.batch(fresh_event())
    kill_after_put_events["left"] = 1
    assert run(step, batch) == "killed"
    clock.advance(later)
    step.handle(batch, FakeLambdaContext())
    step.handle(batch, FakeLambdaContext())

    assert len(v2_bus.calls) == sends and len(v2_bus.delivered) == 1
    assert all(call["Entries"] == v2_bus.calls[0]["Entries"] for call in v2_bus.calls)
    assert metric_total(emf(capsys), "ResultEventsUncertain") == uncertain


def test_a_read_timeout_is_not_resent_by_botocore_and_not_published_again_on_a_classic_bus(
    make_step, fake_api, buffer, classic_bus, capsys
):
    sends = []

    def time_out(**_kwargs):
        sends.append(1)
        if len(sends) == 1:
            raise ReadTimeoutError(endpoint_url="https://events.us-east-1.amazonaws.com")

    hooks = boto3_session().events
    hooks.register("before-send.events.PutEvents", time_out)
    try:
        step = make_step()
        batch = buffer.batch(fresh_event())
        assert step.handle(batch, FakeLambdaContext())["batchItemFailures"]
        assert len(sends) == 1  # one HTTP attempt: botocore did not send it again
        assert step.handle(batch, FakeLambdaContext()) == {"batchItemFailures": []}
    finally:
        hooks.unregister("before-send.events.PutEvents", time_out)

    assert len(sends) == 1  # the bus may have it: at most once, so not again
    assert classic_bus.received() == []  # (here it did not: the uncertain case)
    assert metric_total(emf(capsys), "ResultEventsUncertain") == 1


# -- a bus that refuses every publish -------------------------------------------------------------
def test_a_bus_refusing_every_publish_ends_in_a_coded_dead_letter_after_five_deliveries(
    make_step, fake_api, model_env, buffer, classic_bus, refusing_bus, outcomes
):
    """The issue's case: the row cycled through the redrive queue without bound (60
    invocations over 9 h, never on the DLQ)."""
    step = make_step(on_outcome=outcomes)
    event = fresh_event()
    batch = buffer.batch(event)
    responses = [step.handle(batch, FakeLambdaContext()) for _ in range(6)]

    assert [bool(r["batchItemFailures"]) for r in responses] == [True] * 4 + [False] * 2
    assert refusing_bus["refused"] == 5  # the sixth replays the finished hand-off
    assert fake_api.request_count == 1
    [message] = model_env.dead_letters()
    assert message["attributes"]["ERROR_CODE"] == "ResultEventUndeliverable"
    assert message["marker"]["record"] == outcomes.seen[-1][1]["key_record_id"]
    assert message["body"] == event
    # The key's stored result is untouched: a duplicate replays the answer.
    assert outcomes.seen[-1][1]["result"]["status"] == "completed"


def _undeliverable(step, buffer, model_env) -> dict:
    """Five deliveries of a row whose result event the bus refuses; its dead letter."""
    batch = buffer.batch(fresh_event())
    for _ in range(5):
        step.handle(batch, FakeLambdaContext())
    [dead] = model_env.sqs.receive_message(QueueUrl=model_env.queue_url)["Messages"]
    return dead


def test_a_redrive_of_the_undeliverable_dead_letter_publishes_the_stored_result_once(
    make_step, fake_api, model_env, buffer, classic_bus, refusing_bus
):
    step = make_step()
    dead = _undeliverable(step, buffer, model_env)
    refusing_bus["on"] = False  # the operator fixed the bus's permission

    for _ in range(2):  # "Start DLQ redrive": a new message; SQS may deliver it twice
        assert step.handle(buffer.batch(dead["Body"]), FakeLambdaContext()) == {
            "batchItemFailures": []
        }

    [event] = classic_bus.received()
    assert event["detail-type"] == COMPLETED and event["detail"]["result"]["label"] == "warm"
    assert fake_api.request_count == 1  # never the model
    assert model_env.dead_letters() == []


def test_a_redrive_naming_a_record_that_is_gone_is_refused_without_a_request(
    make_step, fake_api, model_env, buffer, classic_bus, refusing_bus
):
    step = make_step()
    body = json.loads(_undeliverable(step, buffer, model_env)["Body"])
    body["dead_letter"]["record"] = body["dead_letter"]["record"][:-4] + "0000"

    assert step.handle(buffer.batch(body), FakeLambdaContext()) == {"batchItemFailures": []}

    assert fake_api.request_count == 1
    [message] = model_env.dead_letters()
    assert message["attributes"]["ERROR_CODE"] == "KeyMemoryExpired"


def test_a_refused_publish_clears_its_intent_so_the_next_delivery_publishes(
    make_step, fake_api, buffer, classic_bus, refusing_bus, capsys
):
    step = make_step()
    batch = buffer.batch(fresh_event())
    step.handle(batch, FakeLambdaContext())
    refusing_bus["on"] = False

    assert step.handle(batch, FakeLambdaContext()) == {"batchItemFailures": []}

    assert len(classic_bus.received()) == 1
    assert metric_total(emf(capsys), "ResultEventsUncertain") == 0
