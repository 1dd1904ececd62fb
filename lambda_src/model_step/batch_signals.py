"""What the realtime path knows of batch delivery, without importing it.

A realtime step never stages, submits or collects a batch, so it never imports
:mod:`.batch` and the modules behind it (about 3,400 lines, the Bedrock adapter among them):
that is part of a cold start's import time (issue 35). The runtime and the unit of work still
name a few things of the batch path on every event: the schedule's tick event, the exceptions
a batch delivery raises through the unit of work, and the dead letter of a spent budget. They
live here, and :mod:`.batch` re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .budget_state import Claim
from .errors import NonRetryableError, RetriesExhaustedError

#: The ``{"model_step_batch": "tick"}`` schedule event's key and value.
TICK_FIELD = "model_step_batch"
TICK_VALUE = "tick"


def is_tick(event: Any) -> bool:
    """True for the schedule's ``{"model_step_batch": "tick"}`` event."""
    return hasattr(event, "get") and event.get(TICK_FIELD) == TICK_VALUE


class Staged(Exception):
    """Raised inside the unit of work: the row is staged (``new``) or already staged by
    another delivery; no request was made and nothing is stored."""

    def __init__(self, custom_id: str, *, new: bool) -> None:
        super().__init__("staged for a batch")
        self.custom_id = custom_id
        self.new = new


class StagedDeadLetter(Exception):
    """Raised by :meth:`.batch_staging.BatchStaging.stage` when the key's budget is spent:
    the unit of work stores the dead letter it carries."""

    def __init__(self, error: NonRetryableError) -> None:
        super().__init__(error.error_code)
        self.error = error


@dataclass
class StagedRow:
    """A row this invocation staged: its custom_id and when it was first enqueued."""

    custom_id: str
    sent_at: float


class BatchResubmit(Exception):
    """Raised inside the unit of work for a batch result that is sent again (or was applied
    already): nothing is stored."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.error_code = code


def exhausted(claim: Claim) -> RetriesExhaustedError:
    """The dead letter of a key whose budget is spent: the last attempt's code."""
    state = claim.state
    return RetriesExhaustedError(
        f"the key's budget of attempts is spent ({state.attempts} used); the last one "
        f"ended with {state.exhaustion_code}",
        error_code=state.exhaustion_code,
    )
