"""Collect: each batch's results are applied by ``custom_id``, one batch and one line at a time.

Each batch of a created submission is collected on its own (:meth:`BatchCollector.collect`):

- its status is read; a call that fails (429, 5xx, a dropped connection, a 401 a fresh key
  did not cure) is recorded on the batch, which is tried again on its own schedule
  (:func:`.batch_limits.backoff_seconds`) while every other batch is collected;
- a batch the provider does not know (404: deleted, or its key moved to another Workspace)
  for :data:`~.batch_limits.LOST_UNKNOWN_SECONDS`, or still open
  :data:`~.batch_limits.LOST_OPEN_SECONDS` after its creation, is **lost**: its rows go back
  within their budget or are dead-lettered ``BatchLost`` (:mod:`.batch_answer`), the tick
  counts it in ``BatchesLost`` (alarmed), and it is still looked at until its results would
  be archived, so a billed answer that arrives late is stored;
- a batch this step created still open :data:`~.batch_limits.CANCEL_AFTER_SECONDS` after
  its creation is canceled (an adopted one never is: it may be another workload's);
- an ended batch's results are applied by ``custom_id`` (:mod:`.batch_results`); a batch
  whose lines did not all apply is read again next tick;
- once every line is applied the batch is deleted at the provider (listed first, so a
  failed delete is tried again by later ticks), unless it was adopted and holds requests
  of others.

When every batch of a submission is collected, its rows still waiting go again in a new
submission: a row whose claim no result used (it was in no batch) without a new claim, the
others claiming one (:func:`.batch_answer.answer`, ``resubmit``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from . import batch_limits, clock
from .batch_answer import AnswerRow, BatchAnswer
from .batch_ledger import BatchLedger
from .batch_provider import BatchCallFailed, BatchProvider
from .batch_results import ResultReader, Tally, claim_open
from .batch_store import BatchStore, Item, number, text
from .batch_table import flag, strings
from .model_call import error_code
from .step_parts import StepParts


@dataclass(frozen=True)
class Visit:
    """One tick's look at one batch of one created submission."""

    batch_id: str
    record: Item
    submission: str
    item: Item
    context: Any
    answer_row: AnswerRow
    tally: Tally


class BatchCollector:
    """Collects the batches of created submissions (see the module docstring)."""

    def __init__(
        self, parts: StepParts, store: BatchStore, ledger: BatchLedger, provider: BatchProvider
    ) -> None:
        self._parts = parts
        self._store = store
        self._ledger = ledger
        self._provider = provider
        self._reader = ResultReader(parts, store, provider)

    @property
    def lost_open_after(self) -> float:
        """Seconds after its creation a batch still open is lost: the provider's lifetime
        plus the margin (:func:`.batch_limits.lost_open_after`)."""
        return batch_limits.lost_open_after(self._provider.quotas.lifetime_seconds)

    # -- one submission --------------------------------------------------------------------
    def collect(
        self, submission: str, item: Item, context: Any, answer_row: AnswerRow, tally: Tally
    ) -> None:
        """Collect each of the submission's batches on its own; when all are collected, its
        waiting rows go again."""
        all_done = True
        for batch_id in strings(item, "batch_ids"):
            if batch_limits.out_of_time(context):
                return
            record = self._ledger.batch(batch_id) or {}
            if flag(record, "collected"):
                continue
            visit = Visit(batch_id, record, submission, item, context, answer_row, tally)
            all_done = self._collect_one(visit) and all_done
        if all_done and not batch_limits.out_of_time(context):
            self._resubmit_leftovers(submission, item, context, answer_row)

    def _collect_one(self, visit: Visit) -> bool:
        """One uncollected batch, on its own schedule: True once it is done with."""
        created = number(visit.record, "created_at") or clock.now()
        if clock.now() - created >= self.lost_open_after:
            # Not collected in its time, whatever the reason (open, canceled and never
            # ended, unknown, failing): decided from the stored time, no call needed.
            return self._lose(visit)
        if (number(visit.record, "retry_at") or 0.0) > clock.now():
            return False  # tried again later
        try:
            return self._collect_batch(visit)
        except BatchCallFailed as failure:
            self._failed(visit.batch_id, failure, visit.tally)
            return False

    def _collect_batch(self, visit: Visit) -> bool:
        """One batch: True once it is collected (or lost), False while it is open."""
        batch_id, record = visit.batch_id, visit.record
        try:
            status = self._provider.status(batch_id)
        except BatchCallFailed as failure:
            if not failure.gone:
                raise
            since = self._ledger.note_missing(batch_id)
            self._parts.logger.warning("batch not found", extra={"batch_id": batch_id})
            if clock.now() - since < batch_limits.LOST_UNKNOWN_SECONDS:
                return False
            return self._lose(visit)
        self._ledger.note_seen(record, batch_id)
        if status.phase != "ended":
            age = clock.now() - status.created_at
            lifetime = self._provider.quotas.lifetime_seconds
            if age >= batch_limits.cancel_after(lifetime) and status.phase == "open":
                self._cancel_stuck(batch_id, record)
            return False
        owners = {visit.submission, *strings(record, "submissions")}
        members = None
        if self._ledger.adopted(record):
            members = set(self._store.custom_ids(visit.submission, visit.item))
        finished, foreign = self._reader.read(
            batch_id, owners, members, visit.context, visit.answer_row, visit.tally
        )
        if not finished:
            return False
        self._ledger.collected(batch_id, delete=not foreign)
        visit.tally.collected += 1
        self._parts.logger.info("batch collected", extra={"batch_id": batch_id})
        if not foreign:
            self.delete(batch_id, visit.tally)
        return True

    def _cancel_stuck(self, batch_id: str, record: Item) -> None:
        if self._ledger.adopted(record):
            # It may be another workload's batch on the same API key: it is left alone, and
            # its age keeps OldestOpenBatchAlarm firing.
            self._parts.logger.warning(
                "adopted batch open past its 24 h: not canceled", extra={"batch_id": batch_id}
            )
            return
        self._provider.cancel(batch_id)
        self._parts.logger.warning(
            "batch open past its 24 h canceled", extra={"batch_id": batch_id}
        )

    def _failed(self, batch_id: str, failure: BatchCallFailed, tally: Tally) -> None:
        tally.failed_calls += 1
        retry_at = self._ledger.note_failure(batch_id, failure.code, failure.retry_after)
        self._parts.logger.warning(
            "batch call failed; this batch is tried again on its own",
            extra={
                "batch_id": batch_id,
                "error_type": failure.code,
                "retry_in": round(retry_at - clock.now(), 1),
            },
        )

    # -- results ---------------------------------------------------------------------------
    def _lose(self, visit: Visit) -> bool:
        """The batch is lost: each row it holds uses its claim (resubmitted, or a dead
        letter ``BatchLost``); then it is marked lost. A row that fails keeps the batch as
        it is, and the next tick tries again (rows done already are skipped)."""
        batch_id = visit.batch_id
        if not self._lose_rows(
            visit.submission, visit.item, batch_id, visit.context, visit.answer_row
        ):
            return False
        self._ledger.lose(batch_id, number(visit.record, "created_at") or clock.now())
        visit.tally.lost += 1
        self._parts.logger.warning("batch lost: its rows went back", extra={"batch_id": batch_id})
        return True

    def lose_uncertain(
        self, submission: str, item: Item, context: Any, answer_row: AnswerRow, tally: Tally
    ) -> None:
        """An uncertain create that no reconciliation settled in
        :data:`~.batch_limits.LOST_OPEN_SECONDS` (the provider's list keeps failing): its
        rows are settled as a lost batch's, then the submission is collected with no batch,
        so they go again."""
        if not self._lose_rows(submission, item, None, context, answer_row):
            return
        if self._store.transition(submission, "creating", "created", batch_ids=[]):
            tally.lost += 1
            self._parts.logger.warning(
                "uncertain batch create lost: its rows went back",
                extra={"submission": submission},
            )

    def _lose_rows(
        self,
        submission: str,
        item: Item,
        batch_id: str | None,
        context: Any,
        answer_row: AnswerRow,
    ) -> bool:
        """Each waiting row of the submission whose claim is unused uses it as a lost
        batch's (:func:`.batch_answer.answer`); False when one of them failed."""
        done = True
        for custom_id, row in self._store.rows(self._store.custom_ids(submission, item)):
            if text(row, "state") != "staged" or text(row, "submission") != submission:
                continue
            if not claim_open(row):
                continue
            event = json.loads(text(row, "event") or "{}")
            try:
                if answer_row(event, BatchAnswer(kind="lost", batch_id=batch_id), context):
                    self._store.mark_answered(custom_id)
            except Exception as exc:
                self._parts.logger.warning(
                    "a row of a lost batch is not settled yet",
                    extra={"batch_id": batch_id, "error_type": error_code(exc)},
                )
                done = False
        return done

    def poll_late(self, late: list[str], context: Any, answer_row: AnswerRow, tally: Tally) -> None:
        """Look at each lost batch again: once it has ended, its billed answers are stored
        (where their rows still wait), and it is deleted; given up once its results would
        be archived."""
        for batch_id in late:
            if batch_limits.out_of_time(context):
                return
            record = self._ledger.batch(batch_id)
            created = number(record or {}, "created_at") or 0.0
            if record is None or clock.now() >= created + batch_limits.RESULTS_KEPT_SECONDS:
                self._ledger.late_done(batch_id)
                continue
            if (number(record, "retry_at") or 0.0) > clock.now():
                continue
            try:
                status = self._provider.status(batch_id)
                if status.phase == "ended":
                    finished, _ = self._reader.read(
                        batch_id, set(), None, context, answer_row, tally, late=True
                    )
                    if finished:
                        self._ledger.late_done(batch_id)
                        if not self._ledger.adopted(record):
                            self.delete(batch_id, tally)
                        continue
            except BatchCallFailed as failure:
                if not failure.gone:  # a lost batch may stay unknown: that is no failure
                    tally.failed_calls += 1
            self._ledger.defer(batch_id, clock.now() + batch_limits.LATE_POLL_SECONDS)

    # -- delete at the provider ------------------------------------------------------------
    def delete(self, batch_id: str, tally: Tally) -> None:
        """Delete a collected batch at the provider (its prompts are row values); a failure
        leaves it listed for a later tick."""
        try:
            self._provider.delete(batch_id)
        except BatchCallFailed as failure:
            self._parts.logger.warning(
                "batch not deleted yet", extra={"batch_id": batch_id, "error_type": failure.code}
            )
            return
        self._ledger.deleted(batch_id)
        tally.deleted += 1

    def delete_collected(self, deleting: list[str], context: Any, tally: Tally) -> None:
        """Delete the collected batches whose delete failed before (until their results
        would be archived at the provider anyway)."""
        for batch_id in deleting:
            if batch_limits.out_of_time(context):
                return
            record = self._ledger.batch(batch_id)
            created = number(record or {}, "created_at") or 0.0
            if record is None or clock.now() >= created + batch_limits.RESULTS_KEPT_SECONDS:
                self._ledger.not_deleting(batch_id)  # archived at the provider by now
                continue
            self.delete(batch_id, tally)

    # -- leftovers -------------------------------------------------------------------------
    def _resubmit_leftovers(
        self, submission: str, item: Item, context: Any, answer_row: AnswerRow
    ) -> None:
        """Every batch of the submission is collected: its rows still staged go into a new
        pending submission (a row whose claim is unused keeps it; the others claim a new
        attempt, or are dead-lettered when their budget is spent); then this one is done."""
        store = self._store
        again: list[str] = []
        settled = True
        for custom_id, row in store.rows(store.custom_ids(submission, item)):
            if text(row, "state") != "staged" or text(row, "submission") != submission:
                continue
            if claim_open(row):
                again.append(custom_id)  # in no batch: its attempt was never used
                continue
            event = json.loads(text(row, "event") or "{}")
            try:
                result = answer_row(event, BatchAnswer(kind="resubmit"), context)
            except Exception as exc:
                self._parts.logger.warning(
                    "a waiting row is not resubmitted yet", extra={"error_type": error_code(exc)}
                )
                settled = False
                continue
            if result is not None:
                store.mark_answered(custom_id)  # dead-lettered: its budget is spent
            else:
                again.append(custom_id)
        if again:
            new = store.new_submission_id()
            store.put_submission(new, again, 0.0)
            for custom_id in again:
                store.move_row(custom_id, submission, new, claimed=True)
        if settled and store.transition(submission, "created", "done"):
            store.close_submission(submission)
