"""The splitter opens and closes each upload on the ledger, and its failure items expire."""

from __future__ import annotations

import time

import pytest
from prospect_splitter.config import Settings
from prospect_splitter.handler import build_splitter
from upload_accounting import UploadLedger

from .conftest import HEADER
from .upload_tables import (
    UPLOAD_ROWS_TABLE,
    UPLOADS_TABLE,
    completed_events,
    create_upload_tables,
    upload_item,
)

VALID = "ada@example.com,Ada,Lovelace,Analytical Engines,CTO,GB,"
INVALID = "not-an-email,Bo,Li,Acme,CEO,US,"


@pytest.fixture
def split(aws, monkeypatch, lambda_context):
    create_upload_tables()
    monkeypatch.setenv("UPLOADS_TABLE_NAME", UPLOADS_TABLE)
    monkeypatch.setenv("UPLOAD_ROWS_TABLE_NAME", UPLOAD_ROWS_TABLE)
    monkeypatch.setenv("FAILURE_RETENTION_DAYS", "30")

    def run(key: str, *lines: str) -> dict:
        splitter = build_splitter(Settings.from_env(), session=aws.session)
        event = aws.put_csv(key, "\n".join([HEADER, *lines]) + "\n")
        return splitter.process(event, lambda_context)

    return run


def test_a_split_upload_waits_for_its_rows_then_completes_once(aws, split):
    # WHEN the splitter publishes two valid rows and records one invalid
    result = split("in/today.csv", VALID, INVALID, VALID)
    # THEN the upload is classifying with the split's counts, and no summary yet
    item = upload_item(result["upload_id"])
    assert (item["status"], item["key"]) == ("classifying", "in/today.csv")
    assert (item["rows"], item["valid"], item["invalid"]) == (3, 2, 1)
    assert completed_events(aws.drain_published()) == []
    # AND once both rows are classified, exactly one summary goes out
    ledger = UploadLedger.from_environment(session=aws.session)
    for row_number in (1, 3):
        ledger.row_classified(result["upload_id"], row_number, "warm")
    [event] = completed_events(aws.drain_published())
    assert (event["detail"]["invalid"], event["detail"]["classified"]) == (1, {"warm": 2})


def test_a_rejected_upload_is_closed_at_once(aws, split, monkeypatch):
    monkeypatch.setenv("MAX_UPLOAD_BYTES", "20")
    result = split("big.csv", VALID, VALID)
    assert result["status"] == "rejected"
    [event] = completed_events(aws.drain_published())
    assert event["detail"]["status"] == "rejected" and "bytes" in event["detail"]["reason"]
    assert upload_item(result["upload_id"])["status"] == "rejected"


def test_splitter_failure_items_expire(aws, split):
    before = time.time()
    result = split("k.csv", INVALID)
    items = aws.failures(result["upload_id"])
    assert {item["kind"] for item in items.values()} == {"validation", "summary"}
    for item in items.values():
        assert before + 30 * 86400 - 1 <= int(item["expires_at"]) <= time.time() + 30 * 86400
