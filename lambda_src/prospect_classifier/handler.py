"""Lambda entry point ``prospect_classifier.handler.handler``.

Classifies one prospect row (hot / warm / cold, enforced with ``ALLOWED_LABELS``) through the
idempotent model step, then upserts the label onto the row in ``PROSPECTS_TABLE_NAME``.
Environment: everything ``model_step.config`` lists, plus ``PROSPECTS_TABLE_NAME`` (required).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from model_step import ModelStep

from .prompt import build_prospect_message
from .store import ProspectStore

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

step = ModelStep.from_environment(build_user_message=build_prospect_message)
store = ProspectStore()


def handler(event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Classify, then upsert. A duplicate delivery replays the stored answer and upserts the
    same values again, so the row converges whichever delivery gets there."""
    result = step.handle(event, context)
    if result["status"] == "completed":
        store.upsert_classification(event["detail"], result)
    return result
