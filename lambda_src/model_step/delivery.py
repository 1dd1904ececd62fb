"""One delivery of one event: the state its parts share, and the signal to wait."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyPersistenceLayerError,
)

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
    #: Writes this delivery's billed answer to the key's budget: set by the unit of work when
    #: it returns a result that alone carries that answer's spend (see
    #: :meth:`result_not_saved`); None otherwise.
    report_spend: Callable[[], None] | None = None
    #: The key's stored result, once this delivery wrote or read it: when a hand-off after
    #: it fails (the DLQ send, the result event), the outcome still reports the key's totals
    #: it carries, as the successful hand-off's would (issue 31).
    key_result: Mapping[str, Any] | None = None

    def result_not_saved(self, exc: BaseException) -> bool:
        """The delivery raised ``exc`` after its unit of work returned. When saving the result
        failed (Powertools' ``IdempotencyPersistenceLayerError``), the result that carried
        the billed answer's requests and tokens is lost, so they go to the key's budget
        instead, and the key's totals keep them. True when written; best effort: a failure
        of this write leaves ``exc`` to be reported."""
        report, self.report_spend = self.report_spend, None
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, IdempotencyPersistenceLayerError):
            cause = cause.__cause__ or cause.__context__
        if report is None or cause is None or not self.spend.requests:
            return False
        try:
            report()
        except Exception:  # the original failure is the one to raise
            return False
        return True

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
        the caller; default 0.0, no billed request), and the key's totals when its result,
        or the key's stored result it handed off (``key_result``), carries them."""
        billed = self.spend.requests > 0
        totals: Mapping[str, Any] = result if result is not None else (self.key_result or {})
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
