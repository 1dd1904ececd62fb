"""One delivery of one event: the state its parts share, and the signal to wait."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from .buffer_queue import QueueDelivery
from .delivery_log import DeliveryLog
from .model_call import Spend
from .outcome import DeliveryStatus, Outcome, StepResult, Usage, zero_usage

IN_PROGRESS_ERROR = "IdempotencyAlreadyInProgressError"


class Wait(Exception):
    """Raised inside the unit of work so the lock is released and the row waits ``seconds``
    on the buffer queue as a delayed copy; no attempt is spent."""

    def __init__(
        self, status: DeliveryStatus, code: str, seconds: float, *, counted: bool = True
    ) -> None:
        super().__init__(code)
        self.status = status
        self.code = code
        self.seconds = seconds
        #: False for a redrive message put back again (its first try was counted).
        self.counted = counted


@dataclass
class Delivery:
    """Per-delivery state shared with the idempotent functions (one per delivery)."""

    event: Mapping[str, Any]
    context: Any
    log: DeliveryLog
    queue: QueueDelivery | None = None
    request: dict[str, Any] | None = None  # {"key": RecordKey, "detail": canonical detail}
    #: The record id of ``request`` (set with it).
    record_id: str | None = None
    #: The key's first-seen time, as far as this delivery knows it: stamped on the copy it
    #: carries (:func:`.lifetime.stamped_first_seen`), then read from the key's budget.
    #: Re-enqueued copies carry it on.
    first_seen: float | None = None
    spend: Spend = field(default_factory=Spend)
    attempts_spent: int = 0
    ran: bool = False  # the unit of work ran
    sent_dead_letter: bool = False
    counted_dead_letter: bool = False
    #: Message Batches delivery (issue 19): the batch result this delivery stores, if any
    #: (a ``model_step.batch.BatchAnswer``).
    batch_answer: Any = None

    @property
    def replayed(self) -> bool:
        """The result came from stored records: no request, no DLQ message."""
        return not self.ran and not self.sent_dead_letter

    def outcome(
        self,
        status: DeliveryStatus,
        result: StepResult | None,
        code: str | None,
        *,
        cost_usd: float | None = 0.0,
    ) -> Outcome:
        """What ``on_outcome`` gets for this delivery: its own cost (``cost_usd``, priced by
        the caller; default 0.0, no billed request), and the key's totals when its result
        carries them."""
        billed = self.spend.requests > 0
        totals: Mapping[str, Any] = result if result is not None else {}
        key_usage = totals.get("key_usage")
        return Outcome(
            status=status,
            replayed=result is not None and self.replayed,
            model_requests=1 if billed else 0,
            rate_limited=1 if self.spend.rate_limited else 0,
            usage=Usage(**self.spend.usage) if billed else zero_usage(),
            result=result,
            error_code=code,
            key_record_id=self.record_id,
            key_model_requests=totals.get("key_model_requests"),
            key_usage=None if key_usage is None else cast(Usage, dict(key_usage)),
            cost_usd=cost_usd,
            key_cost_usd=totals.get("key_cost_usd"),
        )
