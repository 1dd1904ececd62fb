"""Retry-safe LLM calls for EventBridge -> Lambda pipelines.

Public API: ``ModelStep`` (the runtime), ``Settings`` (env parsing), ``extract_business_key``,
and the exceptions; raise ``InvalidAnswerError`` from your own ``parse_answer`` to dead-letter.
Importing this package never imports the model SDK.
"""

from .config import Settings
from .errors import (
    ConfigurationError,
    DeadLetterError,
    InvalidAnswerError,
    LabelNotAllowedError,
    MissingIdempotencyKeyError,
    ModelRequestRejectedError,
    ModelStepError,
    NonRetryableError,
    PayloadMismatchError,
)
from .key import extract_business_key
from .runtime import ModelStep, default_user_message

__all__ = [
    "ConfigurationError",
    "DeadLetterError",
    "InvalidAnswerError",
    "LabelNotAllowedError",
    "MissingIdempotencyKeyError",
    "ModelRequestRejectedError",
    "ModelStep",
    "ModelStepError",
    "NonRetryableError",
    "PayloadMismatchError",
    "Settings",
    "default_user_message",
    "extract_business_key",
]
