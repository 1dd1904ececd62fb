"""Submit and reconcile: a submission's rows become one batch at the provider, exactly once.

**Submit.** At the end of an invocation its rows become pending submissions, listed in the
index, before the queue messages are deleted (:meth:`BatchSubmitter.flush`). A submission
is sent once the next tick would come after ``BATCH_MAX_WAIT_SECONDS`` since its oldest row
was enqueued (or when it holds ``BATCH_MAX_REQUESTS``), by that invocation or by a tick;
both merge a due pending submission with the others while they fit one batch (a full one
is sent as it is).
``pending -> creating`` is a conditional write that records ``started_at`` and the request
count FIRST; only then is the provider's create called, once, with the submission id as
its idempotency token, split first so no batch passes ``BATCH_MAX_REQUESTS`` or the create
body the function's memory can send.

**Reconcile.** A submission left ``creating`` (a kill before, during or after the create, a
timeout, a dropped connection, a 5xx) is reconciled once the create's deadline plus a grace
has passed since ``started_at``. With a provider whose create takes an idempotency token,
the create is simply made again. Otherwise every batch the provider lists as created in the
window with the same request count is adopted; none found is looked for once more
:data:`~.batch_limits.UNSEEN_CONFIRM_SECONDS` later (a list is eventually consistent)
before the submission is sent again.

A refused create (nothing was created): 429 waits its ``retry-after``; a key or permission
problem waits a minute; a refusal of the requests themselves is split in halves, down to
the one refused row, which is dead-lettered with the error's name, as realtime does.
"""

from __future__ import annotations

import json
from typing import Any

from . import batch_limits, clock
from .batch_answer import RATE_LIMIT_EXHAUSTED, AnswerRow, BatchAnswer
from .batch_ledger import BatchLedger
from .batch_provider import BatchProvider, CreateRefused, CreateUncertain
from .batch_signals import StagedRow
from .batch_singles import send_singly
from .batch_staging import Staging
from .batch_store import BatchStore, Item, number, text
from .step_parts import StepParts

#: A row's request as the provider takes it, with the row's custom_id.
Request = tuple[str, dict[str, Any]]


class BatchSubmitter:
    """Sends submissions as batches (see the module docstring)."""

    def __init__(
        self, parts: StepParts, store: BatchStore, ledger: BatchLedger, provider: BatchProvider
    ) -> None:
        self._parts = parts
        self._store = store
        self._ledger = ledger
        self._provider = provider

    # -- an invocation's rows --------------------------------------------------------------
    def flush(
        self, staging: Staging, staged: list[StagedRow], context: Any, answer_row: AnswerRow
    ) -> None:
        """Write an invocation's staged rows as pending submissions, the full ones first
        (raises if a write fails: the caller reports the messages as failures, so nothing
        is lost), then send each that is due; a full one is due at once, and is never
        merged with others. A due one that is not full (rows back after a visibility
        timeout, older than ``max_wait``) is merged with the pending ones, as a tick
        merges: alone it could be below the provider's minimum and go singly, at the
        realtime price, while rows that would make a batch with it wait on. Its count is
        that of the rows it still owns (:meth:`.batch_store.BatchStore.recount`)."""
        owned = staging.owned
        listed = {custom_id for ids in owned.values() for custom_id in ids}
        # Every staged row is owned; one that is not is listed with the current submission.
        owned[staging.current].extend(r.custom_id for r in staged if r.custom_id not in listed)
        sent_at = {row.custom_id: row.sent_at for row in staged}
        written: list[tuple[str, list[str], float, bool]] = []
        for submission, rows in owned.items():
            ids = list(dict.fromkeys(rows))
            if not ids:
                continue
            first = min((sent_at[i] for i in ids if i in sent_at), default=clock.now())
            full = submission != staging.current
            self._store.put_submission(submission, ids, first, mergeable=not full)
            written.append((submission, ids, first, full))
        for submission, ids, first, full in written:
            try:
                if full:
                    self.submit(submission, context, answer_row)
                elif self.due(self._store.recount(submission, ids), first):
                    self.submit_pending(self._pending(), context, answer_row, submission)
            except Exception:
                # The submission is durable; the next tick sends or reconciles it.
                self._parts.logger.exception("batch submit failed; the tick retries it")

    def due(self, count: int, first_waited: float) -> bool:
        """Full, or the next tick (a minute away) would send it after ``max_wait``."""
        settings = self._parts.settings
        return (
            count >= settings.batch_max_requests
            or clock.now() + batch_limits.TICK_PERIOD_SECONDS
            >= first_waited + settings.batch_max_wait_seconds
        )

    # -- one submission --------------------------------------------------------------------
    def submit(self, submission: str, context: Any, answer_row: AnswerRow) -> None:
        """Send a pending submission as one batch (see the module docstring)."""
        store = self._store
        item = store.submission(submission)
        if item is None or text(item, "state") != "pending":
            return
        if clock.now() < (number(item, "not_before") or 0.0):
            return
        requests, events = self._requests(submission, store.custom_ids(submission, item))
        if requests and len(requests) < self._provider.quotas.min_requests:
            send_singly(self._parts, self._store, submission, events, context, answer_row)
            return
        parts = _packed(
            requests,
            self._parts.settings.batch_max_requests,
            min(batch_limits.create_bytes_limit(context), self._provider.quotas.max_bytes),
        )
        if len(parts) > 1:
            # Parts that each fit: a long system prompt is repeated in every request, so
            # 10,000 requests of a 20 KB prompt are 200 MB, more than 512 MB of memory sends.
            self._split(submission, [custom_id for custom_id, _ in requests], "pending", parts)
            return
        if not requests:
            if store.transition(submission, "pending", "done"):
                store.close_submission(submission)
            return
        if not store.transition(
            submission, "pending", "creating", started_at=clock.now(), sent_count=len(requests)
        ):
            return  # another invocation is sending it
        refused_since = number(item, "refused_since")
        self._create(submission, requests, events, refused_since, context, answer_row)

    def _create(
        self,
        submission: str,
        requests: list[Request],
        events: dict[str, str],
        refused_since: float | None,
        context: Any,
        answer_row: AnswerRow,
    ) -> None:
        """The provider's create, once, for a submission now ``creating``."""
        log = self._parts.logger
        log.info("creating a batch", extra={"submission": submission, "requests": len(requests)})
        try:
            batch_id, created_at = self._provider.create([r for _, r in requests], submission)
        except CreateUncertain as uncertain:
            log.warning(
                "batch create is uncertain; it is reconciled before anything is sent again",
                extra={"submission": submission, "error_type": uncertain.code},
            )
            return
        except CreateRefused as refused:
            self._refused(submission, events, refused, refused_since, context, answer_row)
            return
        self._ledger.record_batch(batch_id, submission, created_at)
        self._store.transition(submission, "creating", "created", batch_ids=[batch_id])
        log.info("batch created", extra={"submission": submission, "batch_id": batch_id})

    def _requests(self, submission: str, ids: list[str]) -> tuple[list[Request], dict[str, str]]:
        """The requests of the rows this submission still owns, and their events."""
        requests: list[Request] = []
        events: dict[str, str] = {}
        for custom_id, row in self._store.rows(ids):
            if text(row, "state") != "staged" or text(row, "submission") != submission:
                continue
            events[custom_id] = text(row, "event") or "{}"
            record = self._provider.request(custom_id, text(row, "user_message") or "")
            requests.append((custom_id, record))
        return requests, events

    def _refused(
        self,
        submission: str,
        events: dict[str, str],
        exc: CreateRefused,
        refused_since: float | None,
        context: Any,
        answer_row: AnswerRow,
    ) -> None:
        """A create the provider refused (nothing was created): split the requests it
        refused down to the one row, which is dead-lettered; or wait, and once creates
        have been refused for ``MAX_EVENT_AGE_SECONDS`` dead-letter every row with the
        refusal's code, as realtime ends a key it cannot send."""
        self._parts.logger.warning(
            "batch create refused",
            extra={"submission": submission, "status": exc.status, "error_type": exc.code},
        )
        now = clock.now()
        if exc.rows_at_fault and len(events) > 1:
            self._split(submission, list(events), "creating")
            return
        since = refused_since or now
        if not exc.rows_at_fault and now - since < self._parts.settings.max_event_age_seconds:
            self._store.transition(
                submission,
                "creating",
                "pending",
                not_before=now + exc.retry_after,
                refused_since=since,
            )
            return
        code = RATE_LIMIT_EXHAUSTED if exc.status == 429 else exc.code
        rejected = BatchAnswer(
            kind="rejected",
            error_type=code,
            error_message=f"the batch create refused the request: {exc.status}",
            request_id=exc.request_id,
        )
        for custom_id, event_json in events.items():
            answer_row(json.loads(event_json), rejected, context)
            self._store.mark_answered(custom_id)
        if self._store.transition(submission, "creating", "done"):
            self._store.close_submission(submission)

    def _split(
        self, submission: str, ids: list[str], from_state: str, parts: list[list[str]] | None = None
    ) -> None:
        """Replace a submission by ``parts`` (default: the halves of ``ids``) that are due
        at once. Crash-safe in this order: the parts are written, the rows move to them one
        by one (a row has one owner, so it is sent by one of them only), and only then is
        the original marked ``split``; a crash before that leaves it ``pending``/
        ``creating``, and it splits again."""
        for part in parts if parts is not None else batch_limits.halves(ids):
            new = self._store.new_submission_id()
            # Never merged back: the provider refused the whole.
            self._store.put_submission(new, part, 0.0, mergeable=False)
            for custom_id in part:
                self._store.move_row(custom_id, submission, new)
        if self._store.transition(submission, from_state, "split"):
            self._store.close_submission(submission)

    def rehome(self, submission: str, item: Item) -> None:
        """A submission that sends nothing more (``split`` or ``done``) still owning staged
        rows (a crash between its steps): they go into a new pending submission (no batch
        was sent for them by it, so no attempt is claimed), then it leaves the index."""
        store = self._store
        owned = [
            custom_id
            for custom_id, row in store.rows(store.custom_ids(submission, item))
            if text(row, "state") == "staged" and text(row, "submission") == submission
        ]
        if owned:
            new = store.new_submission_id()
            store.put_submission(new, owned, 0.0)
            for custom_id in owned:
                store.move_row(custom_id, submission, new)
        store.close_submission(submission)

    # -- reconcile -------------------------------------------------------------------------
    def reconcile(self, submission: str, item: Item, context: Any, answer_row: AnswerRow) -> None:
        """An uncertain create (see the module docstring)."""
        store = self._store
        started = number(item, "started_at") or 0.0
        if self._provider.idempotent_create:
            if store.transition(submission, "creating", "pending"):
                self.submit(submission, context, answer_row)  # the same token: one batch
            return
        skew = batch_limits.CLOCK_SKEW_SECONDS
        found = self._provider.created_between(
            started - skew,
            started + batch_limits.CREATE_TIMEOUT_SECONDS + skew,
            int(number(item, "sent_count") or 0),
        )
        for batch_id, created_at in found:
            self._ledger.record_batch(batch_id, submission, created_at, adopted=True)
        self._parts.logger.info(
            "uncertain batch create reconciled",
            extra={"submission": submission, "adopted": len(found)},
        )
        if found:
            store.transition(submission, "creating", "created", batch_ids=[b for b, _ in found])
            return
        unseen = number(item, "unseen_since")
        if unseen is None:
            store.transition(submission, "creating", "creating", unseen_since=clock.now())
        elif clock.now() - unseen >= batch_limits.UNSEEN_CONFIRM_SECONDS:
            if store.transition(submission, "creating", "pending"):
                self.submit(submission, context, answer_row)  # the create never happened

    # -- pending submissions, merged -------------------------------------------------------
    def submit_pending(
        self,
        waiting: list[tuple[str, Item]],
        context: Any,
        answer_row: AnswerRow,
        including: str | None = None,
    ) -> int:
        """Send the due pending submissions; each is merged with the other pending ones,
        oldest first, while their rows fit one batch (``BATCH_MAX_REQUESTS``, at most
        :data:`~.batch_limits.SUBMISSION_ROWS`): one buffer delivery's rows are often far
        fewer (Lambda hands a function at most 6 MB of records). With ``including``, only
        the batch that holds that submission is sent (a flush leaves the rest to the tick).
        Returns the batches sent."""
        cap = min(
            self._parts.settings.batch_max_requests,
            batch_limits.SUBMISSION_ROWS,
            self._provider.quotas.max_requests,
        )
        now = clock.now()
        ready = sorted(
            (w for w in waiting if (number(w[1], "not_before") or 0.0) <= now),
            key=lambda w: number(w[1], "first_waited") or 0.0,
        )
        sent = 0
        while ready:
            group: list[tuple[str, Item]] = []
            total = 0
            for entry in list(ready):
                count = int(number(entry[1], "count") or 0)
                if group and (total + count > cap or _alone(entry[1]) or _alone(group[0][1])):
                    continue
                group.append(entry)
                ready.remove(entry)
                total += count
            if not any(self._due_now(item) for _, item in group) and total < cap:
                continue  # nothing in it is due, and it is not full: it waits
            if including is not None and including not in (sid for sid, _ in group):
                continue
            submission = self._merge(group) if len(group) > 1 else group[0][0]
            if submission is not None:
                self.submit(submission, context, answer_row)
                sent += 1
        return sent

    def _pending(self) -> list[tuple[str, Item]]:
        """The open submissions that are pending, with their items."""
        store = self._store
        items = ((sid, store.submission(sid)) for sid in store.open_submissions())
        return [(sid, item) for sid, item in items if item and text(item, "state") == "pending"]

    def _due_now(self, item: Item) -> bool:
        """Full, or a part of a refused create (due at once), or due by its wait."""
        return _alone(item) or self.due(
            int(number(item, "count") or 0), number(item, "first_waited") or 0.0
        )

    def _merge(self, group: list[tuple[str, Item]]) -> str | None:
        """One pending submission holding the rows of ``group``. Each source is locked
        first (``pending -> merging``: a concurrent submit of it then fails its own
        ``pending -> creating``), so no row is sent by its source and by the merge. A kill
        halfway leaves sources ``merging`` that still own rows; the tick rehomes them."""
        store = self._store
        locked = [(sid, item) for sid, item in group if store.transition(sid, "pending", "merging")]
        if not locked:
            return None
        if len(locked) == 1:
            [(only, _)] = locked
            store.transition(only, "merging", "pending")
            return only
        listed = {sid: store.custom_ids(sid, item) for sid, item in locked}
        ids = [custom_id for ids_of_source in listed.values() for custom_id in ids_of_source]
        first = min(number(item, "first_waited") or 0.0 for _, item in locked)
        merged = store.new_submission_id()
        store.put_submission(merged, list(dict.fromkeys(ids)), first)
        for sid, ids_of_source in listed.items():
            for custom_id in ids_of_source:
                store.move_row(custom_id, sid, merged)
            if store.transition(sid, "merging", "done"):
                store.close_submission(sid)
        return merged


def _packed(requests: list[Request], most: int, most_bytes: int) -> list[list[str]]:
    """The custom_ids of ``requests`` in order, in parts of at most ``most`` requests and
    ``most_bytes`` of create body each (a request bigger than that alone is a part: the
    provider answers it, with a 413 if it must)."""
    parts: list[list[str]] = [[]]
    size = 0
    for custom_id, record in requests:
        length = len(json.dumps(record))
        if parts[-1] and (len(parts[-1]) >= most or size + length > most_bytes):
            parts.append([])
            size = 0
        parts[-1].append(custom_id)
        size += length
    return parts


def _alone(item: Item) -> bool:
    """A submission that is sent as it is, never merged: one an invocation filled (its
    requests or create bytes), or a part of a split."""
    return item.get("mergeable", {}).get("BOOL") is False
