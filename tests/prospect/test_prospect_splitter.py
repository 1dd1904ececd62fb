"""Splitter tests against moto: real handler, real boto3, faults injected at botocore."""

from __future__ import annotations

import csv
import io
import json
import random
import time
import tracemalloc

import pytest
from prospect_contract.put_events import PutEventsError
from prospect_splitter.config import Settings
from prospect_splitter.csv_stream import UploadRejected, iter_records
from prospect_splitter.handler import build_splitter, handler
from prospect_splitter.validation import is_valid_email

from .conftest import BUCKET, BUS, HEADER, s3_event
from .fault_injection import FlakyPutEvents

VALID = "ada@example.com,Ada,Lovelace,Analytical Engines,CTO,GB,note"


@pytest.fixture(autouse=True)
def _splitter_env_unset(monkeypatch):
    """Settings the conftest fixture does not reset; each test sets what it needs."""
    for name in ("MAX_ROWS", "PUBLISH_CONCURRENCY", "EVENT_BUS_KIND", "EVENT_BUS_ARN"):
        monkeypatch.delenv(name, raising=False)


def _rows(published: list[dict]) -> list[dict]:
    return [e["detail"] for e in published if e["detail-type"] == "Prospect Row Validated"]


def _summaries(published: list[dict]) -> list[dict]:
    return [e["detail"] for e in published if e["detail-type"] == "Prospect Upload Summarized"]


def _csv(*lines: str, newline: str = "\n") -> str:
    return newline.join([HEADER, *lines]) + newline


# --- validation rules --------------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        "o'brien+tag@example.com",
        "用户@例子.广告",
        "josé@exämple.de",
        "first.last@sub.example.org",
        "x@example.co",
    ],
)
def test_exotic_but_valid_emails(address):
    assert is_valid_email(address)


@pytest.mark.parametrize(
    "address",
    [
        "plain",
        "@example.com",
        "a@",
        "a@@example.com",
        "a b@example.com",
        "a@localhost",
        ".a@example.com",
        "a..b@example.com",
        "a@-example.com",
        "a@example.123",
    ],
)
def test_malformed_emails(address):
    assert not is_valid_email(address)


def test_each_invalid_row_kind_is_recorded(aws, lambda_context):
    long_note = "n" * 1001
    content = _csv(
        VALID,
        "not-an-email,Bo,Li,Acme,CEO,US,",
        ",Bo,Li,Acme,CEO,US,",
        "bo@example.com,Bo,Li,   ,CEO,US,",
        f"bo@example.com,Bo,Li,Acme,CEO,US,{long_note}",
        "bo@example.com,Bo,Li,Acme,CEO,US",
        "bo@example.com,Bo,Li,Acme,CEO,US,note,extra",
    )
    result = handler(aws.put_csv("kinds.csv", content), lambda_context)

    assert result == {
        "upload_id": result["upload_id"],
        "rows": 7,
        "valid": 1,
        "invalid": 6,
        "deduplicated": 0,
        "status": "completed",
    }
    items = aws.failures(result["upload_id"])
    codes = {
        fid: (item["error_code"], int(item["row_number"]))
        for fid, item in items.items()
        if item["kind"] == "validation"
    }
    assert codes == {
        "row#00000002": ("InvalidEmail", 2),
        "row#00000003": ("InvalidEmail", 3),
        "row#00000004": ("MissingCompany", 4),
        "row#00000005": ("FieldTooLong", 5),
        "row#00000006": ("FieldCountMismatch", 6),
        "row#00000007": ("FieldCountMismatch", 7),
    }
    # The failure records hold ids, codes and reasons; the row's text is in RowsTable.
    assert not [item for item in items.values() if "raw_row" in item]
    stored = aws.rows(result["upload_id"])
    assert stored[5]["raw_row"].endswith("n" * 10) and stored[5]["error_code"] == "FieldTooLong"
    assert len(stored[5]["raw_row"]) <= 2000
    assert stored[6]["raw_row"] == "bo@example.com,Bo,Li,Acme,CEO,US"
    assert stored[1]["email"] == "ada@example.com" and "raw_row" not in stored[1]
    assert all(int(item["expires_at"]) > time.time() + 29 * 86400 for item in stored.values())
    summary = items["summary"]
    assert (summary["kind"], summary["status"], int(summary["invalid"])) == (
        "summary",
        "completed",
        6,
    )
    published = aws.drain_published()
    assert [r["row_number"] for r in _rows(published)] == [1]
    assert _summaries(published) == [
        {
            "upload_id": result["upload_id"],
            "rows": 7,
            "valid": 1,
            "invalid": 6,
            "deduplicated": 0,
            "status": "completed",
            "bucket": BUCKET,
            "key": "kinds.csv",
        }
    ]


def test_bom_crlf_and_multiline_quoted_fields(aws, lambda_context):
    content = "\ufeff" + _csv(
        '"o\'brien+tag@example.com",Siobhan,O\'Brien,"Harbor, Pine & Co","VP, Sales",IE,'
        '"line one\r\nline two with ""quotes"", and a comma"',
        "用户@例子.广告,Wei,Zhang,例子科技,经理,CN,",
        "josé@exämple.de,José,Müller,Bäckerei,Inhaber,DE,plain",
        newline="\r\n",
    ).replace("email,first_name", " Email , FIRST_NAME", 1)
    result = handler(aws.put_csv("bom.csv", content.encode("utf-8")), lambda_context)

    assert (result["rows"], result["valid"], result["invalid"]) == (3, 3, 0)
    rows = _rows(aws.drain_published())
    assert rows == [{"upload_id": result["upload_id"], "row_number": n} for n in (1, 2, 3)]
    values = aws.rows(result["upload_id"])
    assert values[1]["company"] == "Harbor, Pine & Co"
    assert values[1]["notes"] == 'line one\r\nline two with "quotes", and a comma'
    assert values[2]["email"] == "用户@例子.广告"


@pytest.mark.parametrize(
    ("body", "error_code"),
    [
        (HEADER.encode() + b"\n" + VALID.encode() + b"\nbad\xff\xfe,row\n", "UndecodableBytes"),
        (b"\xff\xfe" + HEADER.encode("utf-16-le"), "UndecodableBytes"),
        (b"", "MissingHeader"),
        (b"\n\n", "MissingHeader"),
        (VALID.encode() + b"\n", "MissingHeader"),
        (b"email,first_name,last_name,company,title,country\n" + VALID.encode(), "MissingHeader"),
    ],
    ids=["bad-bytes-mid-file", "utf16", "empty", "blank-lines", "no-header", "short-header"],
)
def test_whole_upload_rejections_publish_no_rows(aws, lambda_context, body, error_code):
    result = handler(aws.put_csv("bad.csv", body), lambda_context)

    assert result["status"] == "rejected"
    assert (result["rows"], result["valid"], result["invalid"]) == (0, 0, 0)
    items = aws.failures(result["upload_id"])
    assert items["upload"]["kind"] == "upload"
    assert items["upload"]["error_code"] == error_code
    assert items["summary"]["status"] == "rejected"
    published = aws.drain_published()
    assert _rows(published) == []  # decode-validated before anything was published
    assert [s["status"] for s in _summaries(published)] == ["rejected"]


@pytest.mark.parametrize("event_size", [-1, None, 10], ids=["event-size", "head-object", "lying"])
def test_file_over_the_size_limit(aws, lambda_context, monkeypatch, event_size):
    monkeypatch.setenv("MAX_UPLOAD_BYTES", "200")
    body = _csv(*[VALID] * 10)
    result = handler(aws.put_csv("big.csv", body, size=event_size), lambda_context)

    assert result["status"] == "rejected"
    assert aws.failures(result["upload_id"])["upload"]["error_code"] == "FileTooLarge"
    assert _rows(aws.drain_published()) == []


def test_malformed_event_is_recorded_and_not_retried(aws, lambda_context):
    event = s3_event(None, None, None, None)
    result = handler(event, lambda_context)

    assert result["status"] == "rejected"
    assert result["upload_id"].startswith("unknown-")
    item = aws.failures(result["upload_id"])["upload"]
    assert item["error_code"] == "MalformedEvent"
    assert json.loads(item["original_event"]) == event
    # Two different malformed events never share one idempotency answer.
    other = handler(s3_event(BUCKET, None, "abc", 1), lambda_context)
    assert other["upload_id"] != result["upload_id"]


def test_url_encoded_key_from_the_event_is_resolved(aws, lambda_context):
    event = aws.put_csv("in box/q1 list.csv", _csv(VALID))
    event["detail"]["object"]["key"] = "in+box/q1+list.csv"
    assert handler(event, lambda_context)["valid"] == 1


def test_redelivered_event_publishes_nothing_new(aws, lambda_context):
    event = aws.put_csv("dup.csv", _csv(VALID, "bad,Bo,Li,Acme,CEO,US,"))
    first = handler(event, lambda_context)
    assert len(aws.drain_published()) == 2  # one row + one summary

    redelivered = json.loads(json.dumps(event))
    redelivered["id"] = "another-delivery-id"
    second = handler(redelivered, lambda_context)

    assert second == first
    assert aws.drain_published() == []


def test_partial_put_events_failure_is_retried_without_loss_or_duplicates(
    aws, lambda_context, monkeypatch
):
    # FlakyPutEvents pairs its before/after hooks through instance state, so it needs one
    # call at a time; test_splitter_throughput.py covers the same faults in parallel.
    monkeypatch.setenv("PUBLISH_CONCURRENCY", "1")
    # Every call fails entries 1 and 4 the first two times a batch is seen.
    flaky = FlakyPutEvents(lambda call, entries: {1, 4} if call % 3 != 0 else set())
    flaky.install(aws.session)
    sleeps: list[float] = []
    splitter = build_splitter(Settings.from_env(), session=aws.session, sleep=sleeps.append)
    lines = [f"p{i}@example.com,P,{i},Co {i},T,US," for i in range(25)]

    result = splitter.process(aws.put_csv("flaky.csv", _csv(*lines)), lambda_context)

    assert result["valid"] == 25
    assert flaky.failed_entries > 0 and sleeps  # the fault really happened and was retried
    rows = _rows(aws.drain_published())
    assert sorted(r["row_number"] for r in rows) == list(range(1, 26))  # none lost, none twice


def test_non_retryable_entry_failure_raises_and_the_upload_can_be_retried(aws, lambda_context):
    flaky = FlakyPutEvents(lambda call, entries: {0} if call == 1 else set(), "MalformedDetail")
    flaky.install(aws.session)
    sleeps: list[float] = []
    splitter = build_splitter(Settings.from_env(), session=aws.session, sleep=sleeps.append)
    event = aws.put_csv("nonretry.csv", _csv(VALID, VALID))

    with pytest.raises(PutEventsError) as raised:
        splitter.process(event, lambda_context)
    assert raised.value.failures == [("MalformedDetail", "injected by test")]
    assert sleeps == []  # a permanent error is not retried entry by entry
    # Powertools dropped its record, so Lambda's retry processes the upload again.
    result = splitter.process(event, lambda_context)
    assert result["valid"] == 2


def test_retries_are_bounded(aws, lambda_context):
    FlakyPutEvents(lambda call, entries: {0}).install(aws.session)
    sleeps: list[float] = []
    splitter = build_splitter(Settings.from_env(), session=aws.session, sleep=sleeps.append)

    with pytest.raises(PutEventsError, match="after 5 attempts"):
        splitter.process(aws.put_csv("always.csv", _csv(VALID, VALID)), lambda_context)
    assert len(sleeps) == 4
    assert all(0 <= s <= 5.0 for s in sleeps)


# --- the invariant on a generated file --------------------------------------------------

_BROKEN = [
    lambda r: ["not-an-email", *r[1:]],
    lambda r: ["", *r[1:]],
    lambda r: [*r[:3], " ", *r[4:]],
    lambda r: [*r[:6], "z" * 1001],
    lambda r: r[:5],
    lambda r: [*r, "surplus"],
]


def _generated_file(rows: int, seed: int) -> tuple[bytes, int]:
    rng = random.Random(seed)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(HEADER.split(","))
    invalid = 0
    for i in range(rows):
        row = [
            f"user{i}+{rng.randint(0, 99)}@example.com",
            "Fïrst",
            f"Last, {i}",
            f"Company {i}",
            "Buyer",
            "US",
            'note\nwith "quotes"' if i % 7 == 0 else "",
        ]
        if rng.random() < 0.12:
            row = rng.choice(_BROKEN)(row)
            invalid += 1
        writer.writerow(row)
    return buffer.getvalue().encode("utf-8"), invalid


def test_published_plus_invalid_equals_data_rows(aws, lambda_context):
    # moto's SQS is quadratic in queue depth, so for thousands of events we observe what
    # EventBridge accepted at the botocore boundary instead of draining a queue.
    events = aws.session.client("events")
    events.remove_targets(Rule="capture-all", EventBusName=BUS, Ids=["capture"])
    accepted: list[dict] = []

    # PutEvents calls run in parallel: botocore's per-request ``context`` pairs each
    # request with its response.
    def record_accepted(params, context, **_):
        context["test.entries"] = params["Entries"]

    def after(parsed, context, **_):
        for entry, result in zip(context["test.entries"], parsed["Entries"], strict=True):
            if "EventId" in result and entry["DetailType"] == "Prospect Row Validated":
                accepted.append(json.loads(entry["Detail"]))

    aws.session.events.register("before-parameter-build.eventbridge.PutEvents", record_accepted)
    aws.session.events.register("after-call.eventbridge.PutEvents", after)
    splitter = build_splitter(Settings.from_env(), session=aws.session)
    body, expected_invalid = _generated_file(3000, seed=20261129)

    result = splitter.process(aws.put_csv("generated.csv", body), lambda_context)

    invalid_items = [
        i for i in aws.failures(result["upload_id"]).values() if i["kind"] == "validation"
    ]
    assert result["rows"] == 3000
    assert result["invalid"] == expected_invalid == len(invalid_items)
    assert len(accepted) + len(invalid_items) == 3000
    row_numbers = {d["row_number"] for d in accepted} | {
        int(i["row_number"]) for i in invalid_items
    }
    assert row_numbers == set(range(1, 3001))  # every row exactly once, one way or the other


def test_streaming_memory_is_flat():
    """Parsing 4 MB peaks at a small fraction of the file: nothing buffers the whole body."""
    line = (VALID + "\n").encode()
    chunk = line * 1000

    def chunks():
        yield (HEADER + "\n").encode()
        for _ in range(len(chunk) and (4 * 1024 * 1024) // len(chunk)):
            yield chunk

    tracemalloc.start()
    try:
        count = sum(1 for _ in iter_records(chunks(), max_bytes=64 * 1024 * 1024))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count > 50_000
    assert peak < 1024 * 1024


def test_stream_rejects_more_bytes_than_allowed():
    with pytest.raises(UploadRejected) as raised:
        list(iter_records([(HEADER + "\n").encode(), b"x" * 100], max_bytes=50))
    assert raised.value.error_code == "FileTooLarge"


# --- the sample file -----------------------------------------------------------------------


def test_sample_file_splits_into_expected_counts(aws, lambda_context):
    from pathlib import Path

    sample = Path(__file__).resolve().parents[2] / "data" / "prospects-sample.csv"
    result = handler(aws.put_csv("prospects-sample.csv", sample.read_bytes()), lambda_context)

    assert (result["rows"], result["valid"], result["invalid"]) == (40, 34, 6)
    codes = sorted(
        i["error_code"]
        for i in aws.failures(result["upload_id"]).values()
        if i["kind"] == "validation"
    )
    assert codes == [
        "FieldCountMismatch",
        "FieldTooLong",
        "InvalidEmail",
        "InvalidEmail",
        "InvalidEmail",
        "MissingCompany",
    ]
    rows = _rows(aws.drain_published())
    values = aws.rows(result["upload_id"])
    assert len(rows) == 34 and all(set(r) == {"upload_id", "row_number"} for r in rows)
    assert any("\n" in values[r["row_number"]]["notes"] for r in rows)
    assert any(values[r["row_number"]]["email"] == "用户@例子.广告" for r in rows)


# --- Message Batches delivery (issue 19) ---------------------------------------------------

INVALID = "not-an-email,Bo,Li,Acme,CEO,US,"


def _split_marked(aws, lambda_context, monkeypatch, delivery, lines, min_rows="3"):
    """Split ``lines`` under DELIVERY=``delivery``; the row numbers marked for batch and not."""
    monkeypatch.setenv("DELIVERY", delivery)
    monkeypatch.setenv("BATCH_MIN_ROWS", min_rows)
    handler(aws.put_csv(f"{delivery}-{len(lines)}.csv", _csv(*lines)), lambda_context)
    rows = _rows(aws.drain_published())
    marked = sorted(r["row_number"] for r in rows if r.get("delivery") == "batch")
    unmarked = sorted(r["row_number"] for r in rows if "delivery" not in r)
    return marked, unmarked


def test_auto_sends_an_upload_with_batch_min_rows_valid_rows_by_batch(
    aws, lambda_context, monkeypatch
):
    # GIVEN BATCH_MIN_ROWS=3 and an upload of 3 valid rows (and one invalid)
    marked, unmarked = _split_marked(
        aws, lambda_context, monkeypatch, "auto", [VALID, INVALID, VALID, VALID]
    )
    # THEN every valid row carries the batch marker
    assert (marked, unmarked) == ([1, 3, 4], [])


def test_auto_counts_valid_rows_not_rows(aws, lambda_context, monkeypatch):
    # GIVEN 4 rows of which only 2 are valid: below BATCH_MIN_ROWS=3
    marked, unmarked = _split_marked(
        aws, lambda_context, monkeypatch, "auto", [VALID, INVALID, INVALID, VALID]
    )
    # THEN the upload goes realtime: no row is marked
    assert (marked, unmarked) == ([], [1, 4])


@pytest.mark.parametrize(("delivery", "batch"), [("batch", True), ("realtime", False)])
def test_batch_and_realtime_ignore_the_row_count(aws, lambda_context, monkeypatch, delivery, batch):
    marked, unmarked = _split_marked(aws, lambda_context, monkeypatch, delivery, [VALID])
    assert (marked, unmarked) == (([1], []) if batch else ([], [1]))


def test_a_splitter_without_delivery_set_sends_everything_realtime(
    aws, lambda_context, monkeypatch
):
    # A splitter deployed without a batch step must never mark a row for one.
    monkeypatch.delenv("DELIVERY", raising=False)
    assert Settings.from_env().delivery == "realtime"


def test_an_unknown_delivery_is_a_configuration_error(aws, monkeypatch):
    from prospect_contract.errors import ConfigurationError

    monkeypatch.setenv("DELIVERY", "later")
    with pytest.raises(ConfigurationError, match="DELIVERY must be one of realtime, batch, auto"):
        Settings.from_env()
