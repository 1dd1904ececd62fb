"""Result events: each key's terminal result on the result bus exactly once (moto, real SDK).

A classic bus in moto routes the events to a queue through a rule, as a downstream step's
rule would; a v2 bus (moto has none) is answered by a botocore hook that records each call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError
from model_step.result_events import COMPLETED, DEAD_LETTERED, MAX_DEDUPLICATION_ID

from tests.fixture_clients import fixture_client

from .conftest import (
    FakeLambdaContext,
    boto3_session,
    make_event,
    prospect_detail,
)

SOURCE = "Stack/Classify"


class ResultBus:
    """A classic bus whose rule sends every result event of ``SOURCE`` to a queue."""

    def __init__(self) -> None:
        # The fixtures' clients (conftest): a hook a test registers on the step's session
        # reaches the step's calls, never the bus's own set-up and reads.
        events = fixture_client("events")
        sqs = fixture_client("sqs")
        self.arn = events.create_event_bus(Name="results")["EventBusArn"]
        self.url = sqs.create_queue(QueueName="results")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=["QueueArn"])
        events.put_rule(
            Name="all", EventBusName="results", EventPattern=json.dumps({"source": [SOURCE]})
        )
        events.put_targets(
            Rule="all",
            EventBusName="results",
            Targets=[{"Id": "q", "Arn": queue_arn["Attributes"]["QueueArn"]}],
        )
        self._sqs = sqs

    def received(self) -> list[dict]:
        events = []
        while True:
            answer = self._sqs.receive_message(QueueUrl=self.url, MaxNumberOfMessages=10)
            messages = answer.get("Messages", [])
            if not messages:
                return events
            for message in messages:
                events.append(json.loads(message["Body"]))
                self._sqs.delete_message(QueueUrl=self.url, ReceiptHandle=message["ReceiptHandle"])


@pytest.fixture
def result_bus(model_env, monkeypatch) -> ResultBus:
    bus = ResultBus()
    monkeypatch.setenv("RESULT_BUS_ARN", bus.arn)
    monkeypatch.setenv("RESULT_EVENT_SOURCE", SOURCE)
    monkeypatch.setenv("ALLOWED_LABELS", "hot,warm,cold")
    return bus


def test_a_completed_key_is_published_once_across_duplicates(make_step, fake_api, result_bus):
    # GIVEN a step with a result bus  WHEN one row is delivered three times
    step = make_step()
    for _ in range(3):
        step.handle(make_event(), FakeLambdaContext())

    # THEN one model request and one "Model Step Completed" event, from the step's path
    [event] = result_bus.received()
    assert fake_api.request_count == 1
    assert (event["source"], event["detail-type"]) == (SOURCE, COMPLETED)
    detail = event["detail"]
    # The key's record id, not its parts (issue 34): ids, not data, unless asked.
    assert detail["key"] == completed_record_id()
    assert "key_parts" not in detail
    result = detail["result"]
    assert result["status"] == "completed" and result["label"] == "warm"
    # The default model thinks first: its thinking tokens are billed as output (issue 32).
    assert result["usage"] == fake_api.last_usage
    assert result["usage"]["output_tokens"] > 3
    assert result["request_id"]
    assert "answer" not in result and "replay_generation" not in detail


def completed_record_id() -> str:
    """The id of the one key's own completed record (not a hand-off's)."""
    [record_id] = [
        item["id"]["S"]
        for item in model_env_items()
        if item.get("status", {}).get("S") == "COMPLETED"
        and "#result-event" not in item["id"]["S"]
        and "#dead-letter" not in item["id"]["S"]
    ]
    return str(record_id)


EMAIL = "jane.doe@acme.example"
FREE_TEXT = "Janine runs procurement at Acme Anvils"


def _email_step(make_step, monkeypatch, fields: str | None):
    """A step keyed on ``email`` whose parser returns free text; ``fields``: RESULT_FIELDS."""
    monkeypatch.setenv("IDEMPOTENCY_KEY", "email")
    if fields is not None:
        monkeypatch.setenv("RESULT_FIELDS", fields)
    return make_step(parse_answer=lambda _answer: {"summary": FREE_TEXT})


@pytest.mark.parametrize("fields", [None, "label", "none"])
def test_by_default_an_event_carries_ids_not_the_key_parts_or_the_parsed_text(
    make_step, fake_api, result_bus, monkeypatch, fields
):
    # GIVEN a step keyed on an email, with a parser that returns free text
    step = _email_step(make_step, monkeypatch, fields)
    # WHEN a row is answered
    step.handle(make_event(prospect_detail(email=EMAIL)), FakeLambdaContext())
    # THEN its event names the key by record id; neither the email nor the text is in it
    [event] = result_bus.received()
    text = json.dumps(event)
    assert EMAIL not in text and FREE_TEXT not in text
    assert event["detail"]["key"] == completed_record_id()
    result = event["detail"]["result"]
    assert "parsed" not in result and "key_parts" not in event["detail"]
    assert ("label" in result) is (fields != "none")


def test_asked_for_an_event_carries_the_key_parts_and_the_parsed_value(
    make_step, fake_api, result_bus, monkeypatch
):
    step = _email_step(make_step, monkeypatch, "label,key,parsed")
    step.handle(make_event(prospect_detail(email=EMAIL)), FakeLambdaContext())
    [event] = result_bus.received()
    detail = event["detail"]
    assert detail["key"] == completed_record_id()
    assert detail["key_parts"] == [EMAIL]
    assert detail["result"]["parsed"] == {"summary": FREE_TEXT}
    assert detail["result"]["label"] == "warm"


def test_a_dead_letter_event_carries_key_parts_only_when_asked(
    make_step, fake_api, result_bus, monkeypatch
):
    fake_api.script = [400]
    step = _email_step(make_step, monkeypatch, "key")
    step.handle(make_event(prospect_detail(email=EMAIL)), FakeLambdaContext())
    [event] = result_bus.received()
    assert event["detail-type"] == DEAD_LETTERED
    assert event["detail"]["key_parts"] == [EMAIL]
    assert "label" not in event["detail"]["result"]


def test_a_dead_lettered_key_is_published_once_without_its_error_text(
    make_step, fake_api, result_bus
):
    fake_api.script = [400]
    step = make_step()
    step.handle(make_event(), FakeLambdaContext())
    step.handle(make_event(), FakeLambdaContext())

    [event] = result_bus.received()
    assert event["detail-type"] == DEAD_LETTERED
    result = event["detail"]["result"]
    assert result["status"] == "dead_lettered" and result["error_code"] == "BadRequestError"
    assert result["dead_letter_id"] and "error_message" not in result


def test_an_operator_retry_publishes_once_more_for_its_generation(make_step, fake_api, result_bus):
    fake_api.script = [400, 200]
    step = make_step()
    step.handle(make_event(), FakeLambdaContext())
    for _ in range(2):
        step.handle(make_event(prospect_detail(replay_generation=1)), FakeLambdaContext())

    first, retried = result_bus.received()
    assert first["detail-type"] == DEAD_LETTERED
    assert retried["detail-type"] == COMPLETED and retried["detail"]["replay_generation"] == 1
    assert fake_api.request_count == 2


def test_a_failed_publish_is_retried_and_never_bills_again(
    make_step, fake_api, result_bus, monkeypatch
):
    # GIVEN a bus that refuses the first two PutEvents calls
    refusals = [2]

    def refuse(**_kwargs):
        if refusals[0]:
            refusals[0] -= 1
            raise ClientError({"Error": {"Code": "AccessDeniedException"}}, "PutEvents")
        return None

    boto3_session().events.register("before-call.events.PutEvents", refuse)
    try:
        step = make_step()
        # WHEN the first delivery answers the row but cannot publish, it fails (and is retried)
        with pytest.raises(Exception, match="could not publish"):
            step.handle(make_event(), FakeLambdaContext())
        with pytest.raises(Exception, match="could not publish"):
            step.handle(make_event(), FakeLambdaContext())
        assert result_bus.received() == []
        # THEN the retry that can publish does, once, from the stored answer
        step.handle(make_event(), FakeLambdaContext())
        step.handle(make_event(), FakeLambdaContext())
    finally:
        boto3_session().events.unregister("before-call.events.PutEvents", refuse)
    [event] = result_bus.received()
    assert event["detail"]["result"]["label"] == "warm"
    assert fake_api.request_count == 1


class V2Calls:
    """Answers ``eventbridgev2`` PutEvents (moto has no v2) and records each call's params."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def record(self, params, **_kwargs):
        self.calls.append(dict(params))

    def answer(self, **_kwargs):
        parsed = {
            "Entries": [{"EventId": f"e-{len(self.calls)}"}],
            "ResponseMetadata": {"HTTPStatusCode": 200},
        }
        return AWSResponse("https://events.local", 200, {}, None), parsed


@pytest.fixture
def v2_bus(model_env, monkeypatch) -> Iterator[V2Calls]:
    calls = V2Calls()
    monkeypatch.setenv("RESULT_BUS_ARN", "arn:aws:events:us-east-1:123456789012:event-busv2/r/1")
    monkeypatch.setenv("RESULT_BUS_KIND", "v2")
    monkeypatch.setenv("RESULT_EVENT_SOURCE", SOURCE)
    hooks = boto3_session().events
    hooks.register("provide-client-params.eventbridgev2.PutEvents", calls.record)
    hooks.register("before-call.eventbridgev2.PutEvents", calls.answer)
    yield calls
    hooks.unregister("provide-client-params.eventbridgev2.PutEvents", calls.record)
    hooks.unregister("before-call.eventbridgev2.PutEvents", calls.answer)


def test_on_a_v2_bus_the_deduplication_id_is_the_record_id(make_step, fake_api, v2_bus):
    step = make_step()
    step.handle(make_event(), FakeLambdaContext())
    step.handle(make_event(), FakeLambdaContext())

    [call] = v2_bus.calls
    assert call["EventBusArn"].endswith("event-busv2/r/1")
    [entry] = call["Entries"]
    # the key's own record: the one completed record that is not the publish hand-off's
    [record_id] = [
        item["id"]["S"]
        for item in model_env_items()
        if item.get("status", {}).get("S") == "COMPLETED" and "#result-event" not in item["id"]["S"]
    ]
    assert len(record_id) <= MAX_DEDUPLICATION_ID
    assert entry["SystemMetadata"] == {"DeduplicationId": record_id}
    assert "EventBusName" not in entry and entry["DetailType"] == COMPLETED


def model_env_items() -> list[dict]:
    from .conftest import TABLE

    return fixture_client("dynamodb").scan(TableName=TABLE)["Items"]


def test_on_the_buffer_queue_a_failed_publish_is_a_batch_item_failure_then_published_once(
    make_step, fake_api, result_bus, buffer
):
    # GIVEN a bus that refuses the first PutEvents call, and a row on the buffer queue
    refused = []

    def refuse_once(**_kwargs):
        if not refused:
            refused.append(True)
            raise ClientError({"Error": {"Code": "InternalException"}}, "PutEvents")
        return None

    hooks = boto3_session().events
    hooks.register("before-call.events.PutEvents", refuse_once)
    try:
        step = make_step()
        event = make_event()
        # WHEN the first receive answers the row but cannot publish
        first = step.handle(buffer.batch(event), FakeLambdaContext())
        # THEN the record is reported failed (SQS retries it), and the retry publishes once
        assert [f["itemIdentifier"] for f in first["batchItemFailures"]]
        again = step.handle(buffer.batch(event), FakeLambdaContext())
        assert again == {"batchItemFailures": []}
    finally:
        hooks.unregister("before-call.events.PutEvents", refuse_once)
    [published] = result_bus.received()
    assert published["detail-type"] == COMPLETED
    assert fake_api.request_count == 1
