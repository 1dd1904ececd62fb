"""Exceptions of the model step, and the one place that decides retryable vs. not.

Retryable failures propagate out of the idempotent call, so the record is released and a
retry really runs. Non-retryable ones (``NonRetryableError``) become a stored
``dead_lettered`` outcome: the event is sent to the dead-letter queue once, and every later
duplicate replays that outcome without a model request or a second dead-letter message.
"""

from __future__ import annotations

import re
from typing import Any

from .lifetime import MEMORY_EXPIRED

# Statuses the Anthropic SDK itself would retry (408, 409, 429 and every 5xx); any other 4xx
# says the request itself is wrong, so repeating it cannot help.
RETRYABLE_STATUSES = frozenset({408, 409, 429})
# Rate-limit answers: the provider did not serve (or bill) the request; the row waits.
RATE_LIMIT_STATUSES = frozenset({429, 529})
# Stop reasons of a complete answer. Anything else (max_tokens, refusal, pause_turn, tool_use,
# model_context_window_exceeded, ...) is not an answer to store.
COMPLETE_STOP_REASONS = frozenset({"end_turn", "stop_sequence"})
SHOULD_RETRY_HEADER = "x-should-retry"
#: A value a reason may quote from a provider's answer: a code or an id, never a sentence.
_CODE = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


class ModelStepError(Exception):
    """Base class of every error raised by this package."""


class ConfigurationError(ModelStepError):
    """A required environment variable is missing or invalid. Raised, so it is retried
    (and then lands in the function's on-failure destination) rather than dead-lettered."""


class DeadLetterError(ModelStepError):
    """Sending a non-retryable event to the dead-letter queue failed. Raised, so the delivery
    is retried; the retry replays the stored outcome and only re-sends (never re-bills).
    ``failures``: the deliveries whose send of this dead letter failed so far (0 when not
    counted); past ``MAX_HAND_OFF_FAILURES`` the redrive queue stops putting the row back."""

    def __init__(self, message: str, *, failures: int = 0) -> None:
        super().__init__(message)
        self.failures = failures


class ResultEventError(ModelStepError):
    """Publishing a key's result event on the result bus failed. Raised, so the delivery is
    retried; the retry replays the stored result and only publishes again (never re-bills).
    ``uncertain``: the bus may have accepted the event (a read timeout, a connection closed
    after the request was sent), so the publish's intent is kept for the next delivery to
    reconcile; False: the bus certainly did not take it."""

    def __init__(self, message: str, *, uncertain: bool = False) -> None:
        super().__init__(message)
        self.uncertain = uncertain


class RetryableAnswerError(ModelStepError):
    """Raise it from your own ``parse_answer`` when a retry (a NEW billed model request) can
    fix the answer. Any other parser exception dead-letters the event as ``InvalidAnswer``."""


class NonRetryableError(ModelStepError):
    """The event cannot succeed as it is; it is dead-lettered with ``error_code``.

    Subclass it (or raise it from ``parse_answer``) to dead-letter your own failures.
    """

    error_code = "NonRetryable"

    def __init__(self, message: str, *, request_id: str | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id


class MissingIdempotencyKeyError(NonRetryableError):
    """A part of the business key is missing, null or empty. No model call is made, because
    such events would otherwise all share one idempotency record and one answer."""

    error_code = "MissingIdempotencyKey"


class InvalidReplayGenerationError(NonRetryableError):
    """The reserved detail field ``replay_generation`` is not an integer >= 1."""

    error_code = "InvalidReplayGeneration"


class PayloadMismatchError(NonRetryableError):
    """The same idempotency key arrived with a different payload (Powertools'
    ``IdempotencyValidationError``)."""

    error_code = "IdempotencyPayloadMismatch"


class LabelNotAllowedError(NonRetryableError):
    """The answer is not one of ``ALLOWED_LABELS``."""

    error_code = "LabelNotAllowed"


class InvalidAnswerError(NonRetryableError):
    """``parse_answer`` rejected the model's answer. Raise it from your own parser; any
    exception a parser raises (except ``RetryableAnswerError``) is turned into this one."""

    error_code = "InvalidAnswer"


class MaxTokensReachedError(NonRetryableError):
    """``stop_reason`` was ``max_tokens``: the answer was cut off (raise the step's
    ``max_tokens`` and retry)."""

    error_code = "MaxTokensReached"


class ModelRefusedError(NonRetryableError):
    """``stop_reason`` was ``refusal``."""

    error_code = "ModelRefused"


class IncompleteAnswerError(NonRetryableError):
    """Any other stop reason that is not a complete answer (``tool_use``, ``pause_turn``,
    ``model_context_window_exceeded``, an unknown one)."""

    error_code = "IncompleteAnswer"


class ResultTooLargeError(NonRetryableError):
    """The result to store (the parsed answer, mostly) is over the stored-result budget, so it
    could never be saved in a DynamoDB item."""

    error_code = "ResultTooLarge"


class ModelRequestRejectedError(NonRetryableError):
    """The model API refused the request with a non-retryable 4xx (400, 401, 403, 404, 413,
    422, ...) or said ``x-should-retry: false``. ``error_code`` is the SDK exception name,
    e.g. ``AuthenticationError``."""

    def __init__(
        self, message: str, *, error_code: str, status_code: int, request_id: str | None
    ) -> None:
        super().__init__(message, request_id=request_id)
        self.error_code = error_code
        self.status_code = status_code


class RetriesExhaustedError(NonRetryableError):
    """The key's attempt budget (``MAX_ATTEMPTS`` requests, one for an operator's DLQ redrive)
    or its rate-limit window (``MAX_EVENT_AGE_SECONDS`` from when the step first saw the row,
    code ``RateLimitExhausted``) is used up. ``error_code`` is the given code: the last
    attempt's failure (the SDK exception name, ``ModelDeadlineExceeded``, or
    ``AttemptInterrupted`` when that attempt never reported back)."""

    def __init__(self, message: str, *, error_code: str, request_id: str | None = None) -> None:
        super().__init__(message, request_id=request_id)
        self.error_code = error_code


def should_retry_header(exc: BaseException) -> bool | None:
    """The ``x-should-retry`` response header of an SDK status error: True, False or None."""
    response = getattr(exc, "response", None)
    headers: Any = getattr(response, "headers", None)
    if headers is None:
        return None
    value = str(headers.get(SHOULD_RETRY_HEADER) or "").strip().lower()
    return {"true": True, "false": False}.get(value)


def is_rate_limited(exc: BaseException) -> bool:
    """A rate limit: the provider did not serve (or bill) the request, and the row waits it
    out without spending an attempt. A 429 or 529 of the Claude API; on Bedrock the errors of
    :data:`BEDROCK_RATE_LIMIT_ERRORS`, whatever their status (``ServiceQuotaExceeded`` is a
    400, ``ServiceUnavailable`` a 503), but not ``ModelNotReadyException``, a 429 retried
    within the budget (:data:`BEDROCK_TRANSIENT_ERRORS`). Whether it is retried at all is
    ``classify_model_error``'s call (``x-should-retry: false`` says no)."""
    name = bedrock_error_type(exc)
    if name in BEDROCK_RATE_LIMIT_ERRORS:
        return True
    if name in BEDROCK_TRANSIENT_ERRORS:
        return False
    return getattr(exc, "status_code", None) in RATE_LIMIT_STATUSES


def classify_model_error(exc: BaseException) -> NonRetryableError | None:
    """Return a ``NonRetryableError`` for an SDK error that retrying cannot fix, else None.

    ``x-should-retry: true|false`` wins over the status code both ways, as in the SDK.
    Otherwise ``None`` means transient (408, 409, 429, 5xx including 529, connection errors
    and timeouts) or not an SDK error at all: the caller re-raises the original exception.
    """
    # Imported here, not at module level: this only runs after a model call, when the SDK is
    # already loaded (lazily: see sdk_import), and importing it costs a second of cold start.
    from .sdk_import import sdk

    anthropic = sdk()
    if not isinstance(exc, anthropic.APIStatusError):
        return None
    status = exc.status_code
    verdict = should_retry_header(exc)
    if verdict is None:
        verdict = _bedrock_verdict(exc)
    if verdict is None:
        verdict = not (400 <= status < 500 and status not in RETRYABLE_STATUSES)
    if verdict:
        return None
    return ModelRequestRejectedError(
        f"model API refused the request: {model_error_reason(exc)}",
        error_code=bedrock_error_type(exc) or type(exc).__name__,
        status_code=status,
        request_id=exc.request_id,
    )


def model_error_reason(exc: BaseException) -> str:
    """The reason text of a model API error: its type, status, the provider's error type and
    the request id, e.g. ``"InternalServerError, status 500, type api_error, request id
    req_1"``. Never the provider's message: it can quote the request, which holds row values,
    and the reason is stored, dead-lettered and logged."""
    parts = [bedrock_error_type(exc) or type(exc).__name__]
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        parts.append(f"status {status}")
    body = getattr(exc, "body", None)
    error = body.get("error") if isinstance(body, dict) else None
    provider_type = error.get("type") if isinstance(error, dict) else None
    if isinstance(provider_type, str) and _CODE.match(provider_type):
        parts.append(f"type {provider_type}")
    request_id = getattr(exc, "request_id", None)
    if isinstance(request_id, str) and _CODE.match(request_id):
        parts.append(f"request id {request_id}")
    return ", ".join(parts)


def withhold_provider_text(exc: BaseException) -> BaseException:
    """``exc`` (an SDK status error) with its message replaced by :func:`model_error_reason`,
    so a transient error that leaves the handler (Lambda logs its message, an on-failure
    record carries it) or a traceback that shows it never quotes the provider. The class,
    status, body and response stay, so retry decisions are unchanged."""
    if getattr(exc, "status_code", None) is not None and hasattr(exc, "message"):
        reason = f"{model_error_reason(exc)} (provider message withheld)"
        exc.args = (reason,)
        try:
            setattr(exc, "message", reason)  # noqa: B010 (an attribute of the SDK's class)
        except AttributeError:
            pass  # a read-only message: the args are what str() shows
    return exc


class MemoryExpiredError(NonRetryableError):
    """A copy of a key came back after the key's memory lifetime
    (``IDEMPOTENCY_EXPIRES_AFTER_SECONDS``, see ``model_step.lifetime``) and its attempt
    budget is gone, so answering it could bill the key past its budget. No model request is
    made; it is dead-lettered so an operator decides (a DLQ redrive buys one request)."""

    error_code = MEMORY_EXPIRED


class ResultEventUndeliverableError(NonRetryableError):
    """The result bus refused the key's result event on ``MAX_HAND_OFF_FAILURES`` deliveries.
    The key's stored result is kept; the row is acknowledged and this dead letter (its marker
    names the key's record) is on the DLQ. An operator's redrive of it publishes the stored
    result again and never calls the model."""

    error_code = "ResultEventUndeliverable"


class PayloadOmittedError(NonRetryableError):
    """An operator redrove a dead letter whose body had to be cut to fit the DLQ
    (``dead_letter.payload_omitted``). Answering it would send the model a truncated
    payload, so it is refused; publish the full event again instead."""

    error_code = "PayloadOmitted"


class ReceivesExhaustedError(NonRetryableError):
    """The buffer queue gave up on the row (``maxReceiveCount`` receives without an answer:
    crashes, timeouts or throttles) more often than the step puts it back, or past
    ``MAX_EVENT_AGE_SECONDS``. No model request is made for it."""

    error_code = "ReceivesExhausted"


# -- Bedrock (issue 22) ----------------------------------------------------------------------
# Bedrock names each error in the ``x-amzn-errortype`` header
# (``ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/``) and puts only
# ``{"message": ...}`` in the body. The SDK turns the status into its own class (429 ->
# RateLimitError, 503 -> ServiceUnavailableError, ...); the ERROR_CODE is Bedrock's name.
BEDROCK_ERROR_TYPE_HEADER = "x-amzn-errortype"
#: Bedrock errors that are waited out like the Claude API's 429 and 529: nothing was served or
#: billed, no attempt is spent, and the row waits (backoff) up to ``MAX_EVENT_AGE_SECONDS``.
#: ``ThrottlingException`` (429) is the rate limit; ``ServiceQuotaExceededException`` (400)
#: is the account's quota, and AWS says "you can resubmit your request later";
#: ``ServiceUnavailableException`` (503) is Bedrock's overload, as Anthropic's 529.
BEDROCK_RATE_LIMIT_ERRORS = frozenset(
    {"ThrottlingException", "ServiceQuotaExceededException", "ServiceUnavailableException"}
)
#: Bedrock errors a later attempt can cure; each spends an attempt of the key's budget.
#: ``ModelNotReadyException`` is a 429 but not a rate limit: the model itself is not
#: serving yet (the AWS SDK retries it), and a wait bounded by attempts (not by the 24 h
#: event age) is the answer; ``ModelTimeoutException`` (408) may have run the model.
BEDROCK_TRANSIENT_ERRORS = frozenset(
    {
        "ModelNotReadyException",
        "ModelTimeoutException",
        "InternalServerException",
    }
)
#: Bedrock errors that no retry can cure: the request, the model id, the role's grant or the
#: model's own failure on this input. Each is a stored dead letter after one request.
BEDROCK_NON_RETRYABLE_ERRORS = frozenset(
    {
        "ValidationException",
        "AccessDeniedException",
        "ResourceNotFoundException",
        "ModelErrorException",
    }
)


def bedrock_error_type(exc: BaseException) -> str | None:
    """Bedrock's error name from an SDK status error's ``x-amzn-errortype`` header (the part
    before ``:``), e.g. ``"ThrottlingException"``; None for any other error."""
    headers: Any = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    raw = str(headers.get(BEDROCK_ERROR_TYPE_HEADER) or "").split(":", 1)[0].strip()
    return raw or None


def _bedrock_verdict(exc: BaseException) -> bool | None:
    """True (retry) or False (dead-letter) for a Bedrock error this module names; None for
    any other, which the status code decides."""
    name = bedrock_error_type(exc)
    if name in BEDROCK_TRANSIENT_ERRORS or name in BEDROCK_RATE_LIMIT_ERRORS:
        return True
    if name in BEDROCK_NON_RETRYABLE_ERRORS:
        return False
    return None
