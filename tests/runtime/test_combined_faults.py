"""Issue 15, one test per item: faults combined the way production combines them.

Each test drives the real handler (Powertools, the SDK over HTTP to the fake Messages API,
moto) and fails against the runtime before the fix: the attempt budget counted on SQS
messages, the unconditional release, the per-read timeout, the producer's ``time``, and so
on. Kills are ``LambdaKilled``, a ``BaseException`` raised at a chosen point, so no
``except Exception`` and no Powertools cleanup runs after it, as after a real kill.
"""

from __future__ import annotations

import datetime as dt
import json
import unicodedata
from collections.abc import Iterator

import httpx2
import pytest
from botocore.exceptions import ClientError
from model_step import InvalidAnswerError

from tests.fakes import Reply

from .conftest import (
    FakeLambdaContext,
    ShiftedClock,
    boto3_session,
    fresh_event,
    make_event,
    prospect_detail,
)


class LambdaKilled(BaseException):
    """A Lambda kill: nothing after it runs."""


@pytest.fixture
def kill_after_request(monkeypatch) -> Iterator[dict]:
    """``state["left"] = N``: the Nth next model request reaches the fake API, is answered,
    and the invocation dies before the runtime sees the answer."""
    state = {"left": 0}
    real = httpx2.HTTPTransport.handle_request

    def handle_request(transport, request):
        response = real(transport, request)
        if state["left"] > 0:
            state["left"] -= 1
            if state["left"] == 0:
                raise LambdaKilled("killed after the request was sent")
        return response

    monkeypatch.setattr(httpx2.HTTPTransport, "handle_request", handle_request)
    yield state


@pytest.fixture
def aws_call_fault():
    """Inject a fault at one AWS call of the step's session: ``arm(operation, when, what,
    match)`` makes the next call of ``operation`` whose request body contains ``match``
    fail (``what="fail"``: a ClientError; ``"kill"``: LambdaKilled), ``when`` "before" it is
    made or "after" DynamoDB/SQS applied it."""
    armed: list[dict] = []
    events = boto3_session().events

    def arm(operation: str, when: str, what: str, match: str = "") -> None:
        armed.append({"operation": operation, "when": when, "what": what, "match": match})

    def fire(operation: str, when: str, body: bytes) -> None:
        for fault in list(armed):
            if fault["operation"] == operation and fault["when"] == when:
                if fault["match"].encode() in body:
                    armed.remove(fault)
                    if fault["what"] == "kill":
                        raise LambdaKilled(f"killed {when} {operation}")
                    raise ClientError(
                        {"Error": {"Code": "ThrottlingException", "Message": "injected"}},
                        operation,
                    )

    last: dict = {"body": b""}

    def remember(event_name, params, **_):
        last["body"] = json.dumps(params, default=str).encode()

    def after(event_name, **_):
        fire(event_name.rsplit(".", 1)[-1], "after", last["body"])

    def before(event_name, **_):
        fire(event_name.rsplit(".", 1)[-1], "before", last["body"])

    events.register("provide-client-params.dynamodb", remember)
    events.register("provide-client-params.sqs", remember)
    events.register("before-call.dynamodb", before)
    events.register("before-call.sqs", before)
    events.register("after-call.dynamodb", after)
    events.register("after-call.sqs", after)
    yield arm
    events.unregister("provide-client-params.dynamodb", remember)
    events.unregister("provide-client-params.sqs", remember)
    events.unregister("before-call.dynamodb", before)
    events.unregister("before-call.sqs", before)
    events.unregister("after-call.dynamodb", after)
    events.unregister("after-call.sqs", after)


def run(step, batch) -> dict | str:
    """Invoke like Lambda's poller: a kill is an invocation that returns nothing."""
    try:
        return step.handle(batch, FakeLambdaContext())
    except LambdaKilled:
        return "killed"


def emf(capsys) -> list[dict]:
    return [json.loads(x) for x in capsys.readouterr().out.splitlines() if '"_aws"' in x]


def metric_total(lines: list[dict], name: str) -> float:
    return sum(sum(line.get(name, [])) if isinstance(line.get(name), list) else 0 for line in lines)


# -- 1. A row the buffer queue gave up on is recorded, coded and counted ------------------------
def test_1_a_redriven_row_with_budget_left_goes_back_without_a_request(
    make_step, fake_api, model_env, buffer, redrive, outcomes, capsys
):
    step = make_step(on_outcome=outcomes)
    event = fresh_event()

    response = step.handle(redrive.batch(event, receive_count=1), FakeLambdaContext())

    assert response == {"batchItemFailures": []}
    assert fake_api.request_count == 0
    [copy] = buffer.requeued()  # a fresh message: a fresh receive count
    body = json.loads(copy["MessageBody"])
    assert body.pop("model_step_key")["first_seen"] > 0  # the key's first-seen time rides on
    assert body == event
    assert model_env.dead_letters() == []
    assert metric_total(emf(capsys), "RowsRequeued") == 1
    assert step.handle(buffer.batch(event), FakeLambdaContext()) == {"batchItemFailures": []}
    assert fake_api.request_count == 1


def test_1_a_row_redriven_again_and_again_is_stored_and_dead_lettered_with_a_code(
    make_step, fake_api, model_env, buffer, redrive, outcomes, capsys
):
    step = make_step(on_outcome=outcomes)
    event = fresh_event()
    for _ in range(3):  # put back twice (REDRIVE_REQUEUES); the third time it stays
        step.handle(redrive.batch(event, receive_count=9), FakeLambdaContext())

    assert len(buffer.requeued()) == 2
    assert fake_api.request_count == 0
    [message] = model_env.dead_letters()
    assert message["body"] == event
    assert message["attributes"]["ERROR_CODE"] == "ReceivesExhausted"
    assert message["marker"]["error_code"] == "ReceivesExhausted"
    assert outcomes.seen[-1][1]["status"] == "dead_lettered"
    assert metric_total(emf(capsys), "NonRetryableFailures") == 1
    # Recorded: a later copy replays it, with no request and no second DLQ message.
    step.handle(buffer.batch(event), FakeLambdaContext())
    assert fake_api.request_count == 0
    assert model_env.dead_letters() == []
    assert outcomes.seen[-1][1]["result"]["error_code"] == "ReceivesExhausted"


# -- 2. An operator's DLQ redrive is an operator retry ------------------------------------------
@pytest.mark.parametrize("keep_attributes", [True, False])
def test_2_a_message_moved_back_from_the_dlq_makes_exactly_one_new_request(
    make_step, fake_api, model_env, buffer, outcomes, keep_attributes
):
    fake_api.script = [401, 200]  # e.g. a revoked key, fixed before the redrive
    step = make_step(on_outcome=outcomes)
    event = fresh_event()
    step.handle(buffer.batch(event), FakeLambdaContext())
    [dead] = model_env.sqs.receive_message(
        QueueUrl=model_env.queue_url, MessageAttributeNames=["All"]
    )["Messages"]

    # "Start DLQ redrive": a new message with the same body, attributes kept or not.
    moved = json.loads(dead["Body"])
    for _ in range(2):  # however many times SQS delivers it
        model_env.sqs.send_message(
            QueueUrl=buffer.url,
            MessageBody=dead["Body"],
            **({"MessageAttributes": dead["MessageAttributes"]} if keep_attributes else {}),
        )
        [message] = model_env.sqs.receive_message(
            QueueUrl=buffer.url, AttributeNames=["All"], MaxNumberOfMessages=1
        )["Messages"]
        record = {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"],
            "attributes": message["Attributes"],
            "eventSource": "aws:sqs",
            "eventSourceARN": buffer.arn,
        }
        step.handle({"Records": [record]}, FakeLambdaContext())

    assert fake_api.request_count == 2  # the 401, then exactly one for the redrive
    assert outcomes.seen[-2][1]["status"] == "completed"
    assert outcomes.seen[-1][1]["replayed"] is True
    assert moved["dead_letter"]["error_code"] == "AuthenticationError"
    # The original event replays its dead letter; only the operator's message got a new answer.
    step.handle(buffer.batch(event), FakeLambdaContext())
    assert outcomes.seen[-1][1]["result"]["status"] == "dead_lettered"
    assert fake_api.request_count == 2


# -- 3. The budget belongs to the key, whatever the number of copies ----------------------------
def test_3_two_copies_interleaved_with_failures_cost_at_most_max_attempts(
    make_step, fake_api, model_env, buffer, outcomes
):
    fake_api.script = [500, "disconnect", 500, "disconnect", 500]
    step = make_step(on_outcome=outcomes)
    event = fresh_event()
    copies = [buffer.batch(event), buffer.batch(event)]

    for _ in range(3):
        for copy in copies:
            step.handle(copy, FakeLambdaContext())

    assert fake_api.request_count == 3  # MAX_ATTEMPTS for the key, not per copy
    [message] = model_env.dead_letters()
    assert message["attributes"]["ERROR_CODE"] == "InternalServerError"


# -- 4. A kill on the last attempt buys no fourth request --------------------------------------
def test_4_a_kill_after_the_last_request_is_a_spent_attempt(
    make_step, fake_api, model_env, buffer, outcomes, kill_after_request
):
    fake_api.script = [500, 500, 200]
    step = make_step(on_outcome=outcomes)
    event = fresh_event()
    batch = buffer.batch(event)
    step.handle(batch, FakeLambdaContext())
    step.handle(batch, FakeLambdaContext())
    kill_after_request["left"] = 1
    assert run(step, batch) == "killed"  # attempt 3 was answered, and the invocation died
    # The killed holder's lock expires at its deadline; the redelivery comes after it.
    model_env.dynamodb.update_item(
        TableName="idempotency",
        Key={"id": {"S": model_env.idempotency_items()[0]["id"]["S"]}},
        UpdateExpression="SET in_progress_expiration = :past",
        ExpressionAttributeValues={":past": {"N": "1"}},
    )

    response = step.handle(batch, FakeLambdaContext())

    assert response == {"batchItemFailures": []}
    assert fake_api.request_count == 3
    [message] = model_env.dead_letters()
    assert message["attributes"]["ERROR_CODE"] == "AttemptInterrupted"


# -- 5. The model call has a total deadline ------------------------------------------------------
def test_5_a_slow_chunked_answer_ends_at_the_total_deadline(
    make_step, fake_api, model_env, monkeypatch, outcomes
):
    # Ten pieces 0.5 s apart: no single read waits 1 s, the whole answer takes 4.5 s.
    fake_api.script = [200, Reply(chunks=10, chunk_delay=0.5)]
    # Warm (SDK loaded) by a step with the conftest's 5 s, so load cannot time the warm-up out.
    make_step().handle(make_event(prospect_detail(row_number=9)), FakeLambdaContext())
    monkeypatch.setenv("MODEL_TIMEOUT_SECONDS", "1")
    step = make_step(on_outcome=outcomes)

    with pytest.raises(Exception, match="timed out"):
        step.handle(make_event(), FakeLambdaContext())

    # Cut by the total deadline, whatever the machine's load: no read ever waited the 1 s
    # per-read timeout, so only the total deadline could stop the answer (its own code).
    assert outcomes.seen[-1][1]["error_code"] == "ModelDeadlineExceeded"
    budget = [b for b in model_env.budgets().values() if "last_error" in b][0]
    assert budget["attempts"]["N"] == "1"  # it was billed: the attempt stays spent


def test_5_a_deadline_passed_before_the_request_left_bills_nothing(
    make_step, fake_api, model_env, monkeypatch, outcomes
):
    """A loaded machine can spend the whole deadline before the first byte: the request never
    leaves, so it is counted as a spent attempt the provider did not bill, not a request."""
    import model_step.model_call

    monkeypatch.setattr(model_step.model_call, "model_timeout", lambda *_args: 0.0)
    step = make_step(on_outcome=outcomes)
    with pytest.raises(Exception, match="timed out"):
        step.handle(make_event(), FakeLambdaContext())

    assert fake_api.request_count == 0
    outcome = outcomes.seen[-1][1]
    assert (outcome["error_code"], outcome["model_requests"]) == ("ModelDeadlineExceeded", 0)
    budget = [b for b in model_env.budgets().values() if "last_error" in b][0]
    assert (budget["attempts"]["N"], budget["unbilled"]["N"]) == ("1", "1")


def test_5_the_deadline_ends_before_the_lambda_deadline_minus_the_margin(
    make_step, fake_api, monkeypatch
):
    monkeypatch.setenv("MODEL_TIMEOUT_SECONDS", "60")
    # Six pieces 0.5 s apart: the answer takes at least 2.5 s on any machine (a load only
    # stretches it), longer than the 1.5 s deadline and shorter than the 4.5 s Lambda
    # deadline. A deadline without the 3 s margin would let it finish: no wall clock needed.
    fake_api.script = [200, Reply(chunks=6, chunk_delay=0.5)]
    step = make_step()
    step.handle(make_event(prospect_detail(row_number=9)), FakeLambdaContext())  # warm: SDK loaded

    with pytest.raises(Exception, match="timed out"):
        step.handle(make_event(), FakeLambdaContext(remaining_millis=4_500))  # 4.5 - 3 s


# -- 6. A parsed value the store cannot serialise is a stored InvalidAnswer --------------------
@pytest.mark.parametrize(
    "parsed",
    [dt.date(2026, 1, 1), {"warm", "hot"}, {1: "a", "b": 2}],
    ids=["date", "set", "mixed-keys"],
)
def test_6_an_unstorable_parsed_value_is_one_request_and_a_stored_dead_letter(
    make_step, fake_api, model_env, parsed
):
    step = make_step(parse_answer=lambda text: parsed)

    results = [step.handle(make_event(), FakeLambdaContext()) for _ in range(3)]

    assert fake_api.request_count == 1
    assert results[0]["status"] == "dead_lettered"
    assert results[0]["error_code"] == InvalidAnswerError.error_code
    assert all(result == results[0] for result in results)
    assert len(model_env.dead_letters()) == 1


# -- 7. Throttled receives use no attempt -----------------------------------------------------
def test_7_a_row_throttled_on_earlier_receives_keeps_its_whole_budget(
    make_step, fake_api, model_env, buffer, outcomes
):
    fake_api.script = [500, 500, 200]
    step = make_step(on_outcome=outcomes)
    event = fresh_event()
    # Four receives throttled by Lambda (the function never ran), then three that run.
    batches = [buffer.batch(event, receive_count=count) for count in (5, 6, 7)]

    responses = [step.handle(batch, FakeLambdaContext()) for batch in batches]

    assert [bool(r["batchItemFailures"]) for r in responses] == [True, True, False]
    assert fake_api.request_count == 3
    assert outcomes.seen[-1][1]["status"] == "completed"
    assert model_env.dead_letters() == []


# -- 8. A failing on_outcome after a rate limit forks nothing -----------------------------------
def test_8_the_hook_runs_before_the_copy_so_a_failure_leaves_one_message(
    make_step, fake_api, model_env, buffer
):
    calls = []

    def flaky(event, outcome):
        calls.append(outcome["status"])
        if len(calls) == 1:
            raise RuntimeError("ledger throttled")

    fake_api.script = [Reply(status=429, headers={"retry-after": "5"}), 200]
    step = make_step(on_outcome=flaky)
    batch = buffer.batch(fresh_event())

    first = step.handle(batch, FakeLambdaContext())
    assert first["batchItemFailures"]  # the original comes back...
    assert buffer.requeued() == []  # ...and no copy exists beside it
    second = step.handle(batch, FakeLambdaContext())
    assert second == {"batchItemFailures": []}
    assert calls == ["rate_limited", "completed"]
    assert fake_api.request_count == 2


# -- 9. DLQ attributes are always sendable -------------------------------------------------------
def test_9_a_parser_error_quoting_control_characters_is_not_sent(make_step, fake_api, model_env):
    refused = []

    def sqs_rules(params, **_):
        # SQS refuses characters outside XML's set in attribute values; moto does not check.
        for value in (params.get("MessageAttributes") or {}).values():
            text = value.get("StringValue", "")
            if any(ord(c) < 0x20 and c not in "\t\n\r" for c in text):
                refused.append(text)
                raise ClientError(
                    {"Error": {"Code": "InvalidParameterValue", "Message": "invalid"}},
                    "SendMessage",
                )

    def parse(text):
        raise ValueError("unexpected \x1b[31mred\x1b[0m in the answer\x00")

    events = boto3_session().events
    events.register("before-parameter-build.sqs.SendMessage", sqs_rules)
    try:
        result = make_step(parse_answer=parse).handle(make_event(), FakeLambdaContext())
    finally:
        events.unregister("before-parameter-build.sqs.SendMessage", sqs_rules)

    assert refused == []
    assert result["error_code"] == "InvalidAnswer"
    [message] = model_env.dead_letters()
    # The parser's text is not sent at all (it may quote the answer): its type and the
    # answer's length are.
    assert message["attributes"]["ERROR_MESSAGE"] == (
        "parse_answer raised ValueError on an answer of 4 characters"
    )


# -- 10. The rate-limit window starts when the step first saw the row --------------------------
def test_10_an_old_producer_time_does_not_start_the_window(
    make_step, fake_api, model_env, buffer, outcomes
):
    # An archive replay, or a producer that set Time two days ago: the step sees it now.
    fake_api.script = [Reply(status=429, headers={"retry-after": "30"})]
    step = make_step(on_outcome=outcomes)
    two_days_ago = (dt.datetime.now(dt.UTC) - dt.timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    event = make_event(prospect_detail(), time=two_days_ago)

    response = step.handle(buffer.batch(event), FakeLambdaContext())

    assert response == {"batchItemFailures": []}
    assert [o["status"] for _, o in outcomes.seen] == ["rate_limited"]
    [copy] = buffer.requeued()
    assert copy["DelaySeconds"] == 30
    assert model_env.dead_letters() == []


def test_10_the_window_closes_max_event_age_after_first_sight(
    make_step, fake_api, model_env, buffer, outcomes, monkeypatch
):
    monkeypatch.setenv("MAX_EVENT_AGE_SECONDS", "3600")
    fake_api.script = [Reply(status=429, headers={"retry-after": "30"})] * 2
    step = make_step(on_outcome=outcomes)
    clock = ShiftedClock(monkeypatch)
    event = fresh_event()

    step.handle(buffer.batch(event), FakeLambdaContext())
    clock.shift(3_590)
    step.handle(buffer.batch(event), FakeLambdaContext())

    [message] = model_env.dead_letters()
    assert message["attributes"]["ERROR_CODE"] == "RateLimitExhausted"


# -- 11. Equal keys written differently are one key ----------------------------------------------
@pytest.mark.parametrize(
    ("first", "second"),
    [
        (
            {"row_number": 1, "email": "a@example.com"},
            {"row_number": 1.0, "email": "a@example.com"},
        ),
        (
            {"upload_id": unicodedata.normalize("NFC", "café-7")},
            {"upload_id": unicodedata.normalize("NFD", "café-7")},
        ),
    ],
    ids=["1-vs-1.0", "nfc-vs-nfd"],
)
def test_11_equal_keys_written_differently_make_one_request(make_step, fake_api, first, second):
    step = make_step()

    one = step.handle(make_event(prospect_detail(**first)), FakeLambdaContext())
    two = step.handle(make_event(prospect_detail(**second)), FakeLambdaContext())

    assert fake_api.request_count == 1
    assert one == two


# -- 12. A kill between the DLQ send and its record is counted once -----------------------------
def test_12_a_second_dlq_message_after_a_kill_is_counted_once(
    make_step, fake_api, model_env, aws_call_fault, capsys
):
    fake_api.script = [400]
    step = make_step()
    event = make_event()
    aws_call_fault("SendMessage", "after", "kill")  # the DLQ got it; the invocation died
    with pytest.raises(LambdaKilled):
        step.handle(event, FakeLambdaContext())
    # The hand-off's lock expires at the killed invocation's deadline.
    for item in model_env.idempotency_items():
        if item["status"]["S"] == "INPROGRESS":
            model_env.dynamodb.update_item(
                TableName="idempotency",
                Key={"id": item["id"]},
                UpdateExpression="SET in_progress_expiration = :past",
                ExpressionAttributeValues={":past": {"N": "1"}},
            )

    again = step.handle(event, FakeLambdaContext())
    step.handle(event, FakeLambdaContext())

    assert again["status"] == "dead_lettered"
    assert fake_api.request_count == 1
    first, second = model_env.dead_letters()
    assert first["marker"]["id"] == second["marker"]["id"] == again["dead_letter_id"]
    assert metric_total(emf(capsys), "NonRetryableFailures") == 1


def test_12_a_counting_write_applied_but_answered_with_an_error_is_still_this_callers(
    make_step, fake_api, model_env, aws_call_fault, capsys
):
    fake_api.script = [400]
    step = make_step()
    aws_call_fault("UpdateItem", "after", "fail", '"#counted"')

    step.handle(make_event(), FakeLambdaContext())
    step.handle(make_event(), FakeLambdaContext())

    assert metric_total(emf(capsys), "NonRetryableFailures") == 1
    assert len(model_env.dead_letters()) == 1


# -- 13. A release deletes only the caller's own lock -------------------------------------------
def test_13_a_save_applied_but_answered_with_an_error_keeps_the_completed_record(
    make_step, fake_api, model_env, aws_call_fault
):
    step = make_step()
    event = make_event()
    aws_call_fault("UpdateItem", "after", "fail", ":response_data")

    with pytest.raises(Exception, match="Failed to update record"):
        step.handle(event, FakeLambdaContext())
    [record] = model_env.idempotency_items()
    assert record["status"]["S"] == "COMPLETED"  # the release did not delete it

    result = step.handle(event, FakeLambdaContext())
    assert result["status"] == "completed"
    assert fake_api.request_count == 1  # the retry replays; it does not bill again


def test_13_a_release_after_the_lock_expired_leaves_the_new_holders_lock(
    make_step, fake_api, model_env, aws_call_fault
):
    step = make_step()
    event = make_event()
    holder = {}

    def take_over(params, **_):
        # While the first delivery's save fails, its lock has expired and another delivery
        # took the record (Powertools' PutItem succeeds on an expired lock).
        if ":response_data" in str(params.get("ExpressionAttributeValues")) and not holder:
            [item] = model_env.idempotency_items()
            holder["id"] = item["id"]
            model_env.dynamodb.put_item(
                TableName="idempotency",
                Item={**item, "in_progress_expiration": {"N": str(10**13)}},
            )
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": "slow"}}, "UpdateItem"
            )

    events = boto3_session().events
    events.register("before-parameter-build.dynamodb.UpdateItem", take_over)
    try:
        with pytest.raises(Exception, match="Failed to update record"):
            step.handle(event, FakeLambdaContext())
    finally:
        events.unregister("before-parameter-build.dynamodb.UpdateItem", take_over)

    [record] = model_env.idempotency_items()
    assert record["status"]["S"] == "INPROGRESS"  # the other holder's lock is still there
    assert record["in_progress_expiration"]["N"] == str(10**13)


def test_1_a_redriven_row_whose_dead_letter_send_fails_goes_back_to_the_buffer(
    make_step, fake_api, model_env, buffer, redrive, outcomes, aws_call_fault
):
    # The redrive queue has few receives left; a failure there must not spend them.
    step = make_step(on_outcome=outcomes)
    event = fresh_event()
    for _ in range(2):
        step.handle(redrive.batch(event, receive_count=9), FakeLambdaContext())
    aws_call_fault("SendMessage", "before", "fail", '"ERROR_CODE"')

    response = step.handle(redrive.batch(event, receive_count=9), FakeLambdaContext())

    assert response == {"batchItemFailures": []}  # not left to the redrive queue's count
    assert len(buffer.requeued()) == 3
    assert model_env.dead_letters() == []
    step.handle(buffer.batch(event), FakeLambdaContext())  # the buffer replays and re-sends
    [message] = model_env.dead_letters()
    assert message["attributes"]["ERROR_CODE"] == "ReceivesExhausted"
    assert fake_api.request_count == 0


# -- A record's lifetime ends for its budget too -------------------------------------------------
def test_after_expires_after_a_key_starts_a_new_lifetime_with_a_whole_budget(
    make_step, fake_api, model_env, monkeypatch
):
    from tests.faults.harness import MovableClock

    # The shortest memory the runtime accepts for this max_event_age: 600 s + Lambda async's
    # 6 h + 1 h (model_step.lifetime).
    monkeypatch.setenv("MAX_EVENT_AGE_SECONDS", "600")
    monkeypatch.setenv("IDEMPOTENCY_EXPIRES_AFTER_SECONDS", "25800")
    fake_api.script = [500, 500, 500, 200]
    step = make_step()
    clock = MovableClock()
    with clock.installed():
        for _ in range(3):
            try:
                step.handle(make_event(), FakeLambdaContext())
            except Exception:
                pass
        assert model_env.dead_letters()[0]["attributes"]["ERROR_CODE"] == "InternalServerError"
        clock.advance(25_801)  # DynamoDB deletes expired items lazily: they are still there

        result = step.handle(make_event(), FakeLambdaContext())

    assert result["status"] == "completed"  # a new lifetime: the old spent budget is gone
    assert fake_api.request_count == 4
