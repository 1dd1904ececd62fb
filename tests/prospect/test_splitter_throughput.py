"""Parallel publishing: bounded PutEvents concurrency, per-entry retries, nothing lost.

Real handler and real boto3 against moto. Faults and latency are injected at the AWS
boundary with botocore hooks that pair each request with its response through botocore's
per-request ``context``, so they stay correct when calls overlap.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from prospect_contract.errors import ConfigurationError
from prospect_contract.put_events import PutEventsError
from prospect_splitter.config import Settings
from prospect_splitter.handler import build_splitter
from prospect_splitter.publisher import EventPublisher

from .conftest import BUS, HEADER

ROW = "Prospect Row Validated"


@pytest.fixture(autouse=True)
def _splitter_env_unset(monkeypatch):
    """Settings the conftest fixture does not reset; each test sets what it needs."""
    for name in ("MAX_ROWS", "PUBLISH_CONCURRENCY", "EVENT_BUS_KIND", "EVENT_BUS_ARN"):
        monkeypatch.delenv(name, raising=False)


def _csv(rows: int) -> str:
    lines = [f"p{i}@example.com,P,{i},Co {i},T,US," for i in range(1, rows + 1)]
    return "\n".join([HEADER, *lines]) + "\n"


class ConcurrentPutEvents:
    """Latency, failed entries and an accepted-entries log for overlapping PutEvents calls.

    ``fail(detail) -> bool`` picks entries to report as failed with ``error_code``; a
    failed entry is removed from the request, so only a retry can deliver it.
    """

    def __init__(
        self,
        latency: float = 0.0,
        fail: Callable[[dict[str, Any]], bool] = lambda detail: False,
        error_code: str = "ThrottlingException",
    ) -> None:
        self.latency = latency
        self.fail = fail
        self.error_code = error_code
        self.lock = threading.Lock()
        self.calls = self.failed_entries = self.active = self.max_active = 0
        self.accepted_rows: list[int] = []

    def install(self, session: Any) -> ConcurrentPutEvents:
        session.events.register("before-parameter-build.eventbridge.PutEvents", self._before)
        session.events.register("before-call.eventbridge.PutEvents", self._short_circuit)
        session.events.register("after-call.eventbridge.PutEvents", self._after)
        return self

    def _before(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        with self.lock:
            self.calls += 1
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        time.sleep(self.latency)
        entries = params["Entries"]
        with self.lock:
            drop = [i for i, e in enumerate(entries) if self.fail(json.loads(e["Detail"]))]
            self.failed_entries += len(drop)
        context["test.entries"] = entries
        context["test.dropped"] = drop
        if len(drop) < len(entries):  # else the call is answered without moto
            params["Entries"] = [e for i, e in enumerate(entries) if i not in drop]

    def _short_circuit(self, context: dict[str, Any], **_: Any) -> Any:
        if context["test.entries"] and len(context["test.dropped"]) == len(context["test.entries"]):
            return _Http200(), {"FailedEntryCount": 0, "Entries": []}
        return None

    def _after(self, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        entries, dropped = context["test.entries"], set(context["test.dropped"])
        delivered = iter(parsed["Entries"])
        failure = {"ErrorCode": self.error_code, "ErrorMessage": "injected by test"}
        results = [dict(failure) if i in dropped else next(delivered) for i in range(len(entries))]
        parsed["Entries"] = results
        parsed["FailedEntryCount"] = len(dropped)
        with self.lock:
            self.active -= 1
            for entry, result in zip(entries, results, strict=True):
                if result.get("EventId") and entry["DetailType"] == ROW:
                    self.accepted_rows.append(json.loads(entry["Detail"])["row_number"])


class _Http200:
    status_code = 200
    headers: dict[str, str] = {}


@pytest.fixture
def quiet_bus(aws):
    """No SQS capture target: moto's SQS is quadratic in depth; the hooks see every entry."""
    aws.session.client("events").remove_targets(
        Rule="capture-all", EventBusName=BUS, Ids=["capture"]
    )
    return aws


def test_rows_are_published_in_parallel_each_exactly_once(quiet_bus, lambda_context, monkeypatch):
    monkeypatch.setenv("PUBLISH_CONCURRENCY", "4")
    seen: set[int] = set()

    def throttle_first_sight_of_every_seventh(detail: dict[str, Any]) -> bool:
        number = detail.get("row_number")  # the summary has none
        if number is None or number % 7 or number in seen:
            return False
        seen.add(number)
        return True

    bus = ConcurrentPutEvents(0.02, throttle_first_sight_of_every_seventh).install(
        quiet_bus.session
    )
    sleeps: list[float] = []
    splitter = build_splitter(Settings.from_env(), session=quiet_bus.session, sleep=sleeps.append)

    result = splitter.process(quiet_bus.put_csv("par.csv", _csv(600)), lambda_context)

    assert (result["status"], result["valid"]) == ("completed", 600)
    assert sorted(bus.accepted_rows) == list(range(1, 601))  # none lost, none twice
    assert bus.failed_entries == 600 // 7 and sleeps  # each failed entry was retried
    assert 2 <= bus.max_active <= 4  # really parallel, never above PUBLISH_CONCURRENCY


def test_concurrency_one_sends_one_call_at_a_time(quiet_bus, lambda_context, monkeypatch):
    monkeypatch.setenv("PUBLISH_CONCURRENCY", "1")
    bus = ConcurrentPutEvents(0.005).install(quiet_bus.session)
    splitter = build_splitter(Settings.from_env(), session=quiet_bus.session)

    result = splitter.process(quiet_bus.put_csv("serial.csv", _csv(100)), lambda_context)

    assert result["valid"] == 100 and sorted(bus.accepted_rows) == list(range(1, 101))
    assert bus.max_active == 1


def test_a_permanent_entry_error_stops_the_upload_early_and_a_retry_completes_it(
    quiet_bus, lambda_context, monkeypatch
):
    monkeypatch.setenv("PUBLISH_CONCURRENCY", "4")
    poisoned = [True]
    bus = ConcurrentPutEvents(
        0.005,
        lambda detail: poisoned[0] and detail.get("row_number") == 50,
        error_code="MalformedDetail",
    ).install(quiet_bus.session)
    # The calls made when the publisher has recorded the failure: a worker records its
    # batch's error before its _run_batch returns. Until then other workers may send any
    # number of calls (the failing worker can be descheduled), so only the calls after it
    # are bounded, under any scheduling.
    calls_at_failure: list[int] = []
    run_batch = EventPublisher._run_batch

    def run_batch_noting_the_failure(publisher: EventPublisher, batch: list[dict]) -> None:
        run_batch(publisher, batch)
        if poisoned[0] and any(json.loads(e["Detail"]).get("row_number") == 50 for e in batch):
            with bus.lock:
                calls_at_failure.append(bus.calls)

    monkeypatch.setattr(EventPublisher, "_run_batch", run_batch_noting_the_failure)
    sleeps: list[float] = []
    splitter = build_splitter(Settings.from_env(), session=quiet_bus.session, sleep=sleeps.append)
    event = quiet_bus.put_csv("poison.csv", _csv(2000))

    with pytest.raises(PutEventsError) as raised:
        splitter.process(event, lambda_context)

    assert raised.value.failures == [("MalformedDetail", "injected by test")]
    assert sleeps == []  # a permanent error is not retried entry by entry
    # After the failure is recorded, only batches already in flight or queued (at most
    # 2 x PUBLISH_CONCURRENCY slots, the failed one's included) and the one the reader had
    # already checked for a failure before it was recorded are sent, not the remaining calls.
    [at_failure] = calls_at_failure
    assert bus.calls - at_failure <= 2 * 4
    poisoned[0] = False
    result = splitter.process(event, lambda_context)  # Lambda's retry
    assert result["valid"] == 2000
    assert set(bus.accepted_rows) == set(range(1, 2001))


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PUBLISH_CONCURRENCY", "0"),
        ("PUBLISH_CONCURRENCY", "65"),
        ("PUBLISH_CONCURRENCY", "many"),
        ("MAX_ROWS", "0"),
        ("MAX_ROWS", "1e5"),
    ],
)
def test_bad_limits_fail_naming_the_variable(aws, monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError, match=name):
        Settings.from_env()


def test_limit_defaults(aws):
    settings = Settings.from_env()
    assert (settings.publish_concurrency, settings.max_rows) == (4, 100_000)
    assert settings.event_bus_kind == "classic"
