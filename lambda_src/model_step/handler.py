"""Default Lambda entry point: ``model_step.handler.handler``.

The user message is the event detail as sorted-key JSON and the answer is stored as is
(checked against ``ALLOWED_LABELS`` when set). For your own prompt building or parsing, build
a ``ModelStep`` in your own module the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .runtime import ModelStep
from .snapstart import prime_for_snapstart

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

# Module level so it lives for the container; it reads the environment on first use only.
step = ModelStep.from_environment()
# Under SnapStart, import the SDK now, inside the snapshot (a no-op on demand).
prime_for_snapstart()


def handler(event: Mapping[str, Any], context: LambdaContext) -> Any:
    """Lambda handler: one idempotent model call per EventBridge event."""
    return step.handle(event, context)
