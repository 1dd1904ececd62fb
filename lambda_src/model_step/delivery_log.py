"""The delivery log: one structured log line and the EMF metrics of each delivery.

Metrics (namespace ``POWERTOOLS_METRICS_NAMESPACE``, dimension ``service``):
``ModelRequests`` and ``RateLimited`` (what the delivery's model call cost), ``InputTokens``
and ``OutputTokens`` (the billed request's usage, when it reported any),
``CacheWriteInputTokens`` and ``CacheReadInputTokens`` (the billed request's prompt-cache
usage: ``cache_creation_input_tokens`` and ``cache_read_input_tokens``),
``DuplicatesSuppressed`` (answered from a stored record), ``ConcurrentDuplicates`` (waited for
a holder), ``TransientFailures``, ``AttemptsInterrupted`` (the previous attempt of the key
never reported back: a kill, timeout or out-of-memory after its request was sent),
``NonRetryableFailures`` (once per dead-lettered key, however many DLQ messages it took) and
``RowsRequeued`` (a row the buffer queue gave up on, put back with budget left, once per
redrive message), ``RowsStaged`` (batch delivery: a row staged for a Message Batch, or
found staged), ``ResultEventsUncertain`` (a key's result event that an earlier delivery
was about to publish and never recorded: it may or may not be on the bus, and is not
published again) and ``ConfigurationErrors`` (a delivery refused by the step's own table,
queue or secret: :mod:`.misconfiguration`).

What is spent is written where it is spent, not at the end of the delivery, which a killed
one never reaches: ``ModelRequests``, ``RateLimited`` and the token counts right after the
request is answered or fails (:meth:`DeliveryLog.spent`, once per delivery),
``AttemptsInterrupted`` the moment a delivery finds an interrupted attempt, and
``NonRetryableFailures`` right after the write that won the key's one count. The rest are
written by :meth:`DeliveryLog.flush` at the end.

Logs carry codes and ids (the key's ``record_id``, ``<record prefix>#<hash>``), never the
business key's parts, the row's values or the model's text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

from .config import Settings
from .misconfiguration import DeniedCall
from .model_call import Spend
from .outcome import StepResult


class DeliveryLog:
    """Collects one delivery's metrics and writes its log lines; :meth:`flush` once."""

    def __init__(self, settings: Settings, logger: Logger, context: Any) -> None:
        self._logger = logger
        self._namespace = settings.metrics_namespace
        self._service = settings.service_name
        self._metrics = EphemeralMetrics(
            namespace=settings.metrics_namespace, service=settings.service_name
        )
        self._spent_written = False
        self.fields: dict[str, Any] = {
            "prompt_version": settings.prompt_version,
            "model_id": settings.model_id,
            "aws_request_id": getattr(context, "aws_request_id", None),
        }

    def _count(self, name: str, value: int = 1, into: EphemeralMetrics | None = None) -> None:
        """Add ``value`` to ``name`` in the delivery's metrics, or in ``into``."""
        (self._metrics if into is None else into).add_metric(name, MetricUnit.Count, value)

    def _now(self) -> EphemeralMetrics:
        """Metrics to write at once (:meth:`_write`), apart from :meth:`flush`."""
        return EphemeralMetrics(namespace=self._namespace, service=self._service)

    @staticmethod
    def _write(metrics: EphemeralMetrics) -> None:
        if metrics.metric_set:  # an empty flush warns
            metrics.flush_metrics()

    def counted_dead_letter(self) -> None:
        """This delivery won the key's one count of its dead letter: the metric is written
        NOW, right after the conditional write that won it, not at the end of the delivery,
        so a kill later in the delivery (while its record is saved) cannot lose it."""
        now = self._now()
        self._count("NonRetryableFailures", 1, now)
        self._write(now)

    def spent(self, spend: Spend) -> None:
        """Write what the delivery's model call cost, NOW and once: the unit of work calls it
        as soon as the request is answered or fails, so a kill later in the delivery (its
        save, the DLQ hand-off, the result event) cannot lose a billed request; a second
        call (the end of the delivery) writes nothing."""
        if self._spent_written:
            return
        self._spent_written = True
        now = self._now()
        if spend.requests:
            self._count("ModelRequests", spend.requests, now)
        if spend.rate_limited:
            self._count("RateLimited", spend.rate_limited, now)
        if spend.requests and spend.usage["cache_creation_input_tokens"]:
            self._count("CacheWriteInputTokens", spend.usage["cache_creation_input_tokens"], now)
        if spend.requests and spend.usage["cache_read_input_tokens"]:
            self._count("CacheReadInputTokens", spend.usage["cache_read_input_tokens"], now)
        # Only a billed answer reports usage; a zero is left out (a Sum graph reads the same).
        if spend.usage["input_tokens"]:
            self._count("InputTokens", spend.usage["input_tokens"], now)
        if spend.usage["output_tokens"]:
            self._count("OutputTokens", spend.usage["output_tokens"], now)
        self._write(now)

    def interrupted(self) -> None:
        """The key's previous attempt never reported back. Called once per such attempt (the
        claim that replaced it, or the one delivery that settled it) and written NOW: the
        delivery that finds it may itself be killed."""
        now = self._now()
        self._count("AttemptsInterrupted", 1, now)
        self._write(now)
        self._logger.warning(
            "the previous attempt of this key never reported back (killed after its request "
            "was sent); it stays spent",
            extra={**self.fields, "outcome": "interrupted"},
        )

    def result_event_uncertain(self, bus_kind: str, intent_age: float) -> None:
        """An earlier delivery meant to publish the key's result event and never recorded
        the outcome; nothing is published again (at most once). Written NOW."""
        now = self._now()
        self._count("ResultEventsUncertain", 1, now)
        self._write(now)
        self._logger.warning(
            "the key's result event may or may not be on the bus: an earlier delivery was "
            "about to publish it and never recorded the outcome; it is not published again",
            extra={
                **self.fields,
                "outcome": "result_event_uncertain",
                "bus_kind": bus_kind,
                "intent_age_s": round(intent_age, 3),
            },
        )

    def in_progress(self) -> None:
        self._count("ConcurrentDuplicates")
        self._logger.warning(
            "duplicate while another delivery holds the record; it waits",
            extra={**self.fields, "outcome": "in_progress"},
        )

    def waiting(self, status: str, code: str, seconds: float, *, counted: bool = True) -> None:
        """A wait; ``counted`` False: a row put back by a redrive message already counted."""
        if status == "requeued" and counted:
            self._count("RowsRequeued")
        self._logger.warning(
            "rate limited; the row waits"
            if status == "rate_limited"
            else "the buffer queue gave up on the row; it goes back with budget left",
            extra={**self.fields, "outcome": status, "error_type": code, "wait_s": seconds},
        )

    def batched(self, code: str) -> None:
        """Message Batches delivery (issue 19): no request now; the key waits in a batch
        (``Staged``: staged now or by another delivery; else the result type it goes
        again for)."""
        if code == "Staged":
            self._count("RowsStaged")
        self._logger.info(
            "the row waits in a Message Batch",
            extra={**self.fields, "outcome": "batch", "error_type": code},
        )

    def transient(self, code: str, request_id: str | None) -> None:
        self._count("TransientFailures")
        self._logger.warning(
            "transient failure; raising so the delivery is retried",
            extra={**self.fields, "outcome": "retry", "error_type": code, "request_id": request_id},
        )

    def configuration_error(self, call: DeniedCall, *, first: bool) -> None:
        """The deployment refused a call of the step (:mod:`.misconfiguration`): counted on
        every delivery, logged (ERROR) only when ``first`` in this container for its action
        and resource. The row is left to be retried; nothing is stored for its key."""
        self._count("ConfigurationErrors")
        if not first:
            return
        self._logger.error(
            f"configuration error: the step may not call {call.action} on {call.resource} "
            f"({call.code}); the row is left to be retried once the deployment is fixed "
            "(logged once per container)",
            extra={
                **self.fields,
                "outcome": "configuration_error",
                "error_type": call.code,
                "action": call.action,
                "resource": call.resource,
            },
        )

    def finished(
        self, result: StepResult, *, replayed: bool, sent: bool = False, counted: bool = False
    ) -> None:
        """A terminal result: stored now, or replayed; for a dead letter, whether this
        delivery sent a DLQ message and whether it was the one that counted the key."""
        fields: Mapping[str, Any] = {**self.fields, "request_id": result.get("request_id")}
        if result["status"] == "completed":
            if replayed:
                self._count("DuplicatesSuppressed")
            self._logger.info(
                "duplicate suppressed" if replayed else "model answer stored",
                extra={**fields, "outcome": "duplicate" if replayed else "completed"},
            )
            return
        extra = {
            **fields,
            "error_code": result["error_code"],
            "dead_letter_id": result.get("dead_letter_id"),
        }
        if counted:
            self._logger.error(
                "non-retryable failure sent to dead-letter queue",
                extra={
                    **extra,
                    "outcome": "dead_lettered",
                    "error_message": result["error_message"],
                    "dead_letter_message_id": result.get("dead_letter_message_id"),
                },
            )
        elif sent:
            self._logger.warning(
                "dead letter sent again (an earlier delivery sent it and was interrupted); "
                "the key is counted once",
                extra={**extra, "outcome": "dead_letter_resent"},
            )
        else:
            self._count("DuplicatesSuppressed")
            self._logger.info(
                "duplicate of a dead-lettered event suppressed",
                extra={**extra, "outcome": "duplicate"},
            )

    def flush(self) -> None:
        # Only flush when something was recorded: an empty flush warns.
        if self._metrics.metric_set:
            self._metrics.flush_metrics()
