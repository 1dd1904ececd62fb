"""Publishing to an EventBridge v2 bus (EVENT_BUS_KIND=v2): dedup ids, limits, DEDUPLICATED.

moto has no eventbridgev2, so ``FakeV2Bus`` answers PutEvents at botocore's
``before-call`` hook, after botocore has validated and serialised the real request: a
fake of AWS (its limits and its 300 s dedup window), not of our code. S3 and DynamoDB are
moto; the splitter is the real one.
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

import pytest
from prospect_contract.errors import ConfigurationError
from prospect_contract.put_events import PutEventsError
from prospect_splitter.config import Settings
from prospect_splitter.handler import build_splitter

from .conftest import BUS, HEADER

V2_ARN = "arn:aws:events:us-east-1:123456789012:event-busv2/prospect-rows/abcdefghijklmnopqrstuvwxy"
ROW = "Prospect Row Validated"
SUMMARY = "Prospect Upload Summarized"
ONE_MB = 1_048_576


@pytest.fixture(autouse=True)
def _splitter_env_unset(monkeypatch):
    """Settings the conftest fixture does not reset; each test sets what it needs."""
    for name in (
        "MAX_ROWS",
        "PUBLISH_CONCURRENCY",
        "EVENT_BUS_KIND",
        "EVENT_BUS_ARN",
        "SUMMARY_EVENT_BUS_NAME",
    ):
        monkeypatch.delenv(name, raising=False)


class _Http:
    def __init__(self, status_code: int) -> None:
        self.status_code = status_code
        self.headers: dict[str, str] = {}


class FakeV2Bus:
    """eventbridgev2 PutEvents as documented: 1-100 entries and 1 MB a request (else
    InvalidInputException, nothing published), per-entry results in request order, and a
    repeat DeduplicationId within 300 s answered ``SuccessCode: DEDUPLICATED``.

    ``fail(entry) -> error code | None`` injects per-entry failures (not delivered).
    """

    WINDOW_SECONDS = 300

    def __init__(self, fail: Any = None) -> None:
        self.fail = fail
        self.now = 0.0  # the window's clock; tests advance it
        self.lock = threading.Lock()
        self.first_seen: dict[str, float] = {}
        self.requests: list[dict[str, Any]] = []
        self.delivered: list[dict[str, Any]] = []

    def install(self, session: Any) -> FakeV2Bus:
        session.events.register("before-parameter-build.eventbridgev2.PutEvents", self._keep)
        session.events.register("before-call.eventbridgev2.PutEvents", self._answer)
        return self

    def rows(self) -> list[dict[str, Any]]:
        return [e for e in self.delivered if e["DetailType"] == ROW]

    def _keep(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["fake.params"] = params

    def _answer(self, context: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]]:
        params = context["fake.params"]
        entries = params["Entries"]
        size = sum(
            len(e["Source"].encode()) + len(e["DetailType"].encode()) + len(e["Detail"].encode())
            for e in entries
        )
        with self.lock:
            self.requests.append(
                {"bus": params["EventBusArn"], "count": len(entries), "bytes": size}
            )
        if not 1 <= len(entries) <= 100 or size > ONE_MB:
            error = {"Code": "InvalidInputException", "Message": f"{len(entries)}, {size} B"}
            return _Http(400), {"Error": error, "ResponseMetadata": {"HTTPStatusCode": 400}}
        results = []
        with self.lock:
            for entry in entries:
                code = self.fail(entry) if self.fail else None
                if code:
                    results.append({"ErrorCode": code, "ErrorMessage": "injected by test"})
                    continue
                dedup_id = entry.get("SystemMetadata", {}).get("DeduplicationId")
                first = self.first_seen.get(dedup_id) if dedup_id else None
                if first is not None and self.now - first < self.WINDOW_SECONDS:
                    results.append({"EventId": str(uuid.uuid4()), "SuccessCode": "DEDUPLICATED"})
                    continue
                if dedup_id:
                    self.first_seen[dedup_id] = self.now
                self.delivered.append(entry)
                results.append({"EventId": str(uuid.uuid4()), "SuccessCode": "PUBLISHED"})
        failed = sum(1 for r in results if "ErrorCode" in r)
        return _Http(200), {"FailedEntryCount": failed, "Entries": results}


@pytest.fixture
def v2(aws, monkeypatch):
    monkeypatch.setenv("EVENT_BUS_KIND", "v2")
    monkeypatch.setenv("EVENT_BUS_ARN", V2_ARN)
    monkeypatch.delenv("EVENT_BUS_NAME")  # a v2 deployment has no classic bus name
    return aws


def _csv(rows: int, invalid_every: int = 0) -> str:
    lines = []
    for i in range(1, rows + 1):
        email = "broken" if invalid_every and i % invalid_every == 0 else f"p{i}@example.com"
        lines.append(f"{email},P,{i},Co {i},T,US,")
    return "\n".join([HEADER, *lines]) + "\n"


def _splitter(aws: Any, sleeps: list[float] | None = None) -> Any:
    sleep = sleeps.append if sleeps is not None else (lambda seconds: None)
    return build_splitter(Settings.from_env(), session=aws.session, sleep=sleep)


def test_rows_carry_upload_and_row_as_dedup_id(v2, lambda_context):
    bus = FakeV2Bus().install(v2.session)

    result = _splitter(v2).process(v2.put_csv("v2.csv", _csv(250, 10)), lambda_context)

    assert (result["valid"], result["invalid"], result["deduplicated"]) == (225, 25, 0)
    upload_id = result["upload_id"]
    rows = bus.rows()
    assert len(rows) == 225
    for entry in rows:
        row_number = json.loads(entry["Detail"])["row_number"]
        assert entry["SystemMetadata"] == {"DeduplicationId": f"{upload_id}#{row_number}"}
        assert entry["Source"] == "prospect-uploader" and "EventBusName" not in entry
    assert {r["bus"] for r in bus.requests} == {V2_ARN}
    assert max(r["count"] for r in bus.requests) == 100  # v2 takes 100 entries a call
    [summary] = [e for e in bus.delivered if e["DetailType"] == SUMMARY]
    assert summary["SystemMetadata"] == {"DeduplicationId": f"{upload_id}#summary"}
    assert v2.drain_published() == []  # nothing went to the classic bus


def test_a_rerun_within_the_window_is_deduplicated_and_counted(v2, lambda_context, monkeypatch):
    # Row 180 fails permanently on the first run, so Lambda retries the whole upload.
    poisoned = [True]
    bus = FakeV2Bus(
        fail=lambda entry: (
            "InvalidArgument" if poisoned[0] and '"row_number":180' in entry["Detail"] else None
        )
    ).install(v2.session)
    splitter = _splitter(v2)
    event = v2.put_csv("rerun.csv", _csv(300))

    with pytest.raises(PutEventsError):
        splitter.process(event, lambda_context)
    first_run = len(bus.rows())
    assert 0 < first_run < 300
    poisoned[0] = False
    bus.now += 120  # the retry comes within the 300 s window
    result = splitter.process(event, lambda_context)

    assert (result["valid"], result["deduplicated"]) == (300, first_run)
    assert len(bus.rows()) == 300  # each row reached subscribers exactly once
    [summary] = [e for e in bus.delivered if e["DetailType"] == SUMMARY]
    assert f'"deduplicated":{first_run},' in summary["Detail"]
    stored = v2.failures(result["upload_id"])["summary"]
    assert (int(stored["deduplicated"]), stored["status"]) == (first_run, "completed")


def test_wide_rows_are_published_as_ids_in_full_batches(v2, lambda_context):
    # Row events carry ids only (issue 18): 100 rows of 15 KB each (1.5 MB of values) go in
    # one call of 100 entries, and the values are in RowsTable. (The publisher's byte limit
    # is tested on its own in test_put_events.py.)
    bus = FakeV2Bus().install(v2.session)
    text = "€" * 1000  # 3 KB a field
    lines = [f"p{i}@example.com,{text},{text},{text},{text},US,{text}" for i in range(100)]

    result = _splitter(v2).process(
        v2.put_csv("wide.csv", "\n".join([HEADER, *lines]) + "\n"), lambda_context
    )

    assert result["valid"] == 100 and len(bus.rows()) == 100
    row_calls = [r for r in bus.requests if r["count"] == 100]
    assert len(row_calls) == 1 and row_calls[0]["bytes"] < 20_000
    stored = v2.rows(result["upload_id"])
    assert len(stored) == 100 and stored[1]["notes"] == text


def test_throttled_entries_are_retried_and_not_counted_as_deduplicated(v2, lambda_context):
    seen: set[str] = set()

    def throttle_once(entry: dict[str, Any]) -> str | None:
        dedup_id = entry["SystemMetadata"]["DeduplicationId"]
        if dedup_id.endswith("3") and dedup_id not in seen:
            seen.add(dedup_id)
            return "ThrottlingException"
        return None

    bus = FakeV2Bus(fail=throttle_once).install(v2.session)
    sleeps: list[float] = []

    result = _splitter(v2, sleeps).process(v2.put_csv("thr.csv", _csv(120)), lambda_context)

    assert (result["valid"], result["deduplicated"]) == (120, 0)
    assert len(bus.rows()) == 120 and len(seen) == 12 and sleeps


def test_rows_ride_the_v2_bus_and_the_summary_the_classic_summary_bus(
    v2, lambda_context, monkeypatch
):
    # The Prospect stack's default: rows on the v2 RowBus, the summary on ProspectBus,
    # where the classic alert rules (SNS targets) listen.
    monkeypatch.setenv("SUMMARY_EVENT_BUS_NAME", BUS)
    bus = FakeV2Bus().install(v2.session)
    splitter = _splitter(v2)

    result = splitter.process(v2.put_csv("split.csv", _csv(30, 10)), lambda_context)
    rejected = splitter.process(v2.put_csv("empty.csv", ""), lambda_context)

    assert (result["valid"], result["invalid"], rejected["status"]) == (27, 3, "rejected")
    assert len(bus.rows()) == 27 and len(bus.delivered) == 27  # no summary on the v2 bus
    summaries = v2.drain_published()
    assert [(e["detail-type"], e["detail"]["upload_id"], e["detail"]["status"])
            for e in summaries] == [
        (SUMMARY, result["upload_id"], "completed"),
        (SUMMARY, rejected["upload_id"], "rejected"),
    ]  # fmt: skip
    assert summaries[0]["detail"]["deduplicated"] == 0
    assert summaries[1]["detail"]["reason"]


def test_summary_bus_setting(v2, monkeypatch):
    assert Settings.from_env().summary_event_bus_name == ""
    monkeypatch.setenv("SUMMARY_EVENT_BUS_NAME", " prospect-bus ")
    assert Settings.from_env().summary_event_bus_name == "prospect-bus"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"EVENT_BUS_KIND": "v2", "EVENT_BUS_ARN": ""}, "EVENT_BUS_ARN"),
        ({"EVENT_BUS_KIND": "v3"}, "EVENT_BUS_KIND"),
    ],
)
def test_bus_settings_are_checked(aws, monkeypatch, env, message):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError, match=message):
        Settings.from_env()


def test_v2_settings(v2):
    settings = Settings.from_env()
    assert (settings.event_bus_kind, settings.event_bus_arn, settings.event_bus_name) == (
        "v2",
        V2_ARN,
        "",
    )
