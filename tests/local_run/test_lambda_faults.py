"""Lambda faults in the engine: seeded kills and throttles, and what the poller does with
them (nothing deleted, back after the visibility timeout, remembered for the DLQ)."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from constructs_lib.local_engine.lambda_faults import (
    FaultRates,
    LambdaFaults,
    LambdaKilled,
    stable_content,
)
from constructs_lib.local_engine.sqs_queues import Arrival, MappingPoller
from tests.local_run.local_queues import make_poller, make_queue


def _poller(queue, invoke, pool, tracker, faults=None) -> MappingPoller:
    return make_poller(queue, invoke, pool, tracker, faults=faults)


def _event(row: int, event_id: str) -> str:
    return json.dumps(
        {"id": event_id, "time": "2026-11-01T00:00:00Z", "detail-type": "Row", "detail": {"r": row}}
    )


@pytest.mark.parametrize("rate", [-0.1, 1.5, float("nan")])
def test_a_rate_outside_zero_to_one_is_refused(rate):
    with pytest.raises(ValueError, match="kill_rate must be between 0 and 1"):
        FaultRates(kill_rate=rate)


def test_decisions_follow_content_and_occurrence_not_arrival_order():
    # GIVEN two fault deciders with one seed, asked about the same bodies in opposite orders
    bodies = [f"row {n}".encode() for n in range(200)] * 3
    forward = LambdaFaults(FaultRates(kill_rate=0.3, seed=5))
    backward = LambdaFaults(FaultRates(kill_rate=0.3, seed=5))
    ahead = {}
    for body in bodies:
        ahead.setdefault(body, []).append(forward.kill_after_request(body))
    behind = {}
    for body in reversed(bodies):
        behind.setdefault(body, []).append(backward.kill_after_request(body))
    # THEN the n-th request of each body meets the same fate, and about 30 % are killed
    assert ahead == behind
    assert 0.2 < forward.kills / len(bodies) < 0.4 and forward.kills == backward.kills
    # ... and another seed picks other requests
    other = LambdaFaults(FaultRates(kill_rate=0.3, seed=6))
    assert [other.kill_after_request(b) for b in bodies[:200]] != [
        fate[0] for fate in ahead.values()
    ]


def test_rates_zero_and_one_never_and_always():
    never, always = LambdaFaults(FaultRates()), LambdaFaults(FaultRates(1.0, 1.0))
    assert not any(
        never.kill_after_request(b"x") or never.throttle_receive(["x"]) for _ in range(50)
    )
    assert all(
        always.kill_after_request(b"x") and always.throttle_receive(["x"]) for _ in range(50)
    )
    assert (always.kills, always.throttles, never.kills, never.throttles) == (50, 50, 0, 0)


def test_copies_of_one_event_are_one_content():
    assert stable_content(_event(1, "a")) == stable_content(_event(1, "b"))
    assert stable_content(_event(1, "a")) != stable_content(_event(2, "a"))
    assert stable_content("not json") == "not json"


def test_a_throttled_receive_comes_back_with_a_higher_receive_count(clock):
    # GIVEN a poller whose Lambda throttles the first receive
    scheduler, tracker = clock
    queue = make_queue(clock, "buffer", visibility_timeout=60)  # 0.2 s locally
    seen: list[tuple[str, float]] = []

    class ThrottleFirstReceive(LambdaFaults):
        receives = 0

        def throttle_receive(self, bodies):
            self.receives += 1
            return self.receives == 1

    faults = ThrottleFirstReceive(FaultRates())

    def invoke(event):
        (record,) = event["Records"]
        seen.append((record["attributes"]["ApproximateReceiveCount"], time.monotonic()))
        return {"batchItemFailures": []}

    # WHEN one message is sent
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=2) as pool:
        poller = _poller(queue, invoke, pool, tracker, faults)
        queue.send("row")
        assert tracker.wait_idle(10)
    # THEN the function ran once, on the second receive, after the visibility timeout
    ((count, at),) = seen
    assert count == "2" and at - started >= 0.18
    assert poller.stats.throttles == 1 and poller.stats.invocations == 1 and len(queue) == 0


def test_a_killed_invocation_deletes_nothing_and_its_redrive_remembers_it(clock):
    # GIVEN a queue that redrives after two receives, and a function killed on every one
    scheduler, tracker = clock
    dlq = make_queue(clock, "dlq")
    queue = make_queue(clock, "buffer", visibility_timeout=30, max_receive_count=2)
    queue.dead_letter = dlq
    calls = []

    def invoke(event):
        calls.append(event)
        raise LambdaKilled("killed")

    # WHEN one message is sent
    with ThreadPoolExecutor(max_workers=2) as pool:
        poller = _poller(queue, invoke, pool, tracker)
        queue.send(_event(1, "a"))
        deadline = time.monotonic() + 5
        while len(dlq) == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
    # THEN it was received twice, killed twice, never deleted, then moved to the DLQ with
    # its history: the function ran (and died) with it, so it is no "could not run" case
    assert len(calls) == 2 and poller.stats.kills == 2 and queue.stats.deleted == 0
    assert dlq.arrivals == {
        Arrival("redriven", "buffer", False, receives=2, ran=0, killed=2, throttled=0): 1
    }


def test_a_message_sent_with_an_error_code_is_a_coded_arrival(clock):
    dlq = make_queue(clock, "dlq")
    dlq.send("{}", attributes={"ERROR_CODE": {"DataType": "String", "StringValue": "X"}})
    dlq.send("{}")
    on_failure = {"requestContext": {"condition": "RetriesExhausted"}, "requestPayload": {}}
    dlq.send(json.dumps(on_failure))
    assert dlq.arrivals == {Arrival("sent", None, True): 2, Arrival("sent", None, False): 1}
