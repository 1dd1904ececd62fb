"""Lambda entry point ``prospect_classifier.handler.handler``.

Classifies one prospect row (hot / warm / cold, enforced with ``ALLOWED_LABELS``) through the
idempotent model step, then upserts the label onto the row in ``PROSPECTS_TABLE_NAME``.
Environment: everything ``model_step.config`` lists, plus ``PROSPECTS_TABLE_NAME`` (required).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from model_step import ModelStep, prime_for_snapstart

from . import accounting
from .prompt import build_prospect_message
from .store import ProspectStore

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from model_step.outcome import Outcome

store = ProspectStore()


def record_delivery(event: Mapping[str, Any], outcome: Outcome) -> None:
    """The step's ``on_outcome`` hook: upsert a completed classification, then count the
    delivery on the upload ledger. A duplicate delivery replays the stored answer and upserts
    the same values again, so the row converges whichever delivery gets there. Either write
    failing is transient: the retry replays, upserts again, and the ledger counts the row once.
    The upsert comes first so an upload never completes before its last label is stored."""
    if outcome["status"] == "completed":
        store.upsert_classification(event["detail"], outcome["result"])
    accounting.record_outcome(event, outcome)


step = ModelStep.from_environment(
    build_user_message=build_prospect_message, on_outcome=record_delivery
)
prime_for_snapstart()


def handler(event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Classify (a bare EventBridge event or a buffer-queue batch), upserting and counting each
    delivery through ``record_delivery``."""
    return step.handle(event, context)
