"""What one budget item holds (:class:`BudgetState`) and a claim's answer (:class:`Claim`).

The item, its fields and its lifetime are described in :mod:`.budget`, which reads and
writes it; this module only turns an item into numbers, so the batch path and the unit of
work can read a state without the writer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import clock
from .outcome import Usage, zero_usage

INTERRUPTED = "AttemptInterrupted"
#: The last error of an attempt whose answer was billed and whose result could not be saved:
#: its requests and tokens are kept here instead (``Delivery.result_not_saved``).
RESULT_NOT_SAVED = "ResultNotSaved"
#: The token counts an item keeps, as :class:`~.outcome.Usage` names them.
TOKEN_FIELDS = tuple(Usage.__annotations__)


@dataclass(frozen=True)
class BudgetState:
    """The budget item as read or written."""

    attempts: int = 0
    first_seen: float | None = None
    interrupted: bool = False
    last_error: str | None = None
    rate_limited: int = 0
    requeues: int = 0
    #: The token of the claim that never reported back (``interrupted``), if any.
    pending: str | None = None
    #: Claimed attempts the provider did not bill.
    unbilled: int = 0
    #: Tokens of billed answers that were retried.
    usage: Usage = field(default_factory=zero_usage)
    #: What those answers cost, in billionths of a US dollar at the prices they were billed
    #: at (issue 32; 0 without a price).
    cost_nanousd: int = 0

    @property
    def billed_requests(self) -> int:
        """The key's billed requests so far: claimed attempts less the unbilled ones."""
        return max(0, self.attempts - self.unbilled)

    @property
    def exhaustion_code(self) -> str:
        """The code of a used-up budget: the last attempt's failure."""
        if self.interrupted or not self.last_error:
            return INTERRUPTED
        return self.last_error

    def age_seconds(self, now: float) -> float:
        """Seconds since the step first saw the row (0 when it never did)."""
        return 0.0 if self.first_seen is None else max(0.0, now - self.first_seen)

    @classmethod
    def from_item(cls, item: dict[str, Any] | None, now: float | None = None) -> BudgetState:
        """The state an item holds; an item past its ``expiration`` holds none."""
        item = item or {}
        if expired(item, clock.now() if now is None else now):
            return cls()
        return cls(
            attempts=_number(item.get("attempts")),
            first_seen=float(item["first_seen"]["N"]) if "first_seen" in item else None,
            interrupted="pending" in item,
            last_error=item.get("last_error", {}).get("S"),
            rate_limited=_number(item.get("rate_limited")),
            requeues=_number(item.get("requeues")),
            pending=item.get("pending", {}).get("S"),
            unbilled=_number(item.get("unbilled")),
            usage=_usage(item),
            cost_nanousd=_number(item.get("cost_nanousd")),
        )


@dataclass(frozen=True)
class Claim:
    """The answer to :meth:`AttemptBudget.claim`."""

    granted: bool
    #: Granted: the state after the claim (``attempts`` includes it; ``interrupted`` says
    #: whether the previous attempt never reported back). Denied: the state found.
    state: BudgetState


def expired(item: dict[str, Any], now: float) -> bool:
    expiration = item.get("expiration", {}).get("N")
    return expiration is not None and float(expiration) < now


def _usage(item: dict[str, Any]) -> Usage:
    return Usage(
        input_tokens=_number(item.get("input_tokens")),
        output_tokens=_number(item.get("output_tokens")),
        cache_creation_input_tokens=_number(item.get("cache_creation_input_tokens")),
        cache_read_input_tokens=_number(item.get("cache_read_input_tokens")),
    )


def _number(attribute: dict[str, str] | None) -> int:
    return int(float(attribute["N"])) if attribute and "N" in attribute else 0
