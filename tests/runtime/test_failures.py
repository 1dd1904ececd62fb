"""Transient failures raise and are retried; non-retryable ones are dead-lettered, not cached."""

from __future__ import annotations

import json

import anthropic
import pytest

from tests.fakes import Reply

from .conftest import FakeLambdaContext, make_event, prospect_detail


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (429, anthropic.RateLimitError),
        (500, anthropic.InternalServerError),
        (529, anthropic.InternalServerError),  # OverloadedError
        (408, anthropic.APIStatusError),
        (409, anthropic.ConflictError),
        ("timeout", anthropic.APITimeoutError),
        ("disconnect", anthropic.APIConnectionError),
    ],
)
def test_transient_failure_raises_then_retry_calls_the_model_again(
    make_step, fake_api, model_env, monkeypatch, entry, expected
):
    if entry == "timeout":
        # Only the held request needs a short client timeout; an answered status keeps the
        # conftest's 5 s, so a slow machine cannot turn a 500 into a timeout.
        monkeypatch.setenv("MODEL_TIMEOUT_SECONDS", "0.5")
    fake_api.script = [entry]
    step = make_step()
    event = make_event()

    with pytest.raises(expected):
        step.handle(event, FakeLambdaContext())
    assert fake_api.request_count == 1
    # Powertools deleted the in-progress record, so the retry is not blocked.
    assert model_env.idempotency_items() == []

    if entry == "timeout":  # the retry is answered: a new container with the 5 s timeout
        monkeypatch.setenv("MODEL_TIMEOUT_SECONDS", "5")
        step = make_step()
    result = step.handle(event, FakeLambdaContext())
    assert result["status"] == "completed"
    assert fake_api.request_count == 2
    assert model_env.dead_letters() == []


@pytest.mark.parametrize(
    ("status", "error_code"),
    [
        (400, "BadRequestError"),
        (401, "AuthenticationError"),
        (403, "PermissionDeniedError"),
        (404, "NotFoundError"),
        (413, "ContentTooLargeError"),
        (422, "UnprocessableEntityError"),
    ],
)
def test_non_retryable_status_is_dead_lettered_without_raising(
    make_step, fake_api, model_env, status, error_code
):
    fake_api.script = [status]
    event = make_event()

    result = make_step().handle(event, FakeLambdaContext())

    assert fake_api.request_count == 1
    assert result["status"] == "dead_lettered"
    assert result["error_code"] == error_code
    request_id = fake_api.last_request.request_id
    assert result["request_id"] == request_id
    [message] = model_env.dead_letters()
    assert message["body"] == event
    assert message["attributes"]["ERROR_CODE"] == error_code
    assert message["attributes"]["REQUEST_ID"] == request_id
    assert str(status) in message["attributes"]["ERROR_MESSAGE"]


def test_dead_letter_outcome_is_stored_and_an_operator_retry_reaches_the_model(
    make_step, fake_api, model_env
):
    # E.g. a revoked API key (401): a duplicate replays the stored outcome; the operator's
    # retry (after the key is fixed) carries a replay generation and makes one new request.
    fake_api.script = [401, 200]
    step = make_step()
    event = make_event()

    first = step.handle(event, FakeLambdaContext())
    assert first["status"] == "dead_lettered"
    assert step.handle(make_event(), FakeLambdaContext()) == first
    assert fake_api.request_count == 1
    assert len(model_env.dead_letters()) == 1

    retried = step.handle(make_event(prospect_detail(replay_generation=1)), FakeLambdaContext())
    assert retried["status"] == "completed"
    assert retried["replay_generation"] == 1
    assert fake_api.request_count == 2


@pytest.mark.parametrize(
    "detail",
    [
        pytest.param({"email": "a@example.com"}, id="both-parts-null"),
        pytest.param(prospect_detail(row_number=None), id="one-part-null"),
        pytest.param(
            {k: v for k, v in prospect_detail().items() if k != "upload_id"}, id="one-missing"
        ),
        pytest.param(prospect_detail(upload_id=""), id="empty-string"),
        pytest.param(prospect_detail(upload_id="   "), id="blank-string"),
    ],
)
def test_missing_key_part_makes_no_request_and_is_dead_lettered(
    make_step, fake_api, model_env, detail
):
    event = make_event(detail)

    result = make_step().handle(event, FakeLambdaContext())

    assert fake_api.request_count == 0
    assert result["status"] == "dead_lettered"
    assert result["error_code"] == "MissingIdempotencyKey"
    [message] = model_env.dead_letters()
    assert message["body"] == event
    assert message["attributes"]["ERROR_CODE"] == "MissingIdempotencyKey"
    assert "REQUEST_ID" not in message["attributes"]
    # No answer record (there is no key); only the DLQ hand-off, keyed on the event id.
    [item] = model_env.idempotency_items()
    assert item["id"]["S"].startswith("model-step#dead-letter#")


def test_event_without_detail_is_dead_lettered(make_step, fake_api, model_env):
    event = make_event()
    del event["detail"]

    result = make_step().handle(event, FakeLambdaContext())

    assert result["error_code"] == "MissingIdempotencyKey"
    assert fake_api.request_count == 0
    assert len(model_env.dead_letters()) == 1


def test_zero_and_false_are_valid_key_parts(make_step, fake_api, monkeypatch):
    monkeypatch.setenv("IDEMPOTENCY_KEY", "[upload_id, row_number, vip]")
    result = make_step().handle(
        make_event(prospect_detail(row_number=0, vip=False)), FakeLambdaContext()
    )
    assert result["key"] == ["upload-001", 0, False]
    assert fake_api.request_count == 1


def test_label_outside_allowed_labels_is_dead_lettered(make_step, fake_api, model_env, monkeypatch):
    monkeypatch.setenv("ALLOWED_LABELS", "hot,warm,cold")
    fake_api.script = [Reply(text="Lukewarm, probably")]
    event = make_event()

    result = make_step().handle(event, FakeLambdaContext())

    assert fake_api.request_count == 1
    assert result["status"] == "dead_lettered"
    assert result["error_code"] == "LabelNotAllowed"
    [message] = model_env.dead_letters()
    assert message["body"] == event
    assert message["attributes"]["ERROR_CODE"] == "LabelNotAllowed"
    assert message["attributes"]["REQUEST_ID"] == fake_api.last_request.request_id
    # The billed, refused answer is stored as a dead letter: a duplicate costs nothing.
    assert {item["status"]["S"] for item in model_env.idempotency_items()} == {"COMPLETED"}
    assert make_step().handle(make_event(), FakeLambdaContext()) == result
    assert fake_api.request_count == 1
    assert model_env.dead_letters() == []


def test_allowed_label_is_normalised(make_step, fake_api, monkeypatch):
    monkeypatch.setenv("ALLOWED_LABELS", "Hot, warm ,cold")
    fake_api.text = "  HOT\n"
    result = make_step().handle(make_event(), FakeLambdaContext())
    assert (result["answer"], result["label"]) == ("HOT", "hot")


def test_same_key_different_payload_is_dead_lettered(make_step, fake_api, model_env):
    step = make_step()
    original = make_event()
    step.handle(original, FakeLambdaContext())
    changed = make_event(prospect_detail(notes="A different note for the same row"))

    result = step.handle(changed, FakeLambdaContext())

    assert fake_api.request_count == 1
    assert result["status"] == "dead_lettered"
    assert result["error_code"] == "IdempotencyPayloadMismatch"
    [message] = model_env.dead_letters()
    assert message["body"] == changed
    # The original answer is still served for the original payload.
    assert step.handle(original, FakeLambdaContext())["status"] == "completed"
    assert fake_api.request_count == 1


def test_dead_letter_send_failure_raises_and_the_retry_only_resends(
    make_step, fake_api, model_env, monkeypatch
):
    from model_step import DeadLetterError

    monkeypatch.setenv(
        "DEAD_LETTER_QUEUE_URL", "https://sqs.us-east-1.amazonaws.com/123456789012/missing"
    )
    fake_api.script = [400]
    event = make_event()

    with pytest.raises(DeadLetterError):
        make_step().handle(event, FakeLambdaContext())
    # The outcome is stored; the hand-off record was released.
    [item] = model_env.idempotency_items()
    assert item["id"]["S"].startswith("model-step#")
    assert "dead-letter" not in item["id"]["S"]

    monkeypatch.setenv("DEAD_LETTER_QUEUE_URL", model_env.queue_url)
    for _ in range(2):  # the retry re-sends; a later duplicate does not
        result = make_step().handle(event, FakeLambdaContext())
    assert result["status"] == "dead_lettered"
    assert result["error_code"] == "BadRequestError"
    assert fake_api.request_count == 1
    [message] = model_env.dead_letters()
    assert message["attributes"]["ERROR_CODE"] == "BadRequestError"


def test_invalid_answer_from_custom_parser_is_dead_lettered(make_step, fake_api, model_env):
    from model_step import InvalidAnswerError

    def parse(text: str) -> dict:
        raise InvalidAnswerError(f"not JSON: {text!r}")

    result = make_step(parse_answer=parse).handle(make_event(), FakeLambdaContext())

    assert result["error_code"] == "InvalidAnswer"
    assert result["request_id"] == fake_api.last_request.request_id
    assert model_env.dead_letters()[0]["attributes"]["ERROR_CODE"] == "InvalidAnswer"


ANSWER_MARKER = "jane.doe@acme.example"


def _quoting_parser(text: str) -> dict:
    raise ValueError(f"not JSON: {text!r}")


@pytest.mark.parametrize(
    ("parser", "code"), [(None, "LabelNotAllowed"), (_quoting_parser, "InvalidAnswer")]
)
def test_an_answer_quoting_a_row_value_reaches_no_log_and_no_dead_letter_attribute(
    make_step, fake_api, model_env, monkeypatch, log_capture, parser, code
):
    # GIVEN an answer that repeats the row's email (the notes asked for it)
    if parser is None:
        monkeypatch.setenv("ALLOWED_LABELS", "hot,warm,cold")
    fake_api.script = [Reply(text=ANSWER_MARKER)]

    # WHEN it is refused (a label not allowed, or the parser's exception quoting it)
    result = make_step(parse_answer=parser).handle(make_event(), FakeLambdaContext())

    # THEN the code and the answer's length are reported, never its text
    assert result["error_code"] == code
    assert f"answer of {len(ANSWER_MARKER)} characters" in result["error_message"]
    [message] = model_env.dead_letters()
    assert ANSWER_MARKER not in json.dumps(message["attributes"])
    logged = log_capture.getvalue()
    assert "non-retryable failure sent to dead-letter queue" in logged  # the logs were seen
    assert ANSWER_MARKER not in logged
