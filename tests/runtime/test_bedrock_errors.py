"""Bedrock's own errors, each in the stored-outcome design (issue 22).

The real handler and the real ``AnthropicBedrock`` client over HTTP to the fake
``bedrock-runtime``: a rate limit (``ThrottlingException``), the account's quota
(``ServiceQuotaExceededException``, "you can resubmit your request later") and Bedrock's
overload (``ServiceUnavailableException``, as Anthropic's 529) wait and spend no attempt
(issue 32); a transient error (``ModelNotReadyException``, ``ModelTimeoutException``,
``InternalServerException``) spends an attempt of the key's budget; a non-retryable one
(``ValidationException``, ``AccessDeniedException``, ...) is a stored dead letter after one
request. The ERROR_CODE is Bedrock's name.
"""

from __future__ import annotations

import itertools

import anthropic
import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constructs_lib.testing.bedrock_api import ERROR_STATUSES, INVALID_MODEL_ID
from tests.fakes import FakeBedrockRuntime, Reply

from .conftest import FakeLambdaContext, fresh_event, make_event, prospect_detail
from .test_providers import BEDROCK_MODEL_ID, SECRET_KEYS


@pytest.fixture
def bedrock(model_env, monkeypatch):
    with FakeBedrockRuntime(timeout_sleep=3.0, secret_keys=SECRET_KEYS) as fake:
        monkeypatch.setenv("ANTHROPIC_BEDROCK_BASE_URL", fake.base_url)
        monkeypatch.setenv("MODEL_PROVIDER", "bedrock")
        monkeypatch.setenv("MODEL_ID", BEDROCK_MODEL_ID)
        monkeypatch.delenv("ANTHROPIC_API_KEY_SECRET_ARN")
        yield fake


def test_bedrock_gets_its_wire_shape_signed(make_step, bedrock):
    make_step().handle(make_event(), FakeLambdaContext())

    request = bedrock.last_request
    assert request.model_id == BEDROCK_MODEL_ID  # from the path; never in the body
    assert request.body["anthropic_version"] == "bedrock-2023-05-31"
    assert "model" not in request.body
    assert request.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=")
    assert "/us-east-1/bedrock/aws4_request" in request.headers["authorization"]
    assert request.access_key_id in SECRET_KEYS  # the fake verified the signature itself


@pytest.mark.parametrize(
    "error",
    [
        "ValidationException",
        "AccessDeniedException",
        "ResourceNotFoundException",
        "ModelErrorException",
    ],
)
def test_a_non_retryable_bedrock_error_is_a_stored_dead_letter_under_its_name(
    make_step, bedrock, model_env, error
):
    bedrock.script = [error]
    step = make_step()

    result = step.handle(make_event(), FakeLambdaContext())
    again = step.handle(make_event(), FakeLambdaContext())

    assert bedrock.request_count == 1
    assert (result["status"], result["error_code"]) == ("dead_lettered", error)
    assert result["request_id"] == bedrock.last_request.request_id
    assert again == result
    [message] = model_env.dead_letters()
    assert message["attributes"]["ERROR_CODE"] == error


@pytest.mark.parametrize(
    ("error", "status"),
    [
        ("ModelNotReadyException", 429),
        ("ModelTimeoutException", 408),
        ("InternalServerException", 500),
    ],
)
def test_a_transient_bedrock_error_spends_an_attempt_and_its_name_is_the_last_code(
    make_step, bedrock, model_env, error, status
):
    bedrock.script = [error] * 3
    step = make_step()
    event = make_event()

    for attempt in (1, 2):
        with pytest.raises(anthropic.APIStatusError) as raised:
            step.handle(event, FakeLambdaContext())
        assert raised.value.status_code == status
        [budget] = model_env.budgets().values()
        assert budget["attempts"]["N"] == str(attempt)
    result = step.handle(event, FakeLambdaContext())

    assert bedrock.request_count == 3
    assert (result["status"], result["error_code"]) == ("dead_lettered", error)
    assert result["request_id"] == bedrock.last_request.request_id


def test_model_not_ready_is_no_rate_limit_on_the_buffer_queue(
    make_step, bedrock, model_env, buffer, outcomes
):
    # A 429 like ThrottlingException, but the model is not serving: an attempt is spent and
    # the row is retried as a spaced batch item failure, not re-enqueued to wait.
    bedrock.script = ["ModelNotReadyException"]
    step = make_step(on_outcome=outcomes)
    response = step.handle(buffer.batch(fresh_event()), FakeLambdaContext())

    assert len(response["batchItemFailures"]) == 1
    assert buffer.requeued() == []
    [budget] = model_env.budgets().values()
    assert budget["attempts"]["N"] == "1"
    # Not served, so not billed: a 429 never is, whichever error it names.
    [(_, outcome)] = outcomes.seen
    assert (outcome["status"], outcome["model_requests"], outcome["rate_limited"]) == (
        "retry",
        0,
        0,
    )


@pytest.mark.parametrize(
    ("error", "status"),
    [
        ("ThrottlingException", 429),
        ("ServiceQuotaExceededException", 400),
        ("ServiceUnavailableException", 503),
    ],
)
def test_a_rate_limit_quota_or_overload_waits_spends_no_attempt_and_an_answer_follows(
    make_step, bedrock, model_env, buffer, outcomes, error, status
):
    # GIVEN a row whose first request meets the error
    bedrock.script = [error]
    step = make_step(on_outcome=outcomes)
    event = fresh_event()

    # WHEN it is delivered from the buffer queue, then its waiting copy comes back
    step.handle(buffer.batch(event), FakeLambdaContext())
    [copy] = buffer.requeued()
    result = step.handle(buffer.batch(event), FakeLambdaContext())

    # THEN it waited (re-enqueued with a delay), spent no attempt, was not billed, and the
    # next request's answer is stored
    assert copy["DelaySeconds"] >= 1
    assert result == {"batchItemFailures": []}
    assert bedrock.request_count == 2
    [(_, waited), (_, answered)] = outcomes.seen
    assert (waited["status"], waited["model_requests"], waited["rate_limited"]) == (
        "rate_limited",
        0,
        1,
    )
    assert waited["error_code"] == error and waited["cost_usd"] == 0.0
    assert answered["status"] == "completed"
    [budget] = model_env.budgets().values()
    assert budget["attempts"]["N"] == "1"  # the answered request's attempt only
    assert ERROR_STATUSES[error] == status


def test_a_model_id_bedrock_does_not_publish_is_a_validation_dead_letter(
    make_step, bedrock, model_env, monkeypatch
):
    # The id the stack used to default to: the real model has no "-v1:0" suffix.
    monkeypatch.setenv("MODEL_ID", "us.anthropic.claude-haiku-5-5-v1:0")

    result = make_step().handle(make_event(), FakeLambdaContext())

    assert bedrock.request_count == 1
    assert (result["status"], result["error_code"]) == ("dead_lettered", "ValidationException")
    # The stored reason names the error's type and status, never the provider's text (issue 34).
    assert "ValidationException, status 400" in result["error_message"]
    assert INVALID_MODEL_ID not in result["error_message"]


@pytest.mark.parametrize(("error", "status"), sorted(ERROR_STATUSES.items()))
def test_the_fake_returns_all_ten_invoke_model_errors_with_status_and_type(bedrock, error, status):
    bedrock.script = [error]
    client = anthropic.AnthropicBedrock(aws_region="us-east-1", max_retries=0)

    with pytest.raises(anthropic.APIStatusError) as raised:
        client.messages.create(
            model=BEDROCK_MODEL_ID,
            max_tokens=16,
            thinking={"type": "disabled"},
            messages=[{"role": "user", "content": "hi"}],
            extra_body={"anthropic_version": "bedrock-2023-05-31"},
        )

    response = raised.value.response
    assert response.status_code == status
    assert response.headers["x-amzn-errortype"].split(":", 1)[0] == error
    assert response.headers["x-amzn-requestid"]
    assert set(raised.value.body) == {"message"}
    assert len(ERROR_STATUSES) == 10


def test_a_request_signed_with_the_wrong_secret_is_refused_before_any_work(
    make_step, bedrock, model_env
):
    bedrock.secret_keys = {key: "not-the-secret" for key in SECRET_KEYS}

    result = make_step().handle(make_event(), FakeLambdaContext())

    assert bedrock.request_count == 0
    assert bedrock.rejected == ["InvalidSignatureException"]
    assert (result["status"], result["error_code"]) == (
        "dead_lettered",
        "InvalidSignatureException",
    )


def test_an_unsigned_request_is_refused_with_bedrocks_shape(bedrock):
    response = httpx2.post(
        f"{bedrock.base_url}/model/{BEDROCK_MODEL_ID}/invoke",
        json={"anthropic_version": "bedrock-2023-05-31", "max_tokens": 1, "messages": []},
    )

    assert response.status_code == 403
    assert response.headers["x-amzn-errortype"].startswith("MissingAuthenticationTokenException:")
    assert response.headers["x-amzn-requestid"]
    assert response.json() == {"message": "Missing Authentication Token"}
    assert bedrock.rejected == ["MissingAuthenticationTokenException"]


def test_the_sdks_own_anthropic_version_is_refused_which_is_why_the_step_sends_one(
    bedrock, monkeypatch
):
    client = anthropic.AnthropicBedrock(aws_region="us-east-1", max_retries=0)

    with pytest.raises(anthropic.BadRequestError) as raised:
        client.messages.create(
            model=BEDROCK_MODEL_ID,
            max_tokens=16,
            messages=[{"role": "user", "content": "hi"}],
        )

    assert raised.value.response.headers["x-amzn-errortype"].startswith("ValidationException:")
    assert "anthropic_version" in str(raised.value.body)
    assert bedrock.last_request.body["anthropic_version"] != "bedrock-2023-05-31"


def test_a_rate_limit_reply_keeps_its_retry_after(bedrock, make_step, buffer):
    bedrock.script = [Reply(status=429, headers={"retry-after": "11"})]
    make_step().handle(buffer.batch(fresh_event()), FakeLambdaContext())
    [copy] = buffer.requeued()
    assert copy["DelaySeconds"] == 11


# -- generated schedules (issue 32) ----------------------------------------------------------
#: Each error's class, as the runtime must treat it (docs/runtime.md, "On Amazon Bedrock").
WAITED = {"ThrottlingException", "ServiceQuotaExceededException", "ServiceUnavailableException"}
SPENT = {"ModelNotReadyException", "ModelTimeoutException", "InternalServerException"}
DEAD = {
    "ValidationException",
    "AccessDeniedException",
    "ResourceNotFoundException",
    "ModelErrorException",
}
MAX_ATTEMPTS = 3
_rows = itertools.count(100)


def expected_end(schedule: list[str]) -> tuple[str, str | None, int]:
    """The status, error code and requests a key meets under ``schedule`` (then 200s): a wait
    spends nothing, a transient error one attempt of ``MAX_ATTEMPTS``, a 400-class error is
    the end."""
    attempts = 0
    for sent, entry in enumerate(schedule, start=1):
        if entry == "200":
            return "completed", None, sent
        if entry in DEAD:
            return "dead_lettered", entry, sent
        if entry in SPENT:
            attempts += 1
            if attempts == MAX_ATTEMPTS:
                return "dead_lettered", entry, sent
    return "completed", None, len(schedule) + 1


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(st.sampled_from([*sorted(ERROR_STATUSES), "200"]), max_size=6))
def test_any_schedule_of_bedrock_errors_ends_as_its_classes_say(
    make_step, bedrock, outcomes, schedule
):
    # GIVEN a new key whose requests meet the drawn errors, then 200s
    seen = len(outcomes.seen)
    sent_before = bedrock.request_count

    def script(index: int, body: dict) -> int | str:
        drawn = schedule[index - sent_before] if index - sent_before < len(schedule) else "200"
        return 200 if drawn == "200" else drawn

    bedrock.script = script
    step = make_step(on_outcome=outcomes)
    event = make_event(prospect_detail(row_number=next(_rows)))

    # WHEN Lambda delivers it until it stops raising (each raise is a retry)
    result = None
    for _ in range(len(schedule) + 2):
        try:
            result = step.handle(event, FakeLambdaContext())
            break
        except anthropic.APIStatusError:
            continue

    # THEN it ends in a label or a recorded dead letter exactly as the classes say, no
    # request more than the schedule needs, and only served requests billed, each once
    status, code, requests = expected_end(schedule)
    assert result is not None
    assert (result["status"], result.get("error_code")) == (status, code)
    assert bedrock.request_count - sent_before == requests
    delivered = [outcome for _, outcome in outcomes.seen[seen:]]
    billed = sum(outcome["model_requests"] for outcome in delivered)
    assert billed == requests - sum(entry in WAITED | {"ModelNotReadyException"}
                                    for entry in schedule[:requests])  # fmt: skip
    assert billed <= MAX_ATTEMPTS
    waits = [o for o in delivered if o["status"] == "rate_limited"]
    assert len(waits) == sum(entry in WAITED for entry in schedule[:requests])
    assert all(o["cost_usd"] == 0.0 for o in waits)
