"""Upload ledger: each row counted once, exactly one completion event per upload (moto)."""

from __future__ import annotations

import json
import threading
import time

import pytest
from botocore.exceptions import ClientError
from prospect_contract import metrics as upload_metrics
from prospect_contract.cost import Price
from prospect_contract.errors import ConfigurationError
from upload_accounting import LedgerSettings, RowAccounted, SummaryPublishError, UploadLedger
from upload_accounting.ledger import PUBLISH_LEASE_SECONDS

from .conftest import BUS
from .fault_injection import FlakyPutEvents
from .upload_tables import (
    UPLOAD_ROWS_TABLE,
    UPLOADS_TABLE,
    completed_events,
    create_upload_tables,
    upload_item,
)

T0 = 1_800_000_000.0
DEADLINE = 3600


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def new_ledger(aws, clock, model_price=None, **options):
    """A ledger whose clients come from ``aws.session`` now (after any hooks on it)."""
    settings = LedgerSettings(
        uploads_table_name=UPLOADS_TABLE,
        upload_rows_table_name=UPLOAD_ROWS_TABLE,
        event_bus_name=BUS,
        deadline_seconds=DEADLINE,
        split_deadline_seconds=600,
        model_price=model_price,
    )
    return UploadLedger(
        settings,
        dynamodb=aws.session.client("dynamodb"),
        events=aws.session.client("events"),
        clock=clock,
        **options,
    )


@pytest.fixture
def ledger(aws, clock):
    create_upload_tables()
    return new_ledger(aws, clock)


def billed(input_tokens=100, output_tokens=2, **extra):
    return {
        "status": "completed",
        "replayed": False,
        "model_requests": 1,
        "rate_limited": 0,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
        "result": {"status": "completed", "label": "hot"},
        "error_code": None,
        **extra,
    }


REPLAYED = {
    "status": "completed",
    "replayed": True,
    "model_requests": 0,
    "rate_limited": 0,
    "usage": {"input_tokens": 0, "output_tokens": 0},
    "result": {"status": "completed", "label": "hot"},
    "error_code": None,
}


def row_event(upload_id="u-1", row_number=1):
    return {"detail-type": "Prospect Row Validated", "detail": {"upload_id": upload_id,
            "row_number": row_number}}  # fmt: skip


def test_begin_opens_the_upload_once(aws, ledger):
    # WHEN the splitter opens an upload twice (a retried run)
    first = ledger.begin("u-1", bucket="b", key="in/a.csv")
    second = ledger.begin("u-1", bucket="b", key="other.csv")
    # THEN the first call wins and the item starts with zero counts
    item = upload_item("u-1")
    assert (first, second) == (True, False)
    assert (item["status"], item["key"]) == ("splitting", "in/a.csv")
    assert item["classified"] == {} and item["failed"] == {} and item["model_requests"] == 0
    assert item["expires_at"] == int(T0) + 90 * 86400


def test_every_valid_row_accounted_completes_once_with_all_counts(aws, ledger):
    ledger.begin("u-1", bucket="b", key="in/a.csv")
    ledger.split_finished("u-1", rows=4, valid=3, invalid=1, deduplicated=2)
    ledger.row_classified("u-1", 1, "hot", billed())
    ledger.row_classified("u-1", 2, "cold", billed(input_tokens=50, output_tokens=1))
    assert completed_events(aws.drain_published()) == []  # one row still open

    ledger.row_failed("u-1", 3, "ModelRejectedInput")

    [event] = completed_events(aws.drain_published())
    assert event["source"] == "prospect-uploader"
    detail = event["detail"]
    assert detail == {
        "upload_id": "u-1", "bucket": "b", "key": "in/a.csv", "status": "completed",
        "created_at": detail["created_at"], "completed_at": detail["completed_at"],
        "rows": 4, "valid": 3, "invalid": 1,
        "classified": {"hot": 1, "cold": 1}, "failed": {"ModelRejectedInput": 1},
        "classified_total": 2, "failed_total": 1, "model_requests": 2, "rate_limited": 0,
        "duplicates_suppressed": 0, "input_tokens": 150, "output_tokens": 3,
        "requests_saved": 0, "deduplicated": 2, "missing": 0,
        "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
        "replayed_input_tokens": 0, "replayed_output_tokens": 0,
        "replayed_cache_creation_input_tokens": 0, "replayed_cache_read_input_tokens": 0,
        # Message Batches (issue 19): none here, and this split recorded no delivery.
        "delivery": None, "batch_requests": 0, "batch_input_tokens": 0,
        "batch_output_tokens": 0, "batch_cache_creation_input_tokens": 0,
        "batch_cache_read_input_tokens": 0, "batch_tokens": 0, "batches": 0,
        # Issue 32: no outcome here carried a cost.
        "cost_nanousd": 0, "priced_requests": 0, "replayed_cost_nanousd": 0,
        "priced_replays": 0,
        # No MODEL_PRICE: the cost is unknown, never a guess.
        "cost_usd": None, "saved_by_replays_usd": None, "saved_by_cache_usd": None,
        "saved_by_batch_usd": None,
        # Issue 36: the one counting rule (prospect_contract.upload_status), as the mail says.
        "state": "complete_with_failures", "labelled": 2,
        "status_text": "complete with failures: 2 labelled, 1 failed, 1 invalid",
    }  # fmt: skip
    item = upload_item("u-1")
    assert item["status"] == "completed" and "summary_published_at" in item
    assert "sweep_shard" not in item  # out of the sweeper's index


def test_a_row_counts_once_whatever_its_deliveries(aws, ledger):
    ledger.begin("u-1", bucket="b", key="k.csv")
    ledger.split_finished("u-1", rows=2, valid=2, invalid=0)

    assert ledger.row_classified("u-1", 1, "hot", billed()) is RowAccounted.COUNTED
    assert ledger.row_classified("u-1", 1, "hot", REPLAYED) is RowAccounted.DUPLICATE
    ledger.record_outcome(row_event(row_number=1), REPLAYED)

    item = upload_item("u-1")
    assert item["classified"] == {"hot": 1} and item["classified_total"] == 1
    assert (item["duplicates_suppressed"], item["requests_saved"]) == (2, 2)
    assert item["model_requests"] == 1
    assert item["status"] == "classifying"


def test_the_recorder_and_the_runtime_reporting_one_dead_letter_count_it_once(aws, ledger):
    ledger.begin("u-1", bucket="b", key="k.csv")
    ledger.split_finished("u-1", rows=1, valid=1, invalid=0)
    dead = {**billed(), "status": "dead_lettered", "error_code": "RateLimitExhausted",
            "model_requests": 0, "usage": {"input_tokens": 0, "output_tokens": 0},
            "result": {"status": "dead_lettered"}}  # fmt: skip

    # GIVEN the recorder got there first, THEN the runtime's own report is no duplicate
    ledger.row_failed("u-1", 1, "RateLimitExhausted")
    ledger.record_outcome(row_event(), dead)

    item = upload_item("u-1")
    assert item["failed"] == {"RateLimitExhausted": 1} and item["failed_total"] == 1
    assert item["duplicates_suppressed"] == 0
    assert len(completed_events(aws.drain_published())) == 1


def test_rows_accounted_before_the_split_finishes_complete_at_split_end(aws, ledger):
    ledger.begin("u-1", bucket="b", key="k.csv")
    ledger.row_classified("u-1", 1, "warm", billed())
    assert completed_events(aws.drain_published()) == []

    ledger.split_finished("u-1", rows=1, valid=1, invalid=0)
    ledger.split_finished("u-1", rows=1, valid=1, invalid=0)  # a retried splitter

    [event] = completed_events(aws.drain_published())
    assert event["detail"]["classified"] == {"warm": 1}


def test_an_upload_without_valid_rows_completes_at_split_end(aws, ledger):
    ledger.begin("u-1", bucket="b", key="k.csv")
    ledger.split_finished("u-1", rows=2, valid=0, invalid=2)
    [event] = completed_events(aws.drain_published())
    assert (event["detail"]["status"], event["detail"]["invalid"]) == ("completed", 2)


def test_concurrent_last_rows_emit_exactly_one_event(aws, ledger):
    rows = 16
    ledger.begin("u-1", bucket="b", key="k.csv")
    ledger.split_finished("u-1", rows=rows, valid=rows, invalid=0)
    barrier = threading.Barrier(rows)

    def classify(row_number: int) -> None:
        barrier.wait()
        ledger.row_classified("u-1", row_number, "hot", billed())

    threads = [threading.Thread(target=classify, args=(n,)) for n in range(1, rows + 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(completed_events(aws.drain_published())) == 1
    assert upload_item("u-1")["classified_total"] == rows


def test_a_late_row_after_completion_updates_counts_but_sends_nothing(aws, ledger):
    ledger.begin("u-1", bucket="b", key="k.csv")
    ledger.split_finished("u-1", rows=1, valid=1, invalid=0)
    ledger.row_failed("u-1", 1, "InternalServerError")
    aws.drain_published()

    # WHEN an operator retry classifies the failed row
    result = ledger.row_classified("u-1", 1, "hot", billed())

    assert result is RowAccounted.RECLASSIFIED
    item = upload_item("u-1")
    assert item["classified"] == {"hot": 1} and item["failed"] == {"InternalServerError": 0}
    assert (item["classified_total"], item["failed_total"]) == (1, 0)
    assert completed_events(aws.drain_published()) == []


def test_rate_limited_and_retry_deliveries_only_add_counters(aws, ledger):
    ledger.begin("u-1", bucket="b", key="k.csv")
    limited = {"status": "rate_limited", "replayed": False, "model_requests": 0,
               "rate_limited": 1, "usage": {"input_tokens": 0, "output_tokens": 0},
               "result": None, "error_code": None}  # fmt: skip
    ledger.record_outcome(row_event(), limited)
    ledger.record_outcome(row_event(), {**limited, "status": "retry", "rate_limited": 0,
                                        "model_requests": 1})  # fmt: skip

    item = upload_item("u-1")
    assert (item["rate_limited"], item["model_requests"], item["classified_total"]) == (1, 1, 0)


# -- issue 31: each key's billed requests and tokens, once, from its totals ----------------------
def keyed(status="completed", *, key="model-step#k1", requests=None, replayed=False, billed=0,
          tokens=(0, 0), label="hot"):  # fmt: skip
    """An outcome of a model step that reports its key's totals (``key_*``)."""
    result = None
    if status == "completed":
        result = {"status": "completed", "label": label,
                  "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]}}  # fmt: skip
    elif status == "dead_lettered":
        result = {"status": "dead_lettered", "error_code": "InternalServerError"}
    return {
        "status": status, "replayed": replayed, "model_requests": billed, "rate_limited": 0,
        "usage": {"input_tokens": tokens[0] * billed, "output_tokens": tokens[1] * billed},
        "result": result,
        "error_code": "InternalServerError" if status == "dead_lettered" else None,
        "key_record_id": key, "key_model_requests": requests,
        "key_usage": None if requests is None else {"input_tokens": tokens[0] * requests,
                                                    "output_tokens": tokens[1] * requests},
    }  # fmt: skip


def test_a_key_replayed_after_its_billed_delivery_was_lost_is_counted_from_its_totals(aws, ledger):
    # GIVEN the delivery that billed the key never reported (killed after storing the answer)
    ledger.begin("u-1", bucket="b", key="k.csv")
    ledger.split_finished("u-1", rows=1, valid=1, invalid=0)
    # WHEN only its replay reports, then a duplicate
    ledger.record_outcome(row_event(), keyed(requests=1, replayed=True, tokens=(100, 2)))
    ledger.record_outcome(row_event(), keyed(requests=1, replayed=True, tokens=(100, 2)))
    # THEN the key's one request and its tokens are counted, once
    item = upload_item("u-1")
    assert (item["model_requests"], item["input_tokens"], item["output_tokens"]) == (1, 100, 2)
    assert (item["requests_saved"], item["duplicates_suppressed"]) == (2, 1)


def test_a_keys_failed_attempts_count_once_through_its_terminal_totals(aws, ledger):
    ledger.begin("u-1", bucket="b", key="k.csv")
    for _ in range(2):  # two billed 500s: counted by the key's totals, not here
        ledger.record_outcome(row_event(), keyed("retry", billed=1))
    ledger.record_outcome(row_event(), keyed(requests=3, billed=1, tokens=(10, 1)))
    item = upload_item("u-1")
    assert item["model_requests"] == 3 and item["input_tokens"] == 30


def test_an_operator_retry_that_fails_again_counts_its_own_key(aws, ledger):
    ledger.begin("u-1", bucket="b", key="k.csv")
    ledger.split_finished("u-1", rows=1, valid=1, invalid=0)
    ledger.row_failed("u-1", 1, "InternalServerError")  # the recorder, first
    for key in ("model-step#k1", "model-step#k1", "model-step#retry1"):
        ledger.record_outcome(row_event(), keyed("dead_lettered", key=key, requests=3))
    item = upload_item("u-1")
    assert item["failed"] == {"InternalServerError": 1}
    assert item["model_requests"] == 6  # 3 for the key, 3 for its retry: each once


def test_a_reclassifying_retry_counts_its_key_once(aws, ledger):
    ledger.begin("u-1", bucket="b", key="k.csv")
    ledger.split_finished("u-1", rows=1, valid=1, invalid=0)
    ledger.record_outcome(row_event(), keyed("dead_lettered", requests=1))
    retried = keyed(key="model-step#retry1", requests=1, billed=1, tokens=(7, 1))
    assert ledger.row_classified("u-1", 1, "hot", retried) is RowAccounted.RECLASSIFIED
    assert ledger.row_classified("u-1", 1, "hot", retried) is RowAccounted.DUPLICATE
    item = upload_item("u-1")
    assert (item["model_requests"], item["input_tokens"]) == (2, 7)


def test_rows_of_an_unknown_upload_are_not_accounted(aws, ledger):
    assert ledger.row_classified("ghost", 1, "hot", billed()) is RowAccounted.UNKNOWN_UPLOAD
    ledger.record_delivery("ghost", billed())
    assert upload_item("ghost") is None


def test_rejection_closes_the_upload_even_without_begin(aws, ledger):
    ledger.split_finished(
        "u-bad", rows=0, valid=0, invalid=0, rejected_reason="too many rows",
        bucket="b", key='we"ird\nname.csv',
    )  # fmt: skip
    [event] = completed_events(aws.drain_published())
    assert event["detail"]["status"] == "rejected"
    assert event["detail"]["reason"] == "too many rows"
    assert event["detail"]["key"] == 'we"ird\nname.csv'


def test_sweeper_closes_an_overdue_upload_as_incomplete_once(aws, ledger, clock):
    ledger.begin("u-1", bucket="b", key="k.csv")
    ledger.split_finished("u-1", rows=3, valid=3, invalid=0)
    ledger.row_classified("u-1", 1, "hot", billed())

    assert ledger.sweep() == {}  # before the deadline: nothing to do
    clock.now += DEADLINE + 1
    assert ledger.sweep() == {"u-1": "incomplete"}
    assert ledger.sweep() == {}

    [event] = completed_events(aws.drain_published())
    assert (event["detail"]["status"], event["detail"]["missing"]) == ("incomplete", 2)
    # A straggler is still counted, and no second summary goes out.
    ledger.row_classified("u-1", 2, "cold", billed())
    assert upload_item("u-1")["classified_total"] == 2
    assert completed_events(aws.drain_published()) == []


def test_sweeper_closes_an_upload_whose_split_never_finished(aws, ledger, clock):
    ledger.begin("u-1", bucket="b", key="k.csv")
    clock.now += 600 + DEADLINE + 1
    assert ledger.sweep() == {"u-1": "incomplete"}
    [event] = completed_events(aws.drain_published())
    assert event["detail"]["missing"] is None and event["detail"]["rows"] is None
    assert "did not finish" in event["detail"]["reason"]


def test_a_failed_publish_is_retried_by_the_sweeper_after_the_lease(aws, ledger, clock):
    def refuse(**_):
        raise ClientError({"Error": {"Code": "InternalFailure", "Message": "x"}}, "PutEvents")

    ledger.begin("u-1", bucket="b", key="k.csv")
    ledger.split_finished("u-1", rows=1, valid=1, invalid=0)
    ledger._events.meta.events.register("before-call.events.PutEvents", refuse)
    # WHEN the publish fails after the status change won
    with pytest.raises(ClientError):
        ledger.row_classified("u-1", 1, "hot", billed())
    ledger._events.meta.events.unregister("before-call.events.PutEvents", refuse)
    assert upload_item("u-1")["status"] == "completed"
    # THEN a retry within the lease does not publish, the sweeper after it does, once
    ledger.row_classified("u-1", 1, "hot", REPLAYED)
    assert completed_events(aws.drain_published()) == []
    clock.now += PUBLISH_LEASE_SECONDS + 1
    assert ledger.sweep() == {"u-1": "published"}
    assert ledger.sweep() == {}
    assert len(completed_events(aws.drain_published())) == 1


def test_a_throttled_completion_event_is_sent_again(aws, clock):
    # GIVEN the bus throttles the first completion entry it sees
    create_upload_tables()
    flaky = FlakyPutEvents(lambda call, entries: {0} if call == 1 else set()).install(aws.session)
    sleeps: list[float] = []
    ledger = new_ledger(aws, clock, sleep=sleeps.append)
    ledger.begin("u-1", bucket="b", key="k.csv")
    ledger.split_finished("u-1", rows=1, valid=1, invalid=0)
    # WHEN the last row completes the upload
    ledger.row_classified("u-1", 1, "hot", billed())
    # THEN the entry was re-sent after one backoff, published once and marked sent
    assert (flaky.calls, len(sleeps)) == (2, 1)
    assert len(completed_events(aws.drain_published())) == 1
    assert upload_item("u-1")["summary_published_at"]


def test_a_rejected_completion_event_raises_at_once_and_is_published_later(aws, clock):
    create_upload_tables()
    FlakyPutEvents(lambda call, entries: {0} if call == 1 else set(), "MalformedDetail").install(
        aws.session
    )
    sleeps: list[float] = []
    ledger = new_ledger(aws, clock, sleep=sleeps.append)
    ledger.begin("u-1", bucket="b", key="k.csv")
    ledger.split_finished("u-1", rows=1, valid=1, invalid=0)
    with pytest.raises(SummaryPublishError, match="not accepted: MalformedDetail") as raised:
        ledger.row_classified("u-1", 1, "hot", billed())
    assert sleeps == [] and raised.value.failures[0][0] == "MalformedDetail"
    clock.now += PUBLISH_LEASE_SECONDS + 1
    assert ledger.sweep() == {"u-1": "published"}
    assert len(completed_events(aws.drain_published())) == 1


def test_settings_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("UPLOADS_TABLE_NAME", "u")
    monkeypatch.setenv("UPLOAD_ROWS_TABLE_NAME", "r")
    monkeypatch.setenv("EVENT_BUS_NAME", "bus")
    monkeypatch.setenv("UPLOAD_DEADLINE_SECONDS", "7200")
    settings = LedgerSettings.from_env()
    assert (settings.deadline_seconds, settings.retention_days) == (7200, 90)
    monkeypatch.setenv("UPLOAD_RETENTION_DAYS", "-1")
    with pytest.raises(ConfigurationError, match="UPLOAD_RETENTION_DAYS must be positive"):
        LedgerSettings.from_env()


def test_the_classifier_hook_accounts_through_the_environment(aws, monkeypatch):
    # GIVEN the classify function's environment as the stack sets it
    from prospect_classifier import accounting

    create_upload_tables()
    monkeypatch.setenv("UPLOADS_TABLE_NAME", UPLOADS_TABLE)
    monkeypatch.setenv("UPLOAD_ROWS_TABLE_NAME", UPLOAD_ROWS_TABLE)
    monkeypatch.setattr(accounting, "_ledger", None)
    UploadLedger.from_environment().begin("u-1", bucket="b", key="k.csv")
    # WHEN the hook sees a completed delivery
    accounting.record_outcome(row_event(), billed())
    # THEN the row is counted
    assert upload_item("u-1")["classified"] == {"hot": 1}


def test_the_classifier_hook_is_off_without_an_uploads_table(aws, monkeypatch):
    from prospect_classifier import accounting

    monkeypatch.delenv("UPLOADS_TABLE_NAME", raising=False)
    monkeypatch.setattr(accounting, "_ledger", None)
    accounting.record_outcome(row_event(), billed())
    assert accounting._ledger is None


def test_the_sweeper_handler_sweeps_with_the_environment(aws, monkeypatch):
    from upload_accounting import sweeper

    create_upload_tables()
    monkeypatch.setenv("UPLOADS_TABLE_NAME", UPLOADS_TABLE)
    monkeypatch.setenv("UPLOAD_ROWS_TABLE_NAME", UPLOAD_ROWS_TABLE)
    monkeypatch.setenv("UPLOAD_DEADLINE_SECONDS", "1")
    monkeypatch.setenv("UPLOAD_SPLIT_DEADLINE_SECONDS", "1")
    sweeper._ledger.cache_clear()
    ledger = UploadLedger.from_environment()
    ledger.begin("u-1", bucket="b", key="k.csv")
    ledger.split_finished("u-1", rows=1, valid=1, invalid=0)
    # WHEN the scheduled rule invokes the sweeper after the deadline
    time.sleep(2)
    try:
        result = sweeper.handler({"source": "aws.events", "detail-type": "Scheduled Event"}, None)
    finally:
        sweeper._ledger.cache_clear()
    # THEN the upload is closed as incomplete, one row missing
    assert result == {"swept": {"u-1": "incomplete"}}
    assert upload_item("u-1")["missing"] == 1


def test_the_summary_reports_cache_tokens_dollars_and_savings(aws, clock):
    from prospect_contract.cost import Price

    create_upload_tables()
    price = Price(input=1.0, output=5.0, cache_write=1.25, cache_read=0.1, batch_discount=0.5)
    ledger = new_ledger(aws, clock, model_price=price)
    ledger.begin("u-1", bucket="b", key="in/a.csv")
    ledger.split_finished("u-1", rows=2, valid=2, invalid=0)
    # Row 1 writes the 6,000-token prompt to the cache, a duplicate of row 1 is answered from
    # its stored result, and row 2 reads the cache.
    write = {"input_tokens": 40, "output_tokens": 1, "cache_creation_input_tokens": 6000,
             "cache_read_input_tokens": 0}  # fmt: skip
    read = {**write, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 6000}
    stored = {"status": "completed", "label": "hot", "usage": write}
    ledger.row_classified("u-1", 1, "hot", billed(usage=write, result=stored))
    ledger.row_classified("u-1", 1, "hot", {**REPLAYED, "result": stored})
    ledger.row_classified("u-1", 2, "cold", billed(usage=read))

    [event] = completed_events(aws.drain_published())
    detail = event["detail"]
    assert (detail["cache_creation_input_tokens"], detail["cache_read_input_tokens"]) == (
        6000,
        6000,
    )
    # 80 in x $1 + 2 out x $5 + 6,000 written x $1.25 + 6,000 read x $0.10, per million.
    assert detail["cost_usd"] == 0.00819
    # The duplicate's request, billed as its original was: 40 in, 1 out, 6,000 written.
    assert detail["saved_by_replays_usd"] == 0.007545
    assert detail["requests_saved"] == 1
    # 12,000 cached tokens at $1, less $0.0075 of write and $0.0006 of read.
    assert detail["saved_by_cache_usd"] == 0.0039
    assert detail["saved_by_batch_usd"] == 0.0


HAIKU_4_5_PRICE = Price(input=1.0, output=5.0, cache_write=1.25, cache_read=0.1, batch_discount=0.5)


def _priced_upload(aws, clock, price: Price, rows: int) -> UploadLedger:
    """A ledger at ``price`` with upload ``u-1`` split into ``rows`` valid rows."""
    create_upload_tables()
    ledger = new_ledger(aws, clock, model_price=price)
    ledger.begin("u-1", bucket="b", key="in/a.csv")
    ledger.split_finished("u-1", rows=rows, valid=rows, invalid=0)
    return ledger


def test_the_summary_sums_each_requests_stored_cost_so_a_new_price_never_reprices_it(aws, clock):
    # Issue 32. GIVEN rows billed at the price of their day (each outcome's cost_usd, as the
    # step computed it, long-context tier included), and a ledger that now has another price
    later = Price(input=9.0, output=90.0, cache_write=9.0, cache_read=9.0, batch_discount=0.5)
    ledger = _priced_upload(aws, clock, later, rows=2)
    stored = {"status": "completed", "label": "hot", "cost_usd": 0.000012345}
    ledger.row_classified("u-1", 1, "hot", billed(result=stored, cost_usd=0.000012345))
    ledger.row_classified("u-1", 1, "hot", {**REPLAYED, "result": stored, "cost_usd": 0.0})
    # A 150,000-token prompt, billed at Haiku 5.5's long-context rates: (150,000 x $0.50 +
    # 2 x $2.50) / 1e6, which no upload-wide counters-times-price formula could give.
    ledger.row_classified("u-1", 2, "cold", billed(150_000, cost_usd=0.075005))

    [event] = completed_events(aws.drain_published())
    detail = event["detail"]
    # THEN the upload costs what its requests cost when billed, never the later price
    assert (detail["cost_nanousd"], detail["priced_requests"]) == (75_017_345, 2)
    assert detail["cost_usd"] == 0.075017
    # AND the duplicate saved what its original cost, as stored with the original
    assert (detail["replayed_cost_nanousd"], detail["priced_replays"]) == (12_345, 1)
    assert detail["saved_by_replays_usd"] == 0.000012


def test_a_request_billed_before_costs_were_stored_prices_the_upload_by_the_formula(aws, clock):
    ledger = _priced_upload(aws, clock, HAIKU_4_5_PRICE, rows=2)
    ledger.row_classified("u-1", 1, "hot", billed(cost_usd=0.5))
    ledger.row_classified("u-1", 2, "cold", billed())  # an older runtime's outcome: no cost

    [event] = completed_events(aws.drain_published())
    # One of two requests carried no cost: the counters at MODEL_PRICE, as before issue 32.
    assert event["detail"]["priced_requests"] == 1
    assert event["detail"]["cost_usd"] == (200 * 1.0 + 4 * 5.0) / 1e6


def batch_billed(batch_id: str, input_tokens: int = 100, output_tokens: int = 2) -> dict:
    """A delivery answered by a Message Batch result (issue 19)."""
    result = {"status": "completed", "label": "hot", "delivery": "batch", "batch_id": batch_id}
    return billed(input_tokens, output_tokens, result=result)


def test_batch_answers_count_batch_requests_tokens_and_batches_at_half_price(aws, clock):
    from prospect_contract.cost import Price

    create_upload_tables()
    price = Price(input=1.0, output=5.0, cache_write=1.25, cache_read=0.1, batch_discount=0.5)
    ledger = new_ledger(aws, clock, model_price=price)
    ledger.begin("u-1", bucket="b", key="in/a.csv")
    ledger.split_finished("u-1", rows=3, valid=3, invalid=0, delivery="batch")
    # GIVEN rows 1-2 answered by one batch, row 3 by another, and a duplicate of row 1
    # replayed from its stored batch result
    ledger.row_classified("u-1", 1, "hot", batch_billed("msgbatch_a"))
    ledger.row_classified(
        "u-1", 1, "hot", {**REPLAYED, "result": batch_billed("msgbatch_a")["result"]}
    )
    ledger.row_classified("u-1", 2, "hot", batch_billed("msgbatch_a"))
    ledger.row_classified("u-1", 3, "hot", batch_billed("msgbatch_b", 200, 4))

    [event] = completed_events(aws.drain_published())
    detail = event["detail"]
    # THEN every billed request is a batch request, counted once per request, in two batches
    assert detail["delivery"] == "batch"
    assert (detail["model_requests"], detail["batch_requests"], detail["batches"]) == (3, 3, 2)
    assert (detail["batch_input_tokens"], detail["batch_output_tokens"]) == (400, 8)
    assert detail["batch_tokens"] == 408
    assert (detail["input_tokens"], detail["output_tokens"]) == (400, 8)
    # AND the cost is half the realtime price: (400 x $1 + 8 x $5) / 1e6 = $0.00044 realtime
    assert detail["saved_by_batch_usd"] == 0.00022
    assert detail["cost_usd"] == 0.00022


def test_a_batch_upload_is_waiting_in_batch_until_its_rows_are_answered(aws, ledger):
    from prospect_viewer.uploads import upload_view

    ledger.begin("u-1", bucket="b", key="in/a.csv")
    ledger.split_finished("u-1", rows=3, valid=3, invalid=0, delivery="batch")
    ledger.row_classified("u-1", 1, "hot", batch_billed("msgbatch_a"))
    # WHEN the viewer shows the upload with one row answered
    view = upload_view(upload_item("u-1"))
    # THEN two rows are waiting in batch, one batch answered
    assert (view["delivery"], view["waiting_in_batch"], view["batches"]) == ("batch", 2, 1)
    assert view["batch_requests"] == 1 and view["batch_tokens"] == 102
    ledger.row_classified("u-1", 2, "hot", batch_billed("msgbatch_a"))
    ledger.row_failed("u-1", 3, "invalid_request_error")
    assert upload_view(upload_item("u-1"))["waiting_in_batch"] == 0


def _upload_metric_documents(out: str) -> list[dict]:
    documents = [json.loads(line) for line in out.splitlines() if line.startswith('{"_aws"')]
    return [doc for doc in documents if doc["_aws"]["CloudWatchMetrics"][0]["Namespace"]
            == upload_metrics.NAMESPACE]  # fmt: skip


def test_a_closed_upload_is_counted_once_in_the_ledgers_own_metrics(aws, ledger, capsys):
    # GIVEN an upload of three valid rows, one of which fails
    ledger.begin("u-1", bucket="b", key="in/a.csv")
    ledger.split_finished("u-1", rows=3, valid=3, invalid=0)
    ledger.row_classified("u-1", 1, "hot", billed())
    ledger.row_classified("u-1", 2, "cold", billed())
    # WHEN the last row closes it, and a late duplicate of that row arrives
    ledger.row_failed("u-1", 3, "ModelRejectedInput")
    ledger.row_failed("u-1", 3, "ModelRejectedInput")

    # THEN one EMF document counts the upload and its rows, on the uploads table's dimension
    [document] = _upload_metric_documents(capsys.readouterr().out)
    [directive] = document["_aws"]["CloudWatchMetrics"]
    assert directive["Dimensions"] == [[upload_metrics.DIMENSION]]
    assert document[upload_metrics.DIMENSION] == UPLOADS_TABLE
    assert {m["Name"] for m in directive["Metrics"]} == set(upload_metrics.METRIC_NAMES)
    assert {name: document[name] for name in upload_metrics.METRIC_NAMES} == {
        "UploadsCompleted": 1, "UploadsIncomplete": 0, "UploadsRejected": 0,
        # Issue 36: by the one counting rule, completed with a failed row; and its counts.
        "UploadsWithFailures": 1, "RowsClassified": 2, "RowsFailed": 1, "RowsInvalid": 0,
        "ModelRequests": 2,
    }  # fmt: skip


def test_a_keys_dollars_count_once_from_its_totals_at_the_price_it_was_billed(aws, ledger):
    # GIVEN a key whose three billed requests cost $0.0003 in all, priced when billed
    ledger.begin("u-1", bucket="b", key="k.csv")
    for _ in range(2):  # two billed 500s: their cost is in the key's totals, not here
        ledger.record_outcome(row_event(), {**keyed("retry", billed=1), "cost_usd": 0.0001})
    terminal = {**keyed(requests=3, billed=1, tokens=(10, 1)), "key_cost_usd": 0.0003}
    # WHEN its terminal outcome reports, then a replay of it
    ledger.record_outcome(row_event(), {**terminal, "cost_usd": 0.0001})
    ledger.record_outcome(row_event(), {**terminal, "replayed": True, "cost_usd": 0.0})
    # THEN the key's dollars are counted once, from its totals (billionths of a dollar)
    item = upload_item("u-1")
    assert (item["cost_nanousd"], item["priced_requests"]) == (300_000, 3)
