"""Batch delivery (``MODEL_DELIVERY=batch``): one provider-neutral core, one adapter a provider.

The core, one module a job:

1. **Stage** (:mod:`.batch_staging`): inside the key's record lock the row is written and
   an attempt of its budget claimed, instead of a request.
2. **Submit and reconcile** (:mod:`.batch_submit`): an invocation's rows become a
   submission, sent as one batch with the submission id as the idempotency token; an
   uncertain create is created again (a provider with tokens) or reconciled against the
   provider's list before anything is sent again.
3. **Collect by id** (:mod:`.batch_collect`): each batch on its own; results applied by
   ``custom_id`` through the realtime path (:mod:`.batch_answer`), one line at a time;
   lost batches bounded and alarmed.
4. **Delete** (:mod:`.batch_collect`): each batch is deleted at the provider once its
   results are stored.

The items live in the step's idempotency table (:mod:`.batch_store`, :mod:`.batch_ledger`);
the times and sizes are in :mod:`.batch_limits`. The provider is behind
:class:`~.batch_provider.BatchProvider`: :mod:`.anthropic_batches` for the Claude API's
Message Batches, :mod:`.bedrock_batches` for Amazon Bedrock batch inference (picked by
``MODEL_PROVIDER``).

This module keeps the names the runtime and earlier versions import from it
(``Staged``, ``StagedRow``, ``BatchAnswer``, ``BatchResubmit``, ``is_tick``,
``out_of_time``, ``create_bytes_limit``, ...) and runs the schedule tick.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

from . import batch_limits, clock
from .batch_answer import AnswerRow, BatchAnswer, answer
from .batch_collect import BatchCollector
from .batch_ledger import BatchLedger
from .batch_limits import create_bytes_limit, out_of_time
from .batch_provider import BatchCallFailed, BatchProvider
from .batch_results import Tally
from .batch_signals import (
    TICK_FIELD,
    BatchResubmit,
    Staged,
    StagedDeadLetter,
    StagedRow,
    is_tick,
)
from .batch_staging import BatchStaging
from .batch_store import BatchStore, Item, number, submission_made_at, text
from .batch_submit import BatchSubmitter
from .batch_table import flag, strings
from .client import ModelClientProvider
from .delivery import Delivery
from .outcome import StepResult
from .step_parts import StepParts

__all__ = [
    "AnswerRow",
    "BatchAnswer",
    "BatchDelivery",
    "BatchResubmit",
    "Staged",
    "StagedDeadLetter",
    "StagedRow",
    "create_bytes_limit",
    "is_tick",
    "out_of_time",
]

#: The metric of the oldest open batch (or uncertain create), for its alarm.
OLDEST_OPEN_BATCH_METRIC = "OldestOpenBatchAgeSeconds"
#: The metric of the batches a tick declared lost, for its alarm.
BATCHES_LOST_METRIC = "BatchesLost"
#: The metric of the batches open at a tick (created and not yet collected, and uncertain
#: or refused creates), for the dashboard.
OPEN_BATCHES_METRIC = "OpenBatches"


class BatchDelivery:
    """The batch side of one step (one per container)."""

    def __init__(self, parts: StepParts) -> None:
        self._parts = parts
        settings = parts.settings
        dynamodb = parts.boto3_client("dynamodb")
        table, prefix = settings.idempotency_table_name, settings.record_prefix
        # Every batch item lives the key's memory lifetime after its last write: the runtime
        # refuses one shorter than MAX_EVENT_AGE_SECONDS plus a batch's whole hold
        # (model_step.lifetime.BATCH_HORIZON_SECONDS), so a row outlives every batch that can
        # still answer it.
        lifetime = settings.expires_after_seconds
        self.store = BatchStore(dynamodb, table, prefix, lifetime)
        self.ledger = BatchLedger(dynamodb, table, prefix, lifetime)
        self.provider: BatchProvider
        if settings.model_provider == "bedrock":
            # Issue 37: a model invocation job per submission, its records in S3. Each
            # adapter is imported only by the steps that use it (issue 35: cold starts).
            from .bedrock_batches import BedrockBatches

            self.provider = BedrockBatches(settings, parts.boto3_client)
        else:
            from .anthropic_batches import AnthropicBatches

            self.provider = AnthropicBatches(
                settings, ModelClientProvider(settings, parts.boto3_client)
            )
        self.staging = BatchStaging(parts, self.store, self.provider)
        self.submitter = BatchSubmitter(parts, self.store, self.ledger, self.provider)
        self.collector = BatchCollector(parts, self.store, self.ledger, self.provider)

    # -- the unit of work's side -----------------------------------------------------------
    def custom_id(self, request: dict[str, Any]) -> str:
        """The custom_id of a request's record."""
        return self.staging.custom_id(request)

    def stage(self, request: dict[str, Any], delivery: Delivery, user_message: str) -> NoReturn:
        """See :meth:`.batch_staging.BatchStaging.stage`."""
        self.staging.stage(request, delivery, user_message)

    def answer(self, request: dict[str, Any], delivery: Delivery) -> StepResult:
        """See :func:`.batch_answer.answer`."""
        return answer(self._parts, self.store, request, delivery)

    # -- an invocation's rows --------------------------------------------------------------
    def flush(self, staged: list[StagedRow], context: Any, answer_row: AnswerRow) -> None:
        """Write this invocation's staged rows as pending submissions and send the due ones
        (see :meth:`.batch_submit.BatchSubmitter.flush`)."""
        self.submitter.flush(self.staging.take(), staged, context, answer_row)

    # -- the tick --------------------------------------------------------------------------
    def tick(self, context: Any, answer_row: AnswerRow) -> dict[str, Any]:
        """Reconcile uncertain creates, collect each batch on its own, delete collected
        ones, look at lost ones, and send due submissions; emit the oldest open batch's
        age (measured from the stored creation times, before any provider call) and the
        batches lost. One tick at a time (a lease)."""
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        lease = batch_limits.LEASE_SECONDS if remaining is None else float(remaining()) / 1000
        token = self.ledger.take_lease(lease)
        if token is None:
            return {TICK_FIELD: "busy"}
        tally = Tally()
        summary = {"submitted": 0, "reconciled": 0, "open": 0}
        oldest, open_batches = 0.0, 0
        try:
            opened = [(sid, self.store.submission(sid)) for sid in self.store.open_submissions()]
            oldest, open_batches = self._oldest_open(opened)
            waiting = self._settle_each(opened, context, answer_row, tally, summary)
            self._isolated_housekeeping(context, tally, answer_row)
            if not out_of_time(context):
                summary["submitted"] = self.submitter.submit_pending(waiting, context, answer_row)
            summary["open"] = len(self.store.open_submissions())
        finally:
            self.ledger.release_lease(token)
            self._metrics(oldest, open_batches, tally.lost)
        return {
            TICK_FIELD: {
                **summary,
                "collected": tally.collected,
                "results": tally.results,
                "lost": tally.lost,
                "deleted": tally.deleted,
                "failed_calls": tally.failed_calls,
            }
        }

    def _settle_each(
        self,
        opened: list[tuple[str, Item | None]],
        context: Any,
        answer_row: AnswerRow,
        tally: Tally,
        summary: dict[str, int],
    ) -> list[tuple[str, Item]]:
        """Reconcile, collect or rehome each open submission on its own (one that fails is
        logged and left for the next tick); the pending ones are returned."""
        waiting: list[tuple[str, Item]] = []
        for submission, item in opened:
            if out_of_time(context):
                break
            if item is None:
                # Listed, never written: its writer died between the two writes (its rows
                # are adopted on redelivery), or is between them right now.
                made = submission_made_at(submission)
                if clock.now() - made > batch_limits.ABANDONED_AFTER_SECONDS:
                    self.store.close_submission(submission)
                continue
            if text(item, "state") == "pending":
                waiting.append((submission, item))
                continue
            try:
                summary["reconciled"] += self._settle(submission, item, context, answer_row, tally)
            except BatchCallFailed as failure:  # a reconcile's list failed: the next tick
                self._parts.logger.warning(
                    "batch list failed; the uncertain create is reconciled later",
                    extra={"submission": submission, "error_type": failure.code},
                )
            except Exception as exc:
                self._parts.logger.exception(
                    "batch submission not settled this tick; the next tick tries again",
                    extra={"submission": submission, "error_type": type(exc).__name__},
                )
        return waiting

    def _settle(
        self, submission: str, item: Item, context: Any, answer_row: AnswerRow, tally: Tally
    ) -> int:
        """Reconcile (once its grace is over), collect or rehome one submission; 1 when it
        was reconciled."""
        state = text(item, "state")
        if state == "creating":
            started = number(item, "started_at") or clock.now()
            if clock.now() - started >= self.collector.lost_open_after:
                self.collector.lose_uncertain(submission, item, context, answer_row, tally)
                return 0
            if clock.now() - started < batch_limits.RECONCILE_AFTER_SECONDS:
                return 0
            self.submitter.reconcile(submission, item, context, answer_row)
            return 1
        if state == "created":
            self.collector.collect(submission, item, context, answer_row, tally)
        elif (
            state == "realtime"
            and clock.now() - (number(item, "started_at") or 0.0)
            < batch_limits.RECONCILE_AFTER_SECONDS
        ):
            return 0  # its rows may still be in flight in the invocation that sends them
        else:
            self.submitter.rehome(submission, item)
        return 0

    def _isolated_housekeeping(self, context: Any, tally: Tally, answer_row: AnswerRow) -> None:
        """Deletes that failed before, and lost batches looked at again, each isolated: one
        that fails is logged, and the next tick tries again."""
        steps: list[Callable[[list[str], list[str]], None]] = [
            lambda deleting, late: self.collector.delete_collected(deleting, context, tally),
            lambda deleting, late: self.collector.poll_late(late, context, answer_row, tally),
        ]
        lists: tuple[list[str], list[str]] | None = None
        for step in steps:
            try:
                lists = lists or self.ledger.ledger()
                step(*lists)
            except Exception as exc:
                self._parts.logger.exception(
                    "batch housekeeping failed; the next tick tries again",
                    extra={"error_type": type(exc).__name__},
                )

    def _oldest_open(self, opened: list[tuple[str, Item | None]]) -> tuple[float, int]:
        """Seconds since the oldest uncollected batch was created (or the oldest uncertain
        create started), and how many are open, from the stored items alone: true whether
        or not the provider answers."""
        now = clock.now()
        ages: list[float] = []
        for _submission, item in opened:
            if item is None:
                continue
            state = text(item, "state")
            if state == "creating":
                ages.append(now - (number(item, "started_at") or now))
            if state == "pending" and number(item, "refused_since") is not None:
                # creates refused since then (a key problem, say)
                ages.append(now - (number(item, "refused_since") or now))
            if state != "created":
                continue
            for batch_id in strings(item, "batch_ids"):
                record = self.ledger.batch(batch_id) or {}
                if not flag(record, "collected"):
                    ages.append(now - (number(record, "created_at") or now))
        return max(ages, default=0.0), len(ages)

    def _metrics(self, oldest: float, open_batches: int, lost: int) -> None:
        settings = self._parts.settings
        metrics = EphemeralMetrics(
            namespace=settings.metrics_namespace, service=settings.service_name
        )
        metrics.add_metric(OLDEST_OPEN_BATCH_METRIC, MetricUnit.Seconds, round(oldest, 3))
        metrics.add_metric(OPEN_BATCHES_METRIC, MetricUnit.Count, open_batches)
        metrics.add_metric(BATCHES_LOST_METRIC, MetricUnit.Count, lost)
        metrics.flush_metrics()
