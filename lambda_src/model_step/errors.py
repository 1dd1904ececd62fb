"""Exceptions of the model step, and the one place that decides retryable vs. not.

Retryable failures propagate out of the handler, so Lambda's async retries run them again.
Non-retryable ones (``NonRetryableError``) are sent to the dead-letter queue and the handler
returns normally, so no retry is burned on an event that can never succeed as it is.
"""

from __future__ import annotations

# Statuses the Anthropic SDK itself would retry (408, 409, 429 and every 5xx); any other 4xx
# says the request itself is wrong, so repeating it cannot help.
RETRYABLE_STATUSES = frozenset({408, 409, 429})


class ModelStepError(Exception):
    """Base class of every error raised by this package."""


class ConfigurationError(ModelStepError):
    """A required environment variable is missing or invalid. Raised, so it is retried
    (and then lands in the function's on-failure destination) rather than dead-lettered."""


class DeadLetterError(ModelStepError):
    """Sending a non-retryable event to the dead-letter queue failed. Raised, so Lambda
    retries the whole invocation instead of losing the event."""


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


class PayloadMismatchError(NonRetryableError):
    """The same idempotency key arrived with a different payload (Powertools'
    ``IdempotencyValidationError``)."""

    error_code = "IdempotencyPayloadMismatch"


class LabelNotAllowedError(NonRetryableError):
    """The answer is not one of ``ALLOWED_LABELS``."""

    error_code = "LabelNotAllowed"


class InvalidAnswerError(NonRetryableError):
    """``parse_answer`` rejected the model's answer. Raise it from your own parser."""

    error_code = "InvalidAnswer"


class ModelRequestRejectedError(NonRetryableError):
    """The model API refused the request with a non-retryable 4xx (400, 401, 403, 404, 413,
    422, ...). ``error_code`` is the SDK exception name, e.g. ``AuthenticationError``."""

    def __init__(
        self, message: str, *, error_code: str, status_code: int, request_id: str | None
    ) -> None:
        super().__init__(message, request_id=request_id)
        self.error_code = error_code
        self.status_code = status_code


def classify_model_error(exc: BaseException) -> NonRetryableError | None:
    """Return a ``NonRetryableError`` for an SDK error that retrying cannot fix, else None.

    ``None`` means transient (408, 409, 429, 5xx including 529, connection errors and
    timeouts) or not an SDK error at all: the caller re-raises the original exception.
    """
    # Imported here, not at module level: this only runs after a model call, when the SDK is
    # already loaded, and importing it costs about a second of cold start.
    import anthropic

    if not isinstance(exc, anthropic.APIStatusError):
        return None
    status = exc.status_code
    if 400 <= status < 500 and status not in RETRYABLE_STATUSES:
        return ModelRequestRejectedError(
            f"model API returned {status}: {exc.message}",
            error_code=type(exc).__name__,
            status_code=status,
            request_id=exc.request_id,
        )
    return None
