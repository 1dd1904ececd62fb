"""Failure recorder tests: every dead-letter shape lands in the failures table."""

from __future__ import annotations

import json
import time

import pytest
from botocore.exceptions import ClientError
from failure_recorder import handler as handler_module
from failure_recorder.handler import handler, record_batch
from upload_accounting import LedgerSettings, UploadLedger

from .conftest import BUS
from .upload_tables import (
    UPLOAD_ROWS_TABLE,
    UPLOADS_TABLE,
    completed_events,
    create_upload_tables,
    upload_item,
)

ARN = "arn:aws:events:us-east-1:123456789012"


def _row_event(upload_id="u-123", row_number=7, **detail):
    return {
        "version": "0",
        "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
        "detail-type": "Prospect Row Validated",
        "source": "prospect-uploader",
        "account": "123456789012",
        "time": "2026-11-29T09:00:00Z",
        "region": "us-east-1",
        "resources": [],
        "detail": {
            "upload_id": upload_id,
            "row_number": row_number,
            **detail,
        },
    }


def _record(message_id, body, **attributes):
    return {
        "messageId": message_id,
        "receiptHandle": f"rh-{message_id}",
        "body": body if isinstance(body, str) else json.dumps(body),
        "attributes": {"ApproximateReceiveCount": "1"},
        "messageAttributes": {
            name: {"stringValue": value, "dataType": "String"} for name, value in attributes.items()
        },
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:model-step-dlq",
        "awsRegion": "us-east-1",
    }


def _eventbridge_dlq(message_id="m-eb"):
    return _record(
        message_id,
        _row_event(),
        RULE_ARN=f"{ARN}:rule/prospect-bus/model-step",
        TARGET_ARN="arn:aws:lambda:us-east-1:123456789012:function:model-step",
        ERROR_CODE="SDK_CLIENT_ERROR",
        ERROR_MESSAGE="Lambda throttled the invocation",
    )


def _on_failure(message_id="m-lf"):
    return _record(
        message_id,
        {
            "version": "1.0",
            "timestamp": "2026-11-29T09:05:00.000Z",
            "requestContext": {
                "requestId": "b2b0fbd1-d2c6-4d8c-9ac6-6d1a2f4e2f0b",
                "functionArn": "arn:aws:lambda:us-east-1:123456789012:function:model-step:$LATEST",
                "condition": "RetriesExhausted",
                "approximateInvokeCount": 3,
            },
            "requestPayload": _row_event(row_number=12),
            "responseContext": {
                "statusCode": 200,
                "executedVersion": "$LATEST",
                "functionError": "Unhandled",
            },
            "responsePayload": {
                "errorMessage": "model timed out",
                "errorType": "ModelTimeoutError",
                "stackTrace": [],
            },
        },
    )


def _model_step(message_id="m-ms"):
    return _record(
        message_id,
        _row_event(row_number=3),
        ERROR_CODE="ModelRejectedInput",
        ERROR_MESSAGE="400 invalid_request_error: prompt too long",
        REQUEST_ID="req_011CXYZ",
    )


@pytest.fixture
def table(aws):
    return aws.failures_table


def test_eventbridge_dlq_shape(aws, table):
    response = handler({"Records": [_eventbridge_dlq()]}, None)

    assert response == {"batchItemFailures": []}
    item = aws.failures("u-123")["model#00000007"]
    assert item["kind"] == "model"
    assert item["source_shape"] == "eventbridge-dlq"
    assert item["error_code"] == "SDK_CLIENT_ERROR"
    assert item["reason"] == "Lambda throttled the invocation"
    assert int(item["row_number"]) == 7
    assert json.loads(item["original_event"]) == _row_event()
    assert item["rule_arn"].endswith("rule/prospect-bus/model-step")
    # Row events carry ids only (issue 18); the record holds no copy of the row.
    assert "raw_row" not in item
    assert item["recorded_at"].endswith("Z")


def test_lambda_on_failure_destination_shape(aws):
    handler({"Records": [_on_failure()]}, None)

    item = aws.failures("u-123")["model#00000012"]
    assert item["source_shape"] == "lambda-on-failure"
    assert item["error_code"] == "ModelTimeoutError"
    assert "RetriesExhausted after 3 invocation(s): model timed out" == item["reason"]
    assert json.loads(item["original_event"]) == _row_event(row_number=12)


def test_in_progress_duplicate_is_kept_apart_from_the_real_failure(aws):
    # GIVEN the row's real failure, then a concurrent duplicate that ran out of
    # retries on IdempotencyAlreadyInProgressError
    handler({"Records": [_on_failure("m-real")]}, None)
    duplicate = _on_failure("m-dup")
    body = json.loads(duplicate["body"])
    body["responsePayload"]["errorType"] = "IdempotencyAlreadyInProgressError"
    duplicate["body"] = json.dumps(body)
    # WHEN it is recorded
    handler({"Records": [duplicate]}, None)
    # THEN the real cause stays, and the duplicate is its own kind of item
    items = aws.failures("u-123")
    assert items["model#00000012"]["error_code"] == "ModelTimeoutError"
    assert items["duplicate#00000012"]["kind"] == "duplicate"
    assert "owns the row's outcome" in items["duplicate#00000012"]["reason"]


def test_model_step_own_message_shape(aws):
    handler({"Records": [_model_step()]}, None)

    item = aws.failures("u-123")["model#00000003"]
    assert item["source_shape"] == "model-step"
    assert item["error_code"] == "ModelRejectedInput"
    assert item["request_id"] == "req_011CXYZ"


def test_event_age_exceeded_has_no_response_payload(aws):
    record = _on_failure("m-age")
    body = json.loads(record["body"])
    body["requestContext"]["condition"] = "EventAgeExceeded"
    del body["responsePayload"], body["responseContext"]["functionError"]
    record["body"] = json.dumps(body)

    handler({"Records": [record]}, None)

    assert aws.failures("u-123")["model#00000012"]["error_code"] == "EventAgeExceeded"


def test_unparseable_body_is_stored_raw(aws):
    response = handler({"Records": [_record("m-raw", "not json {", ERROR_CODE="X")]}, None)

    assert response == {"batchItemFailures": []}
    item = aws.failures("unattributed")["message#m-raw"]
    assert (item["kind"], item["error_code"]) == ("other", "UnparseableDeadLetter")
    assert item["raw_body"] == "not json {"


def test_event_without_detail_is_unattributed(aws):
    handler({"Records": [_record("m-nodetail", {"source": "x"}, ERROR_CODE="Boom")]}, None)

    item = aws.failures("unattributed")["message#m-nodetail"]
    assert item["source_shape"] == "model-step"


def test_replay_converges_and_keeps_retry_marks(aws, table):
    handler({"Records": [_eventbridge_dlq("first")]}, None)
    table.update_item(
        Key={"upload_id": "u-123", "failure_id": "model#00000007"},
        UpdateExpression="SET retried_at = :t",
        ExpressionAttributeValues={":t": "2026-11-29T10:00:00.000Z"},
    )
    first_seen = aws.failures("u-123")["model#00000007"]["first_recorded_at"]

    handler({"Records": [_eventbridge_dlq("second")]}, None)

    items = aws.failures("u-123")
    assert list(items) == ["model#00000007"]
    assert items["model#00000007"]["retried_at"] == "2026-11-29T10:00:00.000Z"
    assert items["model#00000007"]["first_recorded_at"] == first_seen


def test_partial_batch_failure_reports_only_the_failed_write(aws):
    session = aws.session

    def fail_poison(params, **_):
        # Fault injected at the botocore boundary: DynamoDB refuses this one write.
        if params["Key"]["upload_id"] in ("poison", {"S": "poison"}):
            raise ClientError(
                {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "x"}},
                "UpdateItem",
            )

    session.events.register("before-parameter-build.dynamodb.UpdateItem", fail_poison)
    table = session.resource("dynamodb").Table("prospect-failures")
    poison = _record("m-poison", _row_event(upload_id="poison"), ERROR_CODE="Boom")

    response = record_batch([_eventbridge_dlq(), poison, _model_step()], table)

    assert response == {"batchItemFailures": [{"itemIdentifier": "m-poison"}]}
    assert set(aws.failures("u-123")) == {"model#00000007", "model#00000003"}
    assert aws.failures("poison") == {}


# ------------------------------------------------------------- filing by shape and type
def _summary_event(detail_type="Prospect Upload Completed", source="prospect-uploader"):
    return {
        **_row_event(),
        "source": source,
        "detail-type": detail_type,
        "detail": {"upload_id": "u-123", "bucket": "b", "key": "k.csv", "status": "completed"},
    }


@pytest.mark.parametrize("detail_type", ["Prospect Upload Completed", "Prospect Upload Summarized"])
def test_an_upload_summary_dead_letter_is_kind_upload_never_model(aws, detail_type):
    # GIVEN the alert rule could not deliver an upload's summary to the topic
    record = _record(
        "m-summary", _summary_event(detail_type),
        RULE_ARN=f"{ARN}:rule/prospect-bus/alerts", ERROR_CODE="SNS_ERROR",
        ERROR_MESSAGE="KMS access denied",
    )  # fmt: skip
    handler({"Records": [record]}, None)
    slug = detail_type.lower().replace(" ", "-")
    item = aws.failures("u-123")[f"event#{slug}"]
    assert (item["kind"], item["retryable"]) == ("upload", False)
    assert "row_number" not in item and "raw_row" not in item


def test_a_row_shaped_event_from_another_source_is_not_kind_model(aws):
    record = _record("m-foreign", {**_row_event(), "source": "someone.else"}, ERROR_CODE="X")
    handler({"Records": [record]}, None)
    item = aws.failures("u-123")["message#m-foreign"]
    assert item["kind"] == "other"


def test_an_s3_upload_event_dead_letter_is_kind_upload(aws):
    s3_event = {**_row_event(), "source": "aws.s3", "detail-type": "Object Created",
                "detail": {"bucket": {"name": "b"}, "object": {"key": "k.csv"}}}  # fmt: skip
    handler({"Records": [_record("m-s3", s3_event, RULE_ARN="r", ERROR_CODE="X")]}, None)
    assert aws.failures("unattributed")["message#m-s3"]["kind"] == "upload"


def test_buffer_queue_redrive_shape_is_recognised(aws):
    # GIVEN SQS redrove a row from the classify buffer queue: the body is the event,
    # there is no error attribute, only the runtime's own attempts counter
    record = _record("m-redrive", _row_event(row_number=9), attempts="1")
    record["attributes"]["ApproximateReceiveCount"] = "4"
    handler({"Records": [record]}, None)
    item = aws.failures("u-123")["model#00000009"]
    assert (item["source_shape"], item["error_code"]) == ("buffer-redrive", "ReceivesExhausted")
    assert "after 4 receive(s)" in item["reason"]
    assert (item["kind"], item["retryable"]) == ("model", True)


def test_a_row_the_model_step_sends_as_receives_exhausted_is_filed_as_a_redrive_is(aws):
    # GIVEN the runtime itself dead-letters a row its buffer queue gave up on
    record = _record("m-exhausted", _row_event(row_number=9), ERROR_CODE="ReceivesExhausted",
                     ERROR_MESSAGE="no receives left")  # fmt: skip
    handler({"Records": [record]}, None)
    item = aws.failures("u-123")["model#00000009"]
    # THEN it has the same code as SQS's own redrive, and stays retryable from the viewer
    assert (item["source_shape"], item["error_code"]) == ("model-step", "ReceivesExhausted")
    assert (item["kind"], item["retryable"]) == ("model", True)


# ------------------------------------------------------------- the model step's dead-letter id
LETTER_A = "a" * 64
LETTER_B = "0123456789abcdef" * 4


def _dead_letter(message_id, letter_id, row_number=3, code="ModelRejectedInput", **attributes):
    """The model step's dead letter: the event plus a ``dead_letter`` member, and the id
    again as the DEAD_LETTER_ID attribute."""
    body = {**_row_event(row_number=row_number),
            "dead_letter": {"id": letter_id, "error_code": code}}  # fmt: skip
    attributes = {"ERROR_CODE": code, "ERROR_MESSAGE": "refused", "DEAD_LETTER_ID": letter_id,
                  **attributes}  # fmt: skip
    return _record(message_id, body, **attributes)


def test_a_dead_letter_id_is_stored_and_the_original_event_is_kept_without_it(aws):
    handler({"Records": [_dead_letter("m-dl", LETTER_A)]}, None)
    item = aws.failures("u-123")["model#00000003"]
    assert item["dead_letter_id"] == LETTER_A
    # A viewer retry re-publishes original_event: it must be the event as published.
    assert json.loads(item["original_event"]) == _row_event(row_number=3)
    assert (item["source_shape"], item["error_code"]) == ("model-step", "ModelRejectedInput")


def test_the_dead_letter_id_attribute_alone_is_enough(aws):
    handler({"Records": [_record("m-attr", _row_event(row_number=3), ERROR_CODE="X",
                                 DEAD_LETTER_ID=LETTER_B)]}, None)  # fmt: skip
    assert aws.failures("u-123")["model#00000003"]["dead_letter_id"] == LETTER_B


def test_a_malformed_dead_letter_id_is_not_stored_but_the_member_is_still_dropped(aws):
    handler({"Records": [_dead_letter("m-bad", "not-hex")]}, None)
    item = aws.failures("u-123")["model#00000003"]
    assert "dead_letter_id" not in item
    assert "dead_letter" not in json.loads(item["original_event"])


def test_a_dead_letter_member_without_error_attributes_is_still_a_redrive(aws):
    # GIVEN SQS redrove a message that carried the member, and its attributes are gone
    body = {**_row_event(row_number=9), "dead_letter": {"id": LETTER_A, "error_code": "X"}}
    handler({"Records": [_record("m-redriven", body)]}, None)
    item = aws.failures("u-123")["model#00000009"]
    assert (item["error_code"], item["dead_letter_id"]) == ("ReceivesExhausted", LETTER_A)
    assert json.loads(item["original_event"]) == _row_event(row_number=9)


@pytest.mark.parametrize(
    ("code", "retryable"),
    [("RateLimitExhausted", True), ("InternalServerError", True), ("APITimeoutError", True),
     ("ModelRejectedInput", False), ("InvalidLabel", False)],
)  # fmt: skip
def test_runtime_error_codes_say_whether_a_retry_may_help(aws, code, retryable):
    handler({"Records": [_record("m-code", _row_event(), ERROR_CODE=code)]}, None)
    item = aws.failures("u-123")["model#00000007"]
    assert (item["error_code"], item["retryable"]) == (code, retryable)


def test_items_expire_after_the_retention(aws, monkeypatch):
    monkeypatch.setenv("FAILURE_RETENTION_DAYS", "30")
    before = time.time()
    handler({"Records": [_model_step()]}, None)
    expires_at = int(aws.failures("u-123")["model#00000003"]["expires_at"])
    assert before + 30 * 86400 - 1 <= expires_at <= time.time() + 30 * 86400


# ------------------------------------------------------------- upload accounting
@pytest.fixture
def ledger(aws):
    create_upload_tables()
    settings = LedgerSettings(
        uploads_table_name=UPLOADS_TABLE, upload_rows_table_name=UPLOAD_ROWS_TABLE,
        event_bus_name=BUS,
    )  # fmt: skip
    ledger = UploadLedger(
        settings, dynamodb=aws.session.client("dynamodb"), events=aws.session.client("events")
    )
    ledger.begin("u-123", bucket="b", key="k.csv")
    ledger.split_finished("u-123", rows=2, valid=2, invalid=0)
    return ledger


def test_row_failures_are_counted_once_on_their_upload(aws, ledger):
    # WHEN the same row's failure is delivered twice, beside a duplicate and a summary
    duplicate = _on_failure("m-dup")
    body = json.loads(duplicate["body"])
    body["responsePayload"]["errorType"] = "IdempotencyAlreadyInProgressError"
    duplicate["body"] = json.dumps(body)
    summary = _record("m-sum", _summary_event(), RULE_ARN="r", ERROR_CODE="X")
    records = [_model_step("a"), _model_step("b"), duplicate, summary]
    assert record_batch(records, aws.failures_table, ledger=ledger) == {"batchItemFailures": []}
    # THEN only the row's own failure counts, once
    item = upload_item("u-123")
    assert item["failed"] == {"ModelRejectedInput": 1} and item["failed_total"] == 1
    assert completed_events(aws.drain_published()) == []


@pytest.mark.parametrize(
    "letter_ids",
    [
        (LETTER_A, LETTER_A),  # the model step sent its dead letter twice (a kill in between)
        (LETTER_A, LETTER_B),  # two dead-lettered records for one row
    ],
)
def test_a_row_failure_counts_once_however_many_dead_letters_arrive(aws, ledger, letter_ids):
    # WHEN two DLQ messages arrive for row 3, in one batch and then again in another
    first, second = (_dead_letter(f"m-{n}", letter_id) for n, letter_id in enumerate(letter_ids))
    assert record_batch([first, second], aws.failures_table, ledger=ledger) == {
        "batchItemFailures": []
    }
    record_batch([second], aws.failures_table, ledger=ledger)
    # THEN the upload counts the row's failure once, and one item holds the latest id
    item = upload_item("u-123")
    assert item["failed"] == {"ModelRejectedInput": 1} and item["failed_total"] == 1
    [failure] = aws.failures("u-123").values()
    assert failure["dead_letter_id"] == letter_ids[1]


def test_a_dead_letter_the_model_step_cut_to_fit_the_queue_is_recorded_and_counted(aws, ledger):
    # GIVEN the model step's own body for a row too big for the queue (issue 31): its largest
    # detail field left out, its key kept, and the marker saying so
    from model_step.dead_letter import marked_body

    event = _row_event(row_number=4, notes="n" * 300_000)
    body = marked_body(event, LETTER_A, {"error_code": "RateLimitExhausted"},
                       {"upload_id", "row_number"}, room=200_000)  # fmt: skip
    assert len(body) < 200_000
    record = _record("m-cut", body, ERROR_CODE="RateLimitExhausted", DEAD_LETTER_ID=LETTER_A)

    # WHEN the recorder files it
    assert record_batch([record], aws.failures_table, ledger=ledger) == {"batchItemFailures": []}

    # THEN the row's failure is recorded with the note, counted, and not offered for a retry
    item = aws.failures("u-123")["model#00000004"]
    assert item["payload_omitted"]["fields"] == ["detail.notes"]
    assert item["payload_omitted"]["bytes"] > 300_000
    assert (item["error_code"], item["retryable"]) == ("RateLimitExhausted", False)
    assert json.loads(item["original_event"])["detail"] == {"upload_id": "u-123", "row_number": 4}
    assert upload_item("u-123")["failed"] == {"RateLimitExhausted": 1}


def test_the_last_failed_row_completes_the_upload(aws, ledger):
    ledger.row_classified("u-123", 7, "hot")
    record_batch([_on_failure()], aws.failures_table, ledger=ledger)  # no step report follows
    [event] = completed_events(aws.drain_published())
    assert event["detail"]["failed"] == {"ModelTimeoutError": 1}


def test_a_step_dead_letter_counts_its_row_and_the_step_s_report_closes_the_upload(aws, ledger):
    # GIVEN an upload whose last row the model step dead-lettered after 3 billed requests
    ledger.row_classified("u-123", 7, "hot")
    # WHEN the recorder files the step's dead letter before the step reports the row
    record_batch([_model_step()], aws.failures_table, ledger=ledger)
    # THEN the row is counted, but the upload waits for the step's report (issue 36)
    assert upload_item("u-123")["failed_total"] == 1
    assert completed_events(aws.drain_published()) == []
    # WHEN the step reports it, with its key's billed totals
    outcome = {
        "status": "dead_lettered", "error_code": "ModelRejectedInput", "model_requests": 1,
        "key_model_requests": 3, "key_record_id": "k-3", "key_usage": {},
        "result": {"status": "dead_lettered", "error_code": "ModelRejectedInput"},
    }  # fmt: skip
    ledger.row_failed("u-123", 3, "ModelRejectedInput", outcome)
    # THEN the summary closes with those requests in it
    [event] = completed_events(aws.drain_published())
    assert event["detail"]["failed"] == {"ModelRejectedInput": 1}
    assert event["detail"]["model_requests"] == 3


def test_a_ledger_failure_leaves_the_message_on_the_queue(aws, ledger):
    def refuse(**_):
        raise ClientError({"Error": {"Code": "InternalServerError", "Message": "x"}}, "Tx")

    ledger._dynamodb.meta.events.register("before-call.dynamodb.TransactWriteItems", refuse)
    response = record_batch([_model_step("m-1")], aws.failures_table, ledger=ledger)
    assert response == {"batchItemFailures": [{"itemIdentifier": "m-1"}]}


def test_the_handler_accounts_through_the_environment(aws, ledger, monkeypatch):
    monkeypatch.setenv("UPLOADS_TABLE_NAME", UPLOADS_TABLE)
    monkeypatch.setenv("UPLOAD_ROWS_TABLE_NAME", UPLOAD_ROWS_TABLE)
    handler_module._ledger.cache_clear()
    try:
        handler({"Records": [_model_step()]}, None)
    finally:
        handler_module._ledger.cache_clear()
    assert upload_item("u-123")["failed_total"] == 1


def _transient(message_id, generation=None, letter_id="a" * 64, attempt="3 of 3"):
    event = _row_event(row_number=9, **({"replay_generation": generation} if generation else {}))
    event["dead_letter"] = {"id": letter_id, "error_code": "ModelDeadlineExceeded"}
    return _record(
        message_id,
        event,
        ERROR_CODE="ModelDeadlineExceeded",
        ERROR_MESSAGE=f"transient failure on attempt {attempt}: ModelDeadlineExceeded",
        DEAD_LETTER_ID=letter_id,
    )


def test_each_failed_attempt_of_a_row_is_kept_once_in_its_history(aws):
    # GIVEN a row that failed, was retried by the operator (generation 1) and failed again
    handler({"Records": [_transient("m-1")]}, None)
    handler({"Records": [_transient("m-1-again")]}, None)  # the same dead letter re-sent
    handler(
        {"Records": [_transient("m-2", generation=1, letter_id="b" * 64, attempt="1 of 1")]}, None
    )

    item = aws.failures("u-123")["model#00000009"]
    # THEN the item shows the latest failure, and its history lists both attempts once
    assert item["error_code"] == "ModelDeadlineExceeded"
    history = [
        (int(e["generation"]), e["error_code"], int(e["attempt"]), int(e["of"]))
        for e in item["attempts"]
    ]
    assert history == [(0, "ModelDeadlineExceeded", 3, 3), (1, "ModelDeadlineExceeded", 1, 1)]
    assert all(e["recorded_at"] for e in item["attempts"])
    # and the history expires with the item (it is stored on it)
    assert int(item["expires_at"]) > time.time()


def test_a_failure_that_is_not_a_row_keeps_no_history(aws):
    handler({"Records": [_record("m-nodetail", {"source": "x"}, ERROR_CODE="Boom")]}, None)

    assert "attempts" not in aws.failures("unattributed")["message#m-nodetail"]


def test_an_upload_waits_for_every_step_report_even_when_another_row_closes_it(aws, ledger):
    # GIVEN the recorder counted row 3 from the step's dead letter (its report not in yet)
    record_batch([_model_step()], aws.failures_table, ledger=ledger)
    # WHEN the upload's other row is labelled: every valid row is accounted for
    ledger.row_classified("u-123", 7, "hot")
    # THEN it stays open: the failed row's billed requests are not counted yet
    assert upload_item("u-123")["status"] == "classifying"
    assert completed_events(aws.drain_published()) == []
    # WHEN the step reports row 3 with its key's 3 requests, and again (a duplicate)
    outcome = {
        "status": "dead_lettered", "error_code": "ModelRejectedInput", "model_requests": 1,
        "key_model_requests": 3, "key_record_id": "k-3", "key_usage": {},
        "result": {"status": "dead_lettered", "error_code": "ModelRejectedInput"},
    }  # fmt: skip
    ledger.row_failed("u-123", 3, "ModelRejectedInput", outcome)
    ledger.row_failed("u-123", 3, "ModelRejectedInput", outcome)
    # THEN it closes once, with them
    [event] = completed_events(aws.drain_published())
    assert event["detail"]["model_requests"] == 3
    assert int(upload_item("u-123")["awaiting_reports"]) == 0


def test_a_step_report_that_never_comes_is_closed_by_the_sweeper_at_the_deadline(aws, ledger):
    record_batch([_model_step()], aws.failures_table, ledger=ledger)
    ledger.row_classified("u-123", 7, "hot")
    assert completed_events(aws.drain_published()) == []
    aws.session.client("dynamodb").update_item(
        TableName=UPLOADS_TABLE,
        Key={"upload_id": {"S": "u-123"}},
        UpdateExpression="SET sweep_after = :due",
        ExpressionAttributeValues={":due": {"N": "0"}},
    )

    assert ledger.sweep() == {"u-123": "completed"}
    [event] = completed_events(aws.drain_published())
    assert event["detail"]["status"] == "completed"
