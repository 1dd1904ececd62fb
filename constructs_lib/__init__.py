"""Constructs that make LLM calls inside event-driven AWS pipelines safe to retry.

- :class:`IdempotentModelStep`: EventBridge rule -> Lambda -> model, one request per
  business key, with a standard DLQ and alarms.
- :class:`RetryBudget`: an aspect that fails synth when a step's retries could
  cost more model requests per delivery than you allow.
"""

from ._validation import PropValidationError
from .bundling import LocalBundlingError, LocalPipBundling, python_lambda_code
from .idempotent_model_step import RESERVED_ENVIRONMENT, IdempotentModelStep, ModelProvider
from .model_step_handler import ModelStepHandler
from .retry_budget import RetryBudget

__all__ = [
    "RESERVED_ENVIRONMENT",
    "IdempotentModelStep",
    "LocalBundlingError",
    "LocalPipBundling",
    "ModelProvider",
    "ModelStepHandler",
    "PropValidationError",
    "RetryBudget",
    "python_lambda_code",
]
