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
``RowsRequeued`` (a row the buffer queue gave up on, put back with budget left) and
``RowsStaged`` (batch delivery: a row staged for a Message Batch, or found staged).

Logs carry codes and ids (the key's ``record_id``, ``<record prefix>#<hash>``), never the
business key's parts, the row's values or the model's text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

from .config import Settings
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
        self.fields: dict[str, Any] = {
            "prompt_version": settings.prompt_version,
            "model_id": settings.model_id,
            "aws_request_id": getattr(context, "aws_request_id", None),
        }

    def _count(self, name: str, value: int = 1) -> None:
        self._metrics.add_metric(name, MetricUnit.Count, value)

    def counted_dead_letter(self) -> None:
        """This delivery won the key's one count of its dead letter: the metric is written
        NOW, right after the conditional write that won it, not at the end of the delivery,
        so a kill later in the delivery (while its record is saved) cannot lose it."""
        metrics = EphemeralMetrics(namespace=self._namespace, service=self._service)
        metrics.add_metric("NonRetryableFailures", MetricUnit.Count, 1)
        metrics.flush_metrics()

    def spent(self, spend: Spend) -> None:
        if spend.requests:
            self._count("ModelRequests", spend.requests)
        if spend.rate_limited:
            self._count("RateLimited", spend.rate_limited)
        if spend.requests and spend.usage["cache_creation_input_tokens"]:
            self._count("CacheWriteInputTokens", spend.usage["cache_creation_input_tokens"])
        if spend.requests and spend.usage["cache_read_input_tokens"]:
            self._count("CacheReadInputTokens", spend.usage["cache_read_input_tokens"])
        # Only a billed answer reports usage; a zero is left out (a Sum graph reads the same).
        if spend.usage["input_tokens"]:
            self._count("InputTokens", spend.usage["input_tokens"])
        if spend.usage["output_tokens"]:
            self._count("OutputTokens", spend.usage["output_tokens"])

    def interrupted(self) -> None:
        self._count("AttemptsInterrupted")
        self._logger.warning(
            "the previous attempt of this key never reported back (killed after its request "
            "was sent); it stays spent",
            extra={**self.fields, "outcome": "interrupted"},
        )

    def in_progress(self) -> None:
        self._count("ConcurrentDuplicates")
        self._logger.warning(
            "duplicate while another delivery holds the record; it waits",
            extra={**self.fields, "outcome": "in_progress"},
        )

    def waiting(self, status: str, code: str, seconds: float) -> None:
        if status == "requeued":
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
