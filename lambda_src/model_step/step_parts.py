"""What the unit of work and the batch path use of a step's parts, as Protocols.

``components.StepComponents`` builds the unit of work (``work``) and the batch path
(``batch``), and both use the components back. Naming ``StepComponents`` for that, even
for type checking only, closed an import cycle (``components -> work -> components``,
``components -> batch -> components``). These Protocols sit below all three instead:
``StepComponents`` satisfies them structurally, and nothing here imports it. The result
event's hand-off (``result_hand_off``) reads the components through :class:`HandOffParts`
for the same reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger

    from .budget import AttemptBudget
    from .config import Settings
    from .dead_letter import DeadLetterPublisher
    from .delivery import Delivery
    from .errors import NonRetryableError
    from .hand_off_item import HandOffItem
    from .model_call import ModelCall
    from .outcome import DeadLetteredResult, StepResult
    from .result_events import ResultPublisher
    from .tracing import StepTracer


class RecordIds(Protocol):
    """The record key's id, as Powertools' persistence layer builds it."""

    def record_id(self, data: dict[str, Any]) -> str: ...


class BatchSide(Protocol):
    """The batch delivery, as the unit of work calls it."""

    def answer(self, request: dict[str, Any], delivery: Delivery) -> StepResult: ...

    def stage(self, request: dict[str, Any], delivery: Delivery, user_message: str) -> NoReturn: ...


class DeadLettering(Protocol):
    """The unit of work's dead letters, as the batch path asks for them."""

    def dead_letter(
        self, error: NonRetryableError, key: Mapping[str, Any] | None, dead_key: dict[str, Any]
    ) -> DeadLetteredResult: ...


class StepParts(Protocol):
    """A step's parts (``components.StepComponents``), read-only."""

    @property
    def settings(self) -> Settings: ...

    @property
    def logger(self) -> Logger: ...

    @property
    def tracer(self) -> StepTracer: ...

    @property
    def model_call(self) -> ModelCall: ...

    @property
    def dead_letters(self) -> DeadLetterPublisher: ...

    @property
    def result_events(self) -> ResultPublisher | None: ...

    @property
    def persistence(self) -> RecordIds: ...

    @property
    def work(self) -> DeadLettering: ...

    @property
    def batch(self) -> BatchSide | None: ...

    def hand_off(self, *, request: dict[str, Any], delivery: Delivery) -> dict[str, Any]: ...

    def budget(self, request: dict[str, Any], first_seen: float | None = None) -> AttemptBudget: ...

    def hand_off_counter(self, request: dict[str, Any]) -> AttemptBudget: ...

    def hand_off_item(self, request: dict[str, Any]) -> HandOffItem: ...

    def dead_letter_id(self, dead_key: dict[str, Any]) -> str: ...

    def boto3_client(self, service_name: str) -> Any: ...


class StoredResults(Protocol):
    """The idempotency records' stored results, as a redrive republishes them."""

    def stored_result_of(self, record_id: str) -> dict[str, Any] | None: ...


class ResultDeadLettering(DeadLettering, Protocol):
    """The unit of work's dead letters, as the result event's hand-off sends them."""

    def hand_off_result(
        self,
        result: DeadLetteredResult,
        dead_key: dict[str, Any],
        delivery: Delivery,
        *,
        record_id: str | None = None,
    ) -> DeadLetteredResult: ...


class HandOffParts(Protocol):
    """What the result event's hand-off (``result_hand_off.ResultHandOff``) uses of a
    step's parts, read-only."""

    @property
    def settings(self) -> Settings: ...

    @property
    def result_events(self) -> ResultPublisher | None: ...

    @property
    def persistence(self) -> StoredResults: ...

    @property
    def work(self) -> ResultDeadLettering: ...

    def result_event_item(self, request: dict[str, Any]) -> HandOffItem: ...

    def budget(self, request: dict[str, Any], first_seen: float | None = None) -> AttemptBudget: ...

    def publish_result(self, *, request: dict[str, Any], delivery: Delivery) -> Any: ...
