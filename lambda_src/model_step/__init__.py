"""Retry-safe LLM calls for EventBridge -> Lambda pipelines.

Public API: ``ModelStep`` (the runtime), ``Settings`` (env parsing), ``extract_business_key``,
and the exceptions; raise ``InvalidAnswerError`` from your own ``parse_answer`` to dead-letter
(any other parser exception does too), ``RetryableAnswerError`` to ask for a retry.
Importing this package never imports the model SDK (``prime_for_snapstart`` does, under
SnapStart only).
"""

from .config import Settings
from .errors import (
    ConfigurationError,
    DeadLetterError,
    IncompleteAnswerError,
    InvalidAnswerError,
    InvalidReplayGenerationError,
    LabelNotAllowedError,
    MaxTokensReachedError,
    MissingIdempotencyKeyError,
    ModelRefusedError,
    ModelRequestRejectedError,
    ModelStepError,
    NonRetryableError,
    PayloadMismatchError,
    ReceivesExhaustedError,
    ResultTooLargeError,
    RetriesExhaustedError,
    RetryableAnswerError,
)
from .key import canonical, extract_business_key
from .model_call import default_user_message, request_fingerprint
from .outcome import CompletedResult, DeadLetteredResult, Outcome, StepResult
from .runtime import ModelStep
from .snapstart import prime_for_snapstart

__all__ = [
    "ConfigurationError",
    "DeadLetterError",
    "IncompleteAnswerError",
    "InvalidAnswerError",
    "InvalidReplayGenerationError",
    "LabelNotAllowedError",
    "MaxTokensReachedError",
    "MissingIdempotencyKeyError",
    "ModelRefusedError",
    "ModelRequestRejectedError",
    "ModelStep",
    "ModelStepError",
    "NonRetryableError",
    "PayloadMismatchError",
    "ResultTooLargeError",
    "ReceivesExhaustedError",
    "RetriesExhaustedError",
    "RetryableAnswerError",
    "CompletedResult",
    "DeadLetteredResult",
    "Outcome",
    "Settings",
    "StepResult",
    "canonical",
    "default_user_message",
    "extract_business_key",
    "prime_for_snapstart",
    "request_fingerprint",
]
