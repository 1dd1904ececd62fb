"""Constructs that make LLM calls inside event-driven AWS pipelines safe to retry.

- :class:`IdempotentModelStep`: EventBridge -> buffer queue -> Lambda -> model, one
  request per business key, a concurrency cap, a standard DLQ and alarms.
- :class:`EventBusV2`: an EventBridge Custom Event Bus (v2, publish-side dedup) that
  a step can subscribe to.
- :class:`ModelStepDashboard`: one CloudWatch dashboard of one or more steps.
- :class:`RetryBudget`: an aspect that fails synth when a step's retries could
  cost more model requests per delivery than you allow.

Names are imported on first use (PEP 562), so tools that only need part of the
package, such as the ``prospect-uploader`` local run, do not start jsii.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

_EXPORTS = {
    "PropValidationError": "._validation",
    "LocalBundlingError": ".bundling.errors",
    "LocalPipBundling": ".bundling.local_pip",
    "python_lambda_code": ".bundling.local_pip",
    "RESERVED_ENVIRONMENT": ".idempotent_model_step",
    "RESULT_COMPLETED": ".idempotent_model_step",
    "RESULT_DEAD_LETTERED": ".idempotent_model_step",
    "RESERVED_ENVIRONMENT_PREFIXES": ".idempotent_model_step",
    "Effort": ".model_fit",
    "EventBusV2": ".event_bus_v2",
    "EventBusV2Base": ".event_bus_v2",
    "IdempotentModelStep": ".idempotent_model_step",
    "ModelDelivery": ".model_delivery",
    "ModelProvider": ".idempotent_model_step",
    "PromptCache": ".idempotent_model_step",
    "ResultFields": ".result_fields",
    "ModelStepDashboard": ".model_step_dashboard",
    "ModelStepHandler": ".model_step_handler",
    "RetryBudget": ".retry_budget",
    "Thinking": ".model_fit",
}

__all__ = [
    "RESERVED_ENVIRONMENT",
    "RESULT_COMPLETED",
    "RESULT_DEAD_LETTERED",
    "RESERVED_ENVIRONMENT_PREFIXES",
    "Effort",
    "EventBusV2",
    "EventBusV2Base",
    "IdempotentModelStep",
    "LocalBundlingError",
    "LocalPipBundling",
    "ModelDelivery",
    "ModelProvider",
    "ModelStepDashboard",
    "ModelStepHandler",
    "PromptCache",
    "PropValidationError",
    "ResultFields",
    "RetryBudget",
    "Thinking",
    "python_lambda_code",
]

if TYPE_CHECKING:
    from ._validation import PropValidationError
    from .bundling.errors import LocalBundlingError
    from .bundling.local_pip import LocalPipBundling, python_lambda_code
    from .event_bus_v2 import EventBusV2, EventBusV2Base
    from .idempotent_model_step import (
        RESERVED_ENVIRONMENT,
        RESERVED_ENVIRONMENT_PREFIXES,
        RESULT_COMPLETED,
        RESULT_DEAD_LETTERED,
        IdempotentModelStep,
        ModelProvider,
        PromptCache,
    )
    from .model_delivery import ModelDelivery
    from .model_fit import Effort, Thinking
    from .model_step_dashboard import ModelStepDashboard
    from .model_step_handler import ModelStepHandler
    from .result_fields import ResultFields
    from .retry_budget import RetryBudget


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
