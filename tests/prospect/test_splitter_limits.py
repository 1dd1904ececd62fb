"""Splitter limits: the MAX_ROWS cost guard and every oversized shape of input.

Real handler against moto. Each whole-upload rejection must be recorded (failure
"upload" with its error_code), summarised as "rejected", and publish no row.
"""

from __future__ import annotations

import time
import tracemalloc

import pytest
from prospect_splitter.config import Settings
from prospect_splitter.csv_stream import (
    MAX_BLANK_LINES,
    MAX_FIELDS,
    MAX_RECORD_BYTES,
    UploadRejected,
    iter_records,
)
from prospect_splitter.handler import build_splitter, handler
from prospect_splitter.service import SplitHooks

from .conftest import HEADER

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


def _csv(*lines: str) -> str:
    return "\n".join([HEADER, *lines]) + "\n"


def _assert_rejected(aws, result: dict, error_code: str) -> dict:
    assert result["status"] == "rejected"
    assert (result["rows"], result["valid"], result["invalid"]) == (0, 0, 0)
    items = aws.failures(result["upload_id"])
    assert items["upload"]["error_code"] == error_code
    assert items["summary"]["status"] == "rejected"
    published = aws.drain_published()
    assert _rows(published) == []
    summaries = _summaries(published)
    assert [(s["status"], s["reason"]) for s in summaries] == [("rejected", result["reason"])]
    return items["upload"]


# --- the cost guard ----------------------------------------------------------------------


def test_more_rows_than_max_rows_is_rejected_before_any_row_is_published(
    aws, lambda_context, monkeypatch
):
    monkeypatch.setenv("MAX_ROWS", "5")
    # Invalid rows count too: MAX_ROWS bounds data rows, the bill of a whole upload.
    lines = [VALID] * 5 + ["not-an-email,Bo,Li,Acme,CEO,US,"]
    result = handler(aws.put_csv("six.csv", _csv(*lines)), lambda_context)

    item = _assert_rejected(aws, result, "TooManyRows")
    assert item["reason"] == "more than 5 data rows (limit MAX_ROWS=5)"
    assert not any(i["kind"] == "validation" for i in aws.failures(result["upload_id"]).values())


def test_exactly_max_rows_is_accepted(aws, lambda_context, monkeypatch):
    monkeypatch.setenv("MAX_ROWS", "5")
    lines = [VALID] * 4 + ["not-an-email,Bo,Li,Acme,CEO,US,", ""]  # a blank line is no row
    result = handler(aws.put_csv("five.csv", _csv(*lines)), lambda_context)

    assert (result["status"], result["rows"], result["valid"]) == ("completed", 5, 4)
    assert len(_rows(aws.drain_published())) == 4


def test_the_counting_pass_stops_reading_at_max_rows(aws, lambda_context, monkeypatch):
    # Bytes far past row MAX_ROWS + 1 are never decoded (the reader decodes a few KiB
    # ahead): the bad byte 180 KB in would otherwise make the rejection UndecodableBytes.
    monkeypatch.setenv("MAX_ROWS", "2")
    body = _csv(*[VALID] * 3000).encode() + b"\xff\xfe broken\n"
    result = handler(aws.put_csv("stops.csv", body), lambda_context)

    _assert_rejected(aws, result, "TooManyRows")


# --- oversized shapes ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "error_code", "reason_part"),
    [
        # 1 MiB of commas on one data line: the hostile shape of issue 10, scaled down.
        (_csv("," * (1024 * 1024)), "LineTooLong", "data row 1 is longer than 65536 bytes"),
        (_csv(VALID, "x" * (MAX_RECORD_BYTES + 1)), "LineTooLong", "data row 2"),
        # Under the limit in characters, over it in UTF-8 bytes (3 bytes a character).
        (_csv("€" * 22_000), "LineTooLong", "data row 1"),
        ("," * (1024 * 1024) + "\n" + VALID + "\n", "LineTooLong", "the header is longer"),
        (HEADER + "," * MAX_FIELDS + "\n" + VALID + "\n", "TooManyColumns", "the header has"),
        # Quote-free: rejected from the delimiter count, before csv splits the line.
        (_csv(VALID, VALID + "," * MAX_FIELDS), "TooManyFields", "data row 2 has more than 64"),
        # Quoted: csv parses it (bounded by bytes), then the exact count is checked.
        (_csv('"a",' * 100 + '"b"'), "TooManyFields", "data row 1 has 101 fields"),
        # Each physical line is short; the quoted record spans 20,001 of them.
        (_csv('a@example.com,"' + "line\n" * 20_000 + '",x,x,x,x,x'), "RecordTooLong", "spans"),
    ],
    ids=[
        "1-MiB-of-commas",
        "long-line",
        "long-in-bytes",
        "long-header",
        "wide-header",
        "wide-row-unquoted",
        "wide-row-quoted",
        "multi-line-record",
    ],
)
def test_oversized_shapes_are_recorded_rejections(
    aws, lambda_context, body, error_code, reason_part
):
    result = handler(aws.put_csv("shape.csv", body), lambda_context)

    item = _assert_rejected(aws, result, error_code)
    assert reason_part in item["reason"]


def test_moderately_wide_row_is_one_invalid_row(aws, lambda_context):
    # Up to MAX_FIELDS fields the record is parsed and recorded like any miscounted row.
    wide = ",".join(["b@example.com", *["x"] * (MAX_FIELDS - 1)])
    result = handler(aws.put_csv("wide.csv", _csv(VALID, wide)), lambda_context)

    assert (result["status"], result["valid"], result["invalid"]) == ("completed", 1, 1)
    row = aws.failures(result["upload_id"])["row#00000002"]
    assert row["error_code"] == "FieldCountMismatch"


def test_longest_valid_row_is_not_too_long(aws, lambda_context):
    # 1000 four-byte characters in each free-text field: about 24 KB, well inside 64 KiB.
    long_text = "😀" * 1000
    row = ",".join(["ada@example.com", *[long_text] * 3, long_text, "GB", long_text])
    result = handler(aws.put_csv("longest.csv", _csv(row)), lambda_context)

    assert (result["status"], result["valid"]) == ("completed", 1)
    [row] = _rows(aws.drain_published())
    assert aws.rows(result["upload_id"])[row["row_number"]]["notes"] == long_text


def test_field_over_the_row_limit_is_one_invalid_row(aws, lambda_context):
    result = handler(
        aws.put_csv("field.csv", _csv(VALID, f"b@example.com,B,C,Co,T,US,{'n' * 1001}")),
        lambda_context,
    )

    assert (result["status"], result["invalid"]) == ("completed", 1)
    assert aws.failures(result["upload_id"])["row#00000002"]["error_code"] == "FieldTooLong"


# --- memory on the hostile line ------------------------------------------------------------


def test_a_50_mib_line_of_commas_is_rejected_with_flat_memory():
    """Rejected after its first 64 KiB: the line is never held, let alone split."""
    chunk = b"," * (64 * 1024)

    def chunks():
        yield (HEADER + "\n").encode()
        for _ in range(50 * 16):  # 50 MiB
            yield chunk

    tracemalloc.start()
    try:
        with pytest.raises(UploadRejected) as raised:
            list(iter_records(chunks(), max_bytes=64 * 1024 * 1024))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert raised.value.error_code == "LineTooLong"
    assert peak < 1024 * 1024


# --- blank lines ------------------------------------------------------------------------------


def test_a_50_mib_file_of_newlines_is_rejected_as_too_many_blank_lines_within_a_second(
    aws, lambda_context
):
    # GIVEN an upload that is 50 MiB of newlines (no header, no row)
    event = aws.put_csv("newlines.csv", "\n" * (50 * 1024 * 1024))

    # WHEN the splitter handles it
    started = time.process_time()
    result = handler(event, lambda_context)
    seconds = time.process_time() - started

    # THEN it is a recorded rejection with its own code, decided within a second of CPU (this
    # process's own, which no other load on the machine stretches)
    item = _assert_rejected(aws, result, "TooManyBlankLines")
    assert f"more than {MAX_BLANK_LINES} blank lines" in item["reason"]
    assert seconds < 1.0, f"took {seconds:.2f} CPU seconds"


def test_blank_lines_within_the_budget_are_skipped_and_numbered_nowhere(aws, lambda_context):
    # GIVEN valid rows with MAX_BLANK_LINES blank lines between them (the whole budget)
    body = _csv(VALID, *([""] * MAX_BLANK_LINES), VALID.replace("ada@", "bob@"))

    # WHEN it is split
    result = handler(aws.put_csv("blank.csv", body), lambda_context)

    # THEN both rows are published as rows 1 and 2, and nothing is recorded as invalid
    assert (result["status"], result["valid"], result["invalid"]) == ("completed", 2, 0)
    assert [r["row_number"] for r in _rows(aws.drain_published())] == [1, 2]


def test_one_blank_line_over_the_budget_rejects_the_upload():
    lines = (HEADER + "\n" + "\n" * (MAX_BLANK_LINES + 1) + VALID + "\n").encode()
    with pytest.raises(UploadRejected) as raised:
        list(iter_records([lines], max_bytes=1024 * 1024))
    assert raised.value.error_code == "TooManyBlankLines"


# --- the start and end hooks ---------------------------------------------------------------


def test_hooks_see_the_start_and_the_counted_end(aws, lambda_context, monkeypatch):
    monkeypatch.setenv("MAX_ROWS", "3")
    calls: list[tuple] = []
    published_at_start: list[int] = []

    def started(ref):
        published_at_start.append(len(_rows(aws.drain_published())))
        calls.append(("started", ref.key))

    def finished(ref, result):
        calls.append(("finished", ref.key, result.status, result.error_code, result.valid))

    splitter = build_splitter(
        Settings.from_env(), session=aws.session, hooks=SplitHooks(started, finished)
    )
    splitter.process(aws.put_csv("ok.csv", _csv(VALID, VALID, "bad,B,C,Co,T,US,")), lambda_context)
    splitter.process(aws.put_csv("big.csv", _csv(*[VALID] * 4)), lambda_context)

    assert calls == [
        ("started", "ok.csv"),
        ("finished", "ok.csv", "completed", None, 2),
        ("finished", "big.csv", "rejected", "TooManyRows", 0),  # rejected: never started
    ]
    assert published_at_start == [0]  # started runs before the first row is published
