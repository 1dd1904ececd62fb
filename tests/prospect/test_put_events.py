"""The pipeline's one PutEvents implementation (prospect_contract.put_events), without AWS.

A scripted bus answers each call from a list of per-entry answers, so every rule reads as
GIVEN the bus's answers, WHEN the batch is sent, THEN what was re-sent and what failed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from prospect_contract.put_events import (
    CLASSIC_MAX_ENTRIES,
    CLASSIC_MAX_REQUEST_BYTES,
    V2_MAX_ENTRIES,
    V2_MAX_REQUEST_BYTES,
    Batcher,
    ClassicBus,
    Event,
    PutEventsError,
    RetryPolicy,
    V2Bus,
    entry_size,
    put_events,
    send_batch,
)

OK = {"EventId": "e"}
DEDUPLICATED = {"EventId": "e", "SuccessCode": "DEDUPLICATED"}


def failed(code: str) -> dict[str, str]:
    return {"ErrorCode": code, "ErrorMessage": f"{code} by test"}


class ScriptedClient:
    """A boto3-like client: ``answer(call, entries)`` gives each call's result entries (or
    raises); every request is kept."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []

    def put_events(self, **request: Any) -> dict[str, Any]:
        self.requests.append(request)
        entries = self.answer(len(self.requests), request["Entries"])
        return {"FailedEntryCount": sum("ErrorCode" in e for e in entries), "Entries": entries}

    def sent_details(self, call: int) -> list[int]:
        return [json.loads(e["Detail"])["n"] for e in self.requests[call - 1]["Entries"]]


def classic(answer: Any) -> tuple[ClassicBus, ScriptedClient]:
    client = ScriptedClient(answer)
    return ClassicBus(client, "bus", "prospect-uploader"), client


def entries(bus: ClassicBus | V2Bus, count: int) -> list[dict[str, Any]]:
    return [bus.entry("Thing", json.dumps({"n": n}), f"id-{n}") for n in range(count)]


def test_only_the_failed_entries_are_sent_again():
    # GIVEN a bus that throttles entries 1 and 3 of the first call only
    bus, client = classic(
        lambda call, sent: [failed("ThrottlingException") if call == 1 and i in (1, 3) else OK
                            for i in range(len(sent))]
    )  # fmt: skip
    sleeps: list[float] = []
    # WHEN five entries are sent
    result = send_batch(bus, entries(bus, 5), sleep=sleeps.append)
    # THEN the second call carries exactly entries 1 and 3, and all five are accepted
    assert client.sent_details(2) == [1, 3]
    assert (result.accepted, result.failures, result.attempts, len(sleeps)) == (5, (), 2, 1)


@pytest.mark.parametrize("code", ["ThrottlingException", "InternalFailure"])
def test_the_documented_retryable_codes_are_retried(code):
    bus, client = classic(lambda call, sent: [failed(code) if call == 1 else OK for _ in sent])
    assert send_batch(bus, entries(bus, 2), sleep=lambda s: None).failures == ()
    assert len(client.requests) == 2


@pytest.mark.parametrize(
    "code", ["MalformedDetail", "InvalidArgument", "AccessDeniedException", "InternalException"]
)
def test_any_other_code_is_final_at_once(code):
    bus, client = classic(lambda call, sent: [failed(code), *([OK] * (len(sent) - 1))])
    sleeps: list[float] = []
    result = send_batch(bus, entries(bus, 3), sleep=sleeps.append)
    assert (len(client.requests), sleeps) == (1, [])
    assert [(f.index, f.error_code) for f in result.failures] == [(0, code)]
    with pytest.raises(PutEventsError, match="1 entries rejected with non-retryable errors"):
        result.raise_for_failures()


def test_rounds_are_bounded_and_the_backoff_is_jittered_and_capped():
    bus, client = classic(lambda call, sent: [failed("ThrottlingException") for _ in sent])
    sleeps: list[float] = []
    policy = RetryPolicy(max_attempts=4, base_delay=1.0, max_delay=3.0)
    result = send_batch(bus, entries(bus, 1), retry=policy, sleep=sleeps.append, rng=lambda: 0.5)
    # 4 rounds, 3 sleeps: half (the jitter) of 1 s, 2 s and 3 s (4 s capped at 3 s)
    assert (len(client.requests), sleeps) == (4, [0.5, 1.0, 1.5])
    with pytest.raises(PutEventsError, match="1 entries still failing after 4 attempts") as raised:
        result.raise_for_failures()
    assert raised.value.failures == [("ThrottlingException", "ThrottlingException by test")]


def test_a_permanent_failure_does_not_stop_the_throttled_entries_of_its_batch():
    # GIVEN entry 0 is malformed and entry 1 throttled once
    bus, client = classic(
        lambda call, sent: [failed("MalformedDetail"), failed("ThrottlingException")]
        if call == 1 else [OK] * len(sent)
    )  # fmt: skip
    result = send_batch(bus, entries(bus, 2), sleep=lambda s: None)
    # THEN entry 1 is re-sent and accepted; only entry 0 failed
    assert client.sent_details(2) == [1]
    assert [f.error_code for f in result.failures] == ["MalformedDetail"]


def test_v2_deduplicated_answers_are_accepted_and_counted():
    client = ScriptedClient(lambda call, sent: [DEDUPLICATED, OK, DEDUPLICATED])
    bus = V2Bus(client, "arn:aws:events:us-east-1:1:event-bus/b", "prospect-uploader")
    result = send_batch(bus, entries(bus, 3))
    assert (result.accepted, result.deduplicated, result.failures) == (3, 2, ())
    [request] = client.requests
    assert request["EventBusArn"].endswith("/b") and "EventBusName" not in request["Entries"][0]
    assert request["Entries"][2]["SystemMetadata"] == {"DeduplicationId": "id-2"}


def test_a_classic_entry_carries_its_bus_and_no_deduplication_id():
    bus, client = classic(lambda call, sent: [OK for _ in sent])
    send_batch(bus, entries(bus, 1))
    [entry] = client.requests[0]["Entries"]
    assert entry["EventBusName"] == "bus" and "SystemMetadata" not in entry


def test_a_missing_result_entry_is_a_failure_never_a_success():
    bus, _ = classic(lambda call, sent: [OK])
    result = send_batch(bus, entries(bus, 2))
    assert [(f.index, f.error_code) for f in result.failures] == [(1, "NoResult")]


def test_a_failed_call_is_kept_with_the_entries_it_left_pending():
    # GIVEN the first call throttles entry 1 and the second call raises
    def answer(call: int, sent: list[Any]) -> list[dict[str, str]]:
        if call == 2:
            raise ConnectionError("bus unreachable")
        return [OK, failed("ThrottlingException")]

    bus, _ = classic(answer)
    result = send_batch(bus, entries(bus, 2), sleep=lambda s: None)
    # THEN entry 0 stays accepted, entry 1 carries the call's error, which re-raises
    assert [(f.index, f.describe()) for f in result.failures] == [
        (1, "ConnectionError: bus unreachable")
    ]
    with pytest.raises(ConnectionError):
        result.raise_for_failures()


@pytest.mark.parametrize(
    ("kind", "max_entries", "max_bytes"),
    [("classic", CLASSIC_MAX_ENTRIES, CLASSIC_MAX_REQUEST_BYTES),
     ("v2", V2_MAX_ENTRIES, V2_MAX_REQUEST_BYTES)],
)  # fmt: skip
def test_batches_hold_the_bus_limit_of_entries_and_bytes(kind, max_entries, max_bytes):
    client = ScriptedClient(lambda call, sent: [OK for _ in sent])
    bus = ClassicBus(client, "b", "s") if kind == "classic" else V2Bus(client, "arn", "s")
    assert (bus.max_entries, bus.max_request_bytes) == (max_entries, max_bytes)
    events = [Event("Thing", {"n": n}) for n in range(max_entries + 1)]
    assert put_events(bus, events) == [None] * len(events)
    assert [len(r["Entries"]) for r in client.requests] == [max_entries, 1]
    # A batch closes on bytes too: two entries of just over half the limit never share one.
    big = "x" * (max_bytes // 2)
    client.requests.clear()
    put_events(bus, [Event("Thing", {"n": 0, "pad": big}), Event("Thing", {"n": 1, "pad": big})])
    assert [len(r["Entries"]) for r in client.requests] == [1, 1]
    assert all(sum(entry_size(e) for e in r["Entries"]) <= max_bytes for r in client.requests)


def test_put_events_answers_per_event_across_batches():
    # GIVEN 12 events on a classic bus (two calls); event 11 is malformed
    bus, client = classic(
        lambda call, sent: [failed("MalformedDetail") if json.loads(e["Detail"])["n"] == 11
                            else OK for e in sent]
    )  # fmt: skip
    events = [Event("Thing", {"n": n}) for n in range(12)]
    failures = put_events(bus, events)
    assert [n for n, f in enumerate(failures) if f is not None] == [11]
    assert failures[11] is not None and failures[11].index == 11
    assert failures[11].describe() == "MalformedDetail: MalformedDetail by test"


def test_an_event_no_request_could_carry_fails_alone_and_is_never_sent():
    bus, client = classic(lambda call, sent: [OK for _ in sent])
    huge = Event("Thing", {"n": 0, "pad": "x" * CLASSIC_MAX_REQUEST_BYTES})
    failures = put_events(bus, [huge, Event("Thing", {"n": 1})])
    assert failures[0] is not None and failures[0].error_code == "EntryTooLarge"
    assert failures[1] is None and client.sent_details(1) == [1]
    with pytest.raises(PutEventsError, match="exceeds the PutEvents limit"):
        Batcher(bus).add(bus.entry("Thing", json.dumps(huge.detail), None))


def test_details_are_compact_json_with_non_ascii_kept():
    bus, client = classic(lambda call, sent: [OK for _ in sent])
    put_events(bus, [Event("Thing", {"name": "Zoë", "n": 1})])
    assert client.requests[0]["Entries"][0]["Detail"] == '{"name":"Zoë","n":1}'


def test_a_retry_policy_needs_one_round():
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
