"""Message Batches delivery (``MODEL_DELIVERY=batch``): stage, submit, reconcile, collect.

A row's key is handled exactly as in realtime up to the model call: same record key, same
idempotency record (a stored answer replays, a held record waits), same attempt budget.
Then, instead of a request:

1. **Stage** (inside the record's lock, :meth:`BatchDelivery.stage`): the row is written as
   a *row item* (:mod:`.batch_store`) owned by this invocation's *submission*, an attempt of
   the key's budget is claimed, and :class:`Staged` releases the lock. A duplicate finds the
   live row and makes no request. A key whose record is stored (answered in realtime or by an
   earlier batch) never gets here: it replays.
2. **Submit** (:meth:`BatchDelivery.submit`): at the end of the invocation, its rows become
   pending submissions, listed in the index, before the queue messages are deleted: one,
   or more when a row would have taken the current one past ``BATCH_MAX_REQUESTS`` or the
   create body the function's memory can send (:func:`create_bytes_limit`); those filled
   ones are sent at once. Otherwise a submission is sent once the next tick would come
   after ``BATCH_MAX_WAIT_SECONDS`` since its oldest row was enqueued (or when it holds
   ``BATCH_MAX_REQUESTS``), by that invocation or by a tick. ``pending → creating`` is a
   conditional write that records ``started_at`` and the request count FIRST; only then is
   ``messages.batches.create`` called, once (the client has ``max_retries=0``), split
   first so no batch passes ``BATCH_MAX_REQUESTS`` or the create body limit. A tick merges
   due pending submissions with the other pending ones while they fit.
3. **Reconcile** (tick): a submission left ``creating`` (a kill before, during or after
   ``create``, a timeout, a dropped connection, a 5xx) is reconciled once
   :data:`RECONCILE_AFTER_SECONDS` have passed since ``started_at`` (the create's deadline
   plus a grace period, so a create still being processed by the API is listed):
   ``batches.list`` is read back to ``started_at - CLOCK_SKEW_SECONDS``, and EVERY batch
   created in the window with the same request count is adopted. Nothing is created again
   until every adopted batch is collected; then only the rows that no adopted batch answered
   are resubmitted. No batch found: the create never happened, and the submission is sent
   again.
4. **Collect** (tick): each open batch is retrieved; an ended one is read with
   ``batches.results`` as a stream (never loaded whole), and every result goes through the
   same path as a realtime answer (stored in the key's record as ``"delivery": "batch"``
   with its ``batch_id``, dead-lettered, or retried), then ``on_outcome`` runs and the row is
   deleted. The rows of :data:`ROWS_PAGE` lines are read with one ``BatchGetItem``. The
   stream's position is checkpointed every :data:`CHECKPOINT_EVERY` results and when the
   invocation's time runs short, so a crash halfway resumes there; a result applied twice
   replays its stored record and a row already gone is skipped, so nothing is lost or
   repeated. A batch this step created that is open past
   :data:`CANCEL_AFTER_SECONDS` is canceled (its requests end ``canceled``); an adopted
   one is only reported (it may be another workload's on the same API key).

Result types: ``succeeded`` → the realtime checks (stop reason, labels, parser) and stored;
``errored`` ``invalid_request_error`` → a stored dead letter with code
``invalid_request_error``; other ``errored`` → the attempt stays spent and the row is
resubmitted while the budget lasts (then ``RetriesExhausted`` semantics: the error type is
the code); ``expired`` / ``canceled`` → not billed: the attempt is given back and the row is
resubmitted within ``MAX_EVENT_AGE_SECONDS`` (then dead-lettered ``BatchExpired`` /
``BatchCanceled``). A create answered 413 is split in halves; 429 waits (``retry-after``);
another 4xx is split down to the one rejected row, which is dead-lettered with the SDK
error's name (as realtime): no row is lost, none is billed twice.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
)

from . import batch_store, clock, deadline
from .batch_store import BatchStore, Item, custom_id_of
from .budget import Claim
from .client import ModelClientProvider
from .delivery import Delivery
from .errors import NonRetryableError, RetriesExhaustedError
from .model_call import system_blocks
from .model_request import model_fields
from .outcome import StepResult

if TYPE_CHECKING:
    from .components import StepComponents

#: The ``{"model_step_batch": "tick"}`` schedule event's key and value.
TICK_FIELD = "model_step_batch"
TICK_VALUE = "tick"
#: Seconds between schedule ticks (the rule's ``rate(1 minute)``).
TICK_PERIOD_SECONDS = 60.0
#: Total deadline of one ``create`` call (seconds).
CREATE_TIMEOUT_SECONDS = 60.0
#: Grace after a create's deadline before its submission is reconciled: the API may still
#: be processing a create whose answer was lost.
RECONCILE_GRACE_SECONDS = 120.0
RECONCILE_AFTER_SECONDS = CREATE_TIMEOUT_SECONDS + RECONCILE_GRACE_SECONDS
#: Allowance between the API's ``created_at`` and this runtime's clock.
CLOCK_SKEW_SECONDS = 300.0
#: A batch still open this long after its creation is canceled (the API ends every batch
#: within 24 h; this is the "stuck" case).
CANCEL_AFTER_SECONDS = 24 * 3600 + 1800.0
#: An index entry whose submission was never written is dropped this long after its id was
#: made (longer than any invocation runs).
ABANDONED_AFTER_SECONDS = 1800.0
#: Results applied between checkpoints of the stream position.
CHECKPOINT_EVERY = 50
#: Result lines read ahead of the collector, whose rows are read with one BatchGetItem.
ROWS_PAGE = 100
#: Milliseconds of the invocation kept free when collecting: stop, checkpoint, resume later.
RESERVE_MILLIS = 30_000
#: The create body stays under the API's 256 MB with this margin.
MAX_CREATE_BYTES = 256 * 1024 * 1024 - 1024 * 1024
#: Megabytes of the function's memory kept for the runtime itself (Python, boto3, the SDK,
#: Powertools: about 150 MB resident) when a create body is sized.
RUNTIME_RESERVE_MB = 160
#: Bytes of create body per megabyte left: the SDK holds the body about twice while it is
#: sent (the JSON text and its encoded bytes), and a third share is margin.
CREATE_BYTES_PER_MB = 2**20 // 3
#: The least create body an invocation sends, however little memory it has.
MIN_CREATE_BYTES = 2**20
#: The most rows one submission holds: the API's most requests a batch (a submission of
#: more than ``batch_store.IDS_PER_ITEM`` keeps its custom_ids in parts).
SUBMISSION_ROWS = 100_000
#: The tick's lease (seconds) when the context has no deadline; else the invocation's
#: remaining time, so a killed tick's lease ends with it.
LEASE_SECONDS = 900.0
#: The error type of a batch result that is the request's own fault.
INVALID_REQUEST = "invalid_request_error"
#: The metric of the oldest open batch (or uncertain create), for the alarm.
OLDEST_OPEN_BATCH_METRIC = "OldestOpenBatchAgeSeconds"


class Staged(Exception):
    """Raised inside the unit of work: the row is staged (``new``) or already staged by
    another delivery; no request was made and nothing is stored."""

    def __init__(self, custom_id: str, *, new: bool) -> None:
        super().__init__("staged for a Message Batch")
        self.custom_id = custom_id
        self.new = new


class StagedDeadLetter(Exception):
    """Raised by :meth:`BatchDelivery.stage` when the key's budget is spent: the unit of
    work stores the dead letter it carries."""

    def __init__(self, error: NonRetryableError) -> None:
        super().__init__(error.error_code)
        self.error = error


class BatchResubmit(Exception):
    """Raised inside the unit of work for a batch result that is sent again (expired,
    canceled, or a retryable error with budget left): nothing is stored."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.error_code = code


@dataclass(frozen=True)
class BatchAnswer:
    """What the collector hands the unit of work for one key.

    ``kind``: ``succeeded``, ``errored``, ``expired``, ``canceled``, ``resubmit`` (the key
    is about to be sent again: claim an attempt) or ``rejected`` (the create refused the
    row itself)."""

    kind: str
    batch_id: str | None = None
    message: Any = None
    error_type: str | None = None
    error_message: str | None = None
    request_id: str | None = None


def is_tick(event: Mapping[str, Any]) -> bool:
    """True for the schedule's ``{"model_step_batch": "tick"}`` event."""
    return event.get(TICK_FIELD) == TICK_VALUE


#: ``(event, answer, context) -> stored result or None`` (None: the row is resubmitted).
AnswerRow = Callable[[Mapping[str, Any], BatchAnswer, Any], Any]


@dataclass
class StagedRow:
    """A row this invocation staged: its custom_id and when it was first enqueued."""

    custom_id: str
    sent_at: float


class BatchDelivery:
    """The batch side of one step (one per container)."""

    def __init__(self, parts: StepComponents) -> None:
        self._parts = parts
        settings = parts.settings
        self.store = BatchStore(
            parts.boto3_client("dynamodb"),
            settings.idempotency_table_name,
            settings.record_prefix,
            settings.expires_after_seconds,
        )
        self._clients = ModelClientProvider(settings, parts.boto3_client)
        #: The submission the invocation in progress stages its rows into now.
        self.submission_id = self.store.new_submission_id()
        #: The invocation's submissions before ``submission_id``, oldest first: one is
        #: closed (and a new id taken) when the next row would take it past
        #: ``BATCH_MAX_REQUESTS`` or the create bytes the function's memory can send.
        self._filled: list[str] = []
        #: Rows, and create bytes (estimated), of ``submission_id`` so far.
        self._count = 0
        self._bytes = 0
        #: Create bytes of a request besides its user message (the system prompt, ...).
        self._request_bytes: int | None = None
        #: By submission id, the rows written as its own (staged or adopted), whether or not
        #: their staging then completed: a row whose staging failed after the write (the
        #: claim, or the release of the key's record, answered an error) is still owned by
        #: the submission, and its redelivery finds it owned, so the submission must list it.
        self._owned: dict[str, list[str]] = {}

    # -- 1. stage --------------------------------------------------------------------------
    def custom_id(self, request: dict[str, Any]) -> str:
        """The custom_id of a request's record."""
        return custom_id_of(self._parts.persistence.record_id(request))

    def stage(self, request: dict[str, Any], delivery: Delivery, user_message: str) -> NoReturn:
        """Stage the row of ``request`` and claim an attempt of its budget; raises
        :class:`Staged`, or :class:`StagedDeadLetter` when the budget is spent. A live
        staged row means a duplicate: no request, no claim. A live row owned by a submission
        that does not exist (an invocation killed before writing it) is adopted."""
        store = self.store
        custom_id = self.custom_id(request)
        event_json = json.dumps(dict(delivery.event), sort_keys=True, default=str)
        size = self._bytes_of(user_message)
        submission = self._submission_for(size, delivery.context)
        found = store.stage_row(custom_id, event_json, user_message, submission)
        if found is not None:
            owner = batch_store.text(found, "submission") or ""
            mine = owner == submission or owner in self._filled
            orphan = not mine and store.submission(owner) is None
            if not (orphan and store.adopt_orphan(custom_id, owner, submission)):
                raise Staged(custom_id, new=False)
            self._own(submission, custom_id, size)
            raise Staged(custom_id, new=True)  # its attempt was claimed when first staged
        self._own(submission, custom_id, size)
        claim = self._parts.budget(request).claim()
        delivery.attempts_spent = claim.state.attempts
        if not claim.granted:
            store.mark_answered(custom_id)
            raise StagedDeadLetter(_exhausted(claim))
        raise Staged(custom_id, new=True)

    def _bytes_of(self, user_message: str) -> int:
        """The create bytes of a request with ``user_message`` (as :meth:`_requests` builds
        it, serialised as the SDK sends it)."""
        if self._request_bytes is None:
            self._request_bytes = len(json.dumps(self._request(custom_id_of(""), "")))
        return self._request_bytes + len(json.dumps(user_message)) + 2  # ", " between two

    def _submission_for(self, size: int, context: Any) -> str:
        """The submission a row of ``size`` create bytes joins: the current one, or a new
        one when the row would take the current one past ``BATCH_MAX_REQUESTS`` (at most
        :data:`SUBMISSION_ROWS`) or :func:`create_bytes_limit`."""
        cap = min(self._parts.settings.batch_max_requests, SUBMISSION_ROWS)
        if self._count and (self._count >= cap or self._bytes + size > create_bytes_limit(context)):
            self._filled.append(self.submission_id)
            self.submission_id = self.store.new_submission_id()
            self._count = self._bytes = 0
        return self.submission_id

    def _own(self, submission: str, custom_id: str, size: int) -> None:
        self._owned.setdefault(submission, []).append(custom_id)
        self._count += 1
        self._bytes += size

    def answer(self, request: dict[str, Any], delivery: Delivery) -> StepResult:
        """The unit of work for a key the collector (or the submitter) answers: the result
        to store, or :class:`BatchResubmit` (nothing stored, the row goes again)."""
        parts = self._parts
        work = parts.work
        key = request["key"]
        answer = delivery.batch_answer
        assert isinstance(answer, BatchAnswer)
        budget = parts.budget(request)
        if answer.kind == "resubmit":
            claim = budget.claim()
            delivery.attempts_spent = claim.state.attempts
            if not claim.granted:
                return work.dead_letter(_exhausted(claim), key, dict(key))
            raise BatchResubmit("Resubmitted")
        if answer.kind == "rejected":
            budget.report_failure(answer.error_type or "BadRequestError")
            rejected = RetriesExhaustedError(
                answer.error_message or "the Message Batch refused the request",
                error_code=answer.error_type or "BadRequestError",
                request_id=answer.request_id,
            )
            return _from_batch(work.dead_letter(rejected, key, dict(key)), answer)
        if answer.kind == "succeeded":
            try:
                result: StepResult = parts.model_call.result(answer.message, key)
            except NonRetryableError as error:
                result = work.dead_letter(error, key, dict(key))
            return _from_batch(result, answer)
        if answer.kind == "errored":
            code = answer.error_type or "api_error"
            if code == INVALID_REQUEST:
                invalid = RetriesExhaustedError(
                    answer.error_message or code, error_code=code, request_id=answer.request_id
                )
                return _from_batch(work.dead_letter(invalid, key, dict(key)), answer)
            budget.report_failure(code)
            state = budget.read()
            if state.attempts >= budget.limit:
                exhausted = RetriesExhaustedError(
                    f"Message Batch result errored ({code}) on attempt {state.attempts} of "
                    f"{budget.limit}",
                    error_code=code,
                    request_id=answer.request_id,
                )
                return _from_batch(work.dead_letter(exhausted, key, dict(key)), answer)
            raise BatchResubmit(code)
        # expired or canceled: not billed, so the attempt is given back.
        state = budget.give_back()
        age = state.age_seconds(clock.now())
        if age >= parts.settings.max_event_age_seconds:
            code = "BatchExpired" if answer.kind == "expired" else "BatchCanceled"
            late = RetriesExhaustedError(
                f"Message Batch result {answer.kind} {age:.0f} s after the step first saw the "
                f"row, past MAX_EVENT_AGE_SECONDS={parts.settings.max_event_age_seconds}",
                error_code=code,
            )
            return _from_batch(work.dead_letter(late, key, dict(key)), answer)
        raise BatchResubmit(answer.kind)

    # -- 2. submit -------------------------------------------------------------------------
    def flush(self, staged: list[StagedRow], context: Any, answer_row: AnswerRow) -> None:
        """Write this invocation's staged rows as pending submissions, the filled ones
        first (raises if a write fails: the caller reports the messages as failures, so
        nothing is lost), then send each that is due; a filled one is due at once, and is
        never merged with others (it is full). New ids are taken for the next invocation."""
        filled, current = self._filled, self.submission_id
        self._filled = []
        self.submission_id = self.store.new_submission_id()
        self._count = self._bytes = 0
        owned = {submission: self._owned.pop(submission, []) for submission in [*filled, current]}
        listed = {custom_id for ids in owned.values() for custom_id in ids}
        # Every staged row is owned; one that is not is listed with the current submission.
        owned[current].extend(row.custom_id for row in staged if row.custom_id not in listed)
        sent_at = {row.custom_id: row.sent_at for row in staged}
        written: list[tuple[str, int, float, bool]] = []
        for submission, rows in owned.items():
            ids = list(dict.fromkeys(rows))
            if not ids:
                continue
            first = min((sent_at[i] for i in ids if i in sent_at), default=clock.now())
            full = submission != current
            self.store.put_submission(submission, ids, first, mergeable=not full)
            written.append((submission, len(ids), first, full))
        for submission, count, first, full in written:
            if full or self._due(count, first):
                try:
                    self.submit(submission, context, answer_row)
                except Exception:
                    # The submission is durable; the next tick sends or reconciles it.
                    self._parts.logger.exception("batch submit failed; the tick retries it")

    def _due(self, count: int, first_waited: float) -> bool:
        """Full, or the next tick (a minute away) would send it after ``max_wait``."""
        settings = self._parts.settings
        return (
            count >= settings.batch_max_requests
            or clock.now() + TICK_PERIOD_SECONDS >= first_waited + settings.batch_max_wait_seconds
        )

    def submit(self, submission: str, context: Any, answer_row: AnswerRow) -> None:
        """Send a pending submission as one Message Batch (see the module docstring)."""
        store = self.store
        item = store.submission(submission)
        if item is None or batch_store.text(item, "state") != "pending":
            return
        not_before = batch_store.number(item, "not_before") or 0.0
        if clock.now() < not_before:
            return
        ids = store.custom_ids(submission, item)
        requests, events = self._requests(submission, ids)
        parts = _packed(
            requests, self._parts.settings.batch_max_requests, create_bytes_limit(context)
        )
        if len(parts) > 1:
            # Parts that each fit: a long system prompt is repeated in every request, so
            # 10,000 requests of a 20 KB prompt are 200 MB, more than 512 MB of memory sends.
            self._split(submission, [r["custom_id"] for r in requests], "pending", parts)
            return
        if not requests:
            if store.transition(submission, "pending", "done"):
                store.close_submission(submission)
            return
        sent_ids = [r["custom_id"] for r in requests]
        started = clock.now()
        if not store.transition(
            submission, "pending", "creating", started_at=started, sent_count=len(requests)
        ):
            return  # another invocation is sending it
        self._parts.logger.info(
            "creating a Message Batch", extra={"submission": submission, "requests": len(sent_ids)}
        )
        try:
            client = self._clients.get()
            with deadline.total(CREATE_TIMEOUT_SECONDS):
                batch = client.messages.batches.create(
                    requests=requests, timeout=CREATE_TIMEOUT_SECONDS
                )
        except Exception as exc:
            self._create_failed(submission, sent_ids, events, exc, context, answer_row)
            return
        store.record_batch(batch.id, submission, started)
        store.transition(submission, "creating", "created", batch_ids=[batch.id])
        self._parts.logger.info(
            "Message Batch created", extra={"submission": submission, "batch_id": batch.id}
        )

    def _requests(
        self, submission: str, ids: list[str]
    ) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """The create requests of the rows this submission still owns, and their events."""
        requests: list[dict[str, Any]] = []
        events: dict[str, str] = {}
        for custom_id, row in self.store.rows(ids):
            if batch_store.text(row, "state") != "staged":
                continue
            if batch_store.text(row, "submission") != submission:
                continue
            events[custom_id] = batch_store.text(row, "event") or "{}"
            requests.append(self._request(custom_id, batch_store.text(row, "user_message") or ""))
        return requests, events

    def _request(self, custom_id: str, user_message: str) -> dict[str, Any]:
        """One create request: the realtime request's fields exactly
        (model_call.ModelCall._send_once)."""
        settings = self._parts.settings
        return {
            "custom_id": custom_id,
            "params": {
                "model": settings.model_id,
                "max_tokens": settings.max_tokens,
                "system": system_blocks(settings),
                "messages": [{"role": "user", "content": user_message}],
                # Issue 32: thinking and effort, as the realtime request sends them.
                **model_fields(settings),
            },
        }

    def _create_failed(
        self,
        submission: str,
        sent_ids: list[str],
        events: dict[str, str],
        exc: Exception,
        context: Any,
        answer_row: AnswerRow,
    ) -> None:
        """A create that did not return a batch. Certain refusals are answered now;
        anything else is uncertain and stays ``creating`` for the tick's reconcile."""
        import anthropic

        status = getattr(exc, "status_code", None)
        log = self._parts.logger
        if (
            not isinstance(exc, anthropic.APIStatusError)
            or status in (408, 409)
            or (status is not None and status >= 500)
        ):
            log.warning(
                "Message Batch create is uncertain; it is reconciled before anything is sent again",
                extra={"submission": submission, "error_type": type(exc).__name__},
            )
            return
        log.warning(
            "Message Batch create refused",
            extra={"submission": submission, "status": status, "error_type": type(exc).__name__},
        )
        if status == 429:
            wait = _retry_after(exc)
            self.store.transition(submission, "creating", "pending", not_before=clock.now() + wait)
            return
        if status in (401, 403, 404):
            # Nothing was created; a key or permission problem. Try again in a minute.
            self.store.transition(submission, "creating", "pending", not_before=clock.now() + 60)
            return
        if len(sent_ids) > 1:
            self._split(submission, sent_ids, "creating")
            return
        # One row the API refuses (400, 413, 422): its dead letter, as a realtime 400.
        [custom_id] = sent_ids
        event = json.loads(events[custom_id])
        answer_row(
            event,
            BatchAnswer(
                kind="rejected",
                error_type=type(exc).__name__,
                error_message=f"Message Batch create refused the request: {status}",
                request_id=getattr(exc, "request_id", None),
            ),
            context,
        )
        self.store.mark_answered(custom_id)
        if self.store.transition(submission, "creating", "done"):
            self.store.close_submission(submission)

    def _split(
        self, submission: str, ids: list[str], from_state: str, parts: list[list[str]] | None = None
    ) -> None:
        """Replace a submission by ``parts`` (default: the halves of ``ids``) that are due
        at once. Crash-safe in this order: the parts are written, the rows move to them one
        by one (a row has one owner, so it is sent by one of them only), and only then is
        the original marked ``split``; a crash before that leaves it ``pending``/
        ``creating``, and it splits again."""
        half = max(1, math.ceil(len(ids) / 2))
        for part in parts if parts is not None else [ids[:half], ids[half:]]:
            if not part:
                continue
            new = self.store.new_submission_id()
            # Never merged back: the API refused the whole.
            self.store.put_submission(new, part, 0.0, mergeable=False)
            for custom_id in part:
                self.store.move_row(custom_id, submission, new)
        if self.store.transition(submission, from_state, "split"):
            self.store.close_submission(submission)

    def _rehome(self, submission: str, item: Item) -> None:
        """A submission that sends nothing more (``split`` or ``done``) still owning staged
        rows (a crash between its steps): they go into a new pending submission (no batch
        was sent for them by it, so no attempt is claimed), then it leaves the index."""
        ids = self.store.custom_ids(submission, item)
        owned = [
            custom_id
            for custom_id, row in self.store.rows(ids)
            if batch_store.text(row, "state") == "staged"
            and batch_store.text(row, "submission") == submission
        ]
        if owned:
            new = self.store.new_submission_id()
            self.store.put_submission(new, owned, 0.0)
            for custom_id in owned:
                self.store.move_row(custom_id, submission, new)
        self.store.close_submission(submission)

    # -- the tick --------------------------------------------------------------------------
    def tick(self, context: Any, answer_row: AnswerRow) -> dict[str, Any]:
        """Submit due submissions, reconcile uncertain creates, collect ended batches and
        cancel stuck ones; emit the oldest open batch's age. One tick at a time (a lease)."""
        store = self.store
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        lease = LEASE_SECONDS if remaining is None else float(remaining()) / 1000
        token = store.take_lease(lease)
        if token is None:
            return {"model_step_batch": "busy"}
        summary = {"submitted": 0, "reconciled": 0, "collected": 0, "results": 0, "open": 0}
        oldest = 0.0
        waiting: list[tuple[str, Item]] = []
        try:
            for submission in store.open_submissions():
                if _out_of_time(context):
                    break
                item = store.submission(submission)
                if item is None:
                    # Listed, never written: its writer died between the two writes (its
                    # rows are adopted on redelivery), or is between them right now.
                    made = batch_store.submission_made_at(submission)
                    if clock.now() - made > ABANDONED_AFTER_SECONDS:
                        store.close_submission(submission)
                    continue
                state = batch_store.text(item, "state")
                if state == "pending":
                    waiting.append((submission, item))
                elif state == "creating":
                    started = batch_store.number(item, "started_at") or clock.now()
                    oldest = max(oldest, clock.now() - started)
                    if clock.now() - started >= RECONCILE_AFTER_SECONDS:
                        self._reconcile(submission, item)
                        summary["reconciled"] += 1
                elif state == "created":
                    age, results = self._collect(submission, item, context, answer_row)
                    oldest = max(oldest, age)
                    summary["results"] += results
                    summary["collected"] += 1
                else:
                    self._rehome(submission, item)
            if not _out_of_time(context):
                summary["submitted"] = self._submit_pending(waiting, context, answer_row)
            summary["open"] = len(store.open_submissions())
        finally:
            store.release_lease(token)
            self._metric(oldest)
        return {"model_step_batch": summary}

    def _submit_pending(
        self, waiting: list[tuple[str, Item]], context: Any, answer_row: AnswerRow
    ) -> int:
        """Send the due pending submissions; each is merged with the other pending ones,
        oldest first, while their rows fit one batch (``BATCH_MAX_REQUESTS``, at most
        :data:`SUBMISSION_ROWS`): one buffer delivery's rows are often far fewer (Lambda
        hands a function at most 6 MB of records). Returns the batches sent."""
        cap = min(self._parts.settings.batch_max_requests, SUBMISSION_ROWS)
        now = clock.now()
        ready = sorted(
            (w for w in waiting if (batch_store.number(w[1], "not_before") or 0.0) <= now),
            key=lambda w: batch_store.number(w[1], "first_waited") or 0.0,
        )
        sent = 0
        while ready:
            group: list[tuple[str, Item]] = []
            total = 0
            for entry in list(ready):
                count = int(batch_store.number(entry[1], "count") or 0)
                if group and (total + count > cap or _alone(entry[1]) or _alone(group[0][1])):
                    continue
                group.append(entry)
                ready.remove(entry)
                total += count
            if (
                not any(
                    _alone(item)  # full, or a part of a refused create: due at once
                    or self._due(
                        int(batch_store.number(item, "count") or 0),
                        batch_store.number(item, "first_waited") or 0.0,
                    )
                    for _, item in group
                )
                and total < cap
            ):
                continue  # nothing in it is due, and it is not full: it waits
            submission = self._merge(group) if len(group) > 1 else group[0][0]
            if submission is not None:
                self.submit(submission, context, answer_row)
                sent += 1
        return sent

    def _merge(self, group: list[tuple[str, Item]]) -> str | None:
        """One pending submission holding the rows of ``group``. Each source is locked
        first (``pending → merging``: a concurrent submit of it then fails its own
        ``pending → creating``), so no row is sent by its source and by the merge. A kill
        halfway leaves sources ``merging`` that still own rows; the tick rehomes them."""
        store = self.store
        locked = [(sid, item) for sid, item in group if store.transition(sid, "pending", "merging")]
        if not locked:
            return None
        if len(locked) == 1:
            [(only, _)] = locked
            store.transition(only, "merging", "pending")
            return only
        listed = {sid: store.custom_ids(sid, item) for sid, item in locked}
        ids = [custom_id for ids_of_source in listed.values() for custom_id in ids_of_source]
        first = min(batch_store.number(item, "first_waited") or 0.0 for _, item in locked)
        merged = store.new_submission_id()
        store.put_submission(merged, list(dict.fromkeys(ids)), first)
        for sid, ids_of_source in listed.items():
            for custom_id in ids_of_source:
                store.move_row(custom_id, sid, merged)
            if store.transition(sid, "merging", "done"):
                store.close_submission(sid)
        return merged

    def _metric(self, oldest: float) -> None:
        settings = self._parts.settings
        metrics = EphemeralMetrics(
            namespace=settings.metrics_namespace, service=settings.service_name
        )
        metrics.add_metric(OLDEST_OPEN_BATCH_METRIC, MetricUnit.Seconds, round(oldest, 3))
        metrics.flush_metrics()

    # -- 3. reconcile ----------------------------------------------------------------------
    def _reconcile(self, submission: str, item: Item) -> None:
        """Adopt every batch created in the window of this submission's uncertain create
        with its request count; none: the create never happened, send it again."""
        started = batch_store.number(item, "started_at") or 0.0
        count = int(batch_store.number(item, "sent_count") or 0)
        low = started - CLOCK_SKEW_SECONDS
        high = started + CREATE_TIMEOUT_SECONDS + CLOCK_SKEW_SECONDS
        adopted: list[str] = []
        client = self._clients.get()
        for batch in client.messages.batches.list(limit=100):
            created = batch.created_at.timestamp()
            if created < low:
                break  # newest first: everything after is older
            counts = batch.request_counts
            total = (
                counts.processing
                + counts.succeeded
                + counts.errored
                + counts.canceled
                + counts.expired
            )
            if created <= high and total == count:
                self.store.record_batch(batch.id, submission, created, adopted=True)
                adopted.append(batch.id)
        self._parts.logger.info(
            "uncertain Message Batch create reconciled",
            extra={"submission": submission, "adopted": len(adopted)},
        )
        if adopted:
            self.store.transition(submission, "creating", "created", batch_ids=adopted)
        else:
            self.store.transition(submission, "creating", "pending")

    # -- 4. collect ------------------------------------------------------------------------
    def _collect(
        self, submission: str, item: Item, context: Any, answer_row: AnswerRow
    ) -> tuple[float, int]:
        """Collect the submission's batches; ``(age of its oldest open batch, results
        applied)``. When all are collected, the rows no batch answered go again."""
        client = self._clients.get()
        batch_ids = item.get("batch_ids", {}).get("SS", [])
        oldest = 0.0
        applied = 0
        all_collected = True
        for batch_id in batch_ids:
            record = self.store.batch(batch_id) or {}
            if record.get("collected", {}).get("BOOL"):
                continue
            batch = client.messages.batches.retrieve(batch_id)
            age = clock.now() - batch.created_at.timestamp()
            if batch.processing_status != "ended":
                all_collected = False
                oldest = max(oldest, age)
                if age >= CANCEL_AFTER_SECONDS and batch.processing_status == "in_progress":
                    if self.store.adopted(record):
                        # It may be another workload's batch on the same API key: it is
                        # left alone, and its age keeps OldestOpenBatchAlarm firing.
                        self._parts.logger.warning(
                            "adopted Message Batch open past its 24 h: not canceled",
                            extra={"batch_id": batch_id},
                        )
                    else:
                        client.messages.batches.cancel(batch_id)
                        self._parts.logger.warning(
                            "Message Batch open past its 24 h canceled",
                            extra={"batch_id": batch_id},
                        )
                continue
            done = int(batch_store.number(record, "lines_done") or 0)
            finished, count = self._read_results(batch_id, done, context, answer_row)
            applied += count
            if not finished:
                all_collected = False
                oldest = max(oldest, age)
                break
        if all_collected and not _out_of_time(context):
            self._resubmit_leftovers(submission, item, context, answer_row)
        return oldest, applied

    def _read_results(
        self, batch_id: str, done: int, context: Any, answer_row: AnswerRow
    ) -> tuple[bool, int]:
        """Stream a batch's results from line ``done`` on; ``(finished, applied)``."""
        client = self._clients.get()
        stream = client.messages.batches.results(batch_id)
        rows: dict[str, Item] = {}
        try:
            finished, position, applied = stream_results(
                self._with_rows(stream, done, rows),
                done,
                lambda line: self._apply(
                    batch_id, line, rows.pop(str(line.custom_id), None), context, answer_row
                ),
                lambda position: self.store.checkpoint(batch_id, position),
                lambda: _out_of_time(context),
            )
        except IdempotencyAlreadyInProgressError:
            # A killed invocation still holds one key's record (until its deadline): this
            # batch resumes from its checkpoint on a later tick; the lines read again after
            # it find their rows answered.
            self._parts.logger.info(
                "Message Batch collection waits for a held record", extra={"batch_id": batch_id}
            )
            return False, 0
        finally:
            stream.close()
        if finished:
            self.store.checkpoint(batch_id, position, collected=True)
            self._parts.logger.info(
                "Message Batch collected", extra={"batch_id": batch_id, "results": position}
            )
        return finished, applied

    def _with_rows(self, stream: Iterable[Any], done: int, rows: dict[str, Item]) -> Iterator[Any]:
        """The lines of ``stream``, read :data:`ROWS_PAGE` at a time: before a page is handed
        on, the live rows of its lines past ``done`` are put in ``rows`` (one BatchGetItem,
        not a GetItem a line). Only the collector, under the tick's lease, answers rows, so a
        row read with its page is still current when its line is applied. A stream that
        breaks hands on the lines it gave first, so the collection gets as far as it would
        without reading ahead, then the error is raised."""
        lines = iter(stream)
        position = 0
        while True:
            page: list[Any] = []
            broken: Exception | None = None
            try:
                for line in lines:
                    page.append(line)
                    if len(page) >= ROWS_PAGE:
                        break
            except Exception as error:  # the SDK's stream error, whatever its class
                broken = error
            rows.update(self.store.rows(_past(page, position, done)))
            position += len(page)
            yield from page
            if broken is not None:
                raise broken
            if len(page) < ROWS_PAGE:
                return

    def _apply(
        self, batch_id: str, line: Any, row: Item | None, context: Any, answer_row: AnswerRow
    ) -> None:
        """One result line whose row (read with its page) is ``row``: the key's outcome
        through the realtime path, then the row is deleted (skipped when it is gone)."""
        custom_id = str(line.custom_id)
        if row is None or batch_store.text(row, "state") != "staged":
            return
        result = line.result
        kind = str(result.type)
        error_type = error_message = request_id = None
        if kind == "errored":
            error = getattr(result, "error", None)
            inner = getattr(error, "error", None)
            error_type = str(getattr(inner, "type", None) or "api_error")
            error_message = f"Message Batch result errored: {error_type}"
            request_id = getattr(error, "request_id", None)
        message = getattr(result, "message", None)
        answer = BatchAnswer(
            kind=kind,
            batch_id=batch_id,
            message=message,
            error_type=error_type,
            error_message=error_message,
            request_id=request_id,
        )
        event = json.loads(batch_store.text(row, "event") or "{}")
        if answer_row(event, answer, context) is not None:
            self.store.mark_answered(custom_id)

    def _resubmit_leftovers(
        self, submission: str, item: Item, context: Any, answer_row: AnswerRow
    ) -> None:
        """Every batch of the submission is collected: its rows still staged (expired,
        canceled, retried, or in no batch at all) claim a new attempt and go into a new
        pending submission; then this one is done."""
        ids = self.store.custom_ids(submission, item)
        again: list[str] = []
        for custom_id, row in self.store.rows(ids):
            if batch_store.text(row, "state") != "staged":
                continue
            if batch_store.text(row, "submission") != submission:
                continue
            event = json.loads(batch_store.text(row, "event") or "{}")
            if answer_row(event, BatchAnswer(kind="resubmit"), context) is not None:
                self.store.mark_answered(custom_id)  # dead-lettered: budget or time is up
                continue
            again.append(custom_id)
        if again:
            new = self.store.new_submission_id()
            self.store.put_submission(new, again, 0.0)
            for custom_id in again:
                self.store.move_row(custom_id, submission, new)
        if self.store.transition(submission, "created", "done"):
            self.store.close_submission(submission)


def _packed(requests: list[dict[str, Any]], most: int, most_bytes: int) -> list[list[str]]:
    """The custom_ids of ``requests`` in order, in parts of at most ``most`` requests and
    ``most_bytes`` of create body each (a request bigger than that alone is a part: the
    API answers it, with a 413 if it must)."""
    parts: list[list[str]] = [[]]
    size = 0
    for request in requests:
        length = len(json.dumps(request))
        if parts[-1] and (len(parts[-1]) >= most or size + length > most_bytes):
            parts.append([])
            size = 0
        parts[-1].append(request["custom_id"])
        size += length
    return parts


def _past(page: list[Any], position: int, done: int) -> list[str]:
    """The custom_ids of the lines of ``page`` (which starts after line ``position``) that
    come after line ``done``: the ones the collector applies."""
    skip = max(0, done - position)
    return [str(line.custom_id) for line in page[skip:]]


def _alone(item: Item) -> bool:
    """A submission that is sent as it is, never merged: one an invocation filled (its
    requests or create bytes), or a part of a split."""
    return item.get("mergeable", {}).get("BOOL") is False


def _from_batch(result: StepResult, answer: BatchAnswer) -> StepResult:
    """The result as realtime stores it, plus where it came from."""
    result["delivery"] = "batch"
    if answer.batch_id is not None:
        result["batch_id"] = answer.batch_id
    return result


def _exhausted(claim: Claim) -> RetriesExhaustedError:
    state = claim.state
    return RetriesExhaustedError(
        f"the key's budget of attempts is spent ({state.attempts} used); the last one "
        f"ended with {state.exhaustion_code}",
        error_code=state.exhaustion_code,
    )


def stream_results(
    stream: Iterable[Any],
    done: int,
    apply: Callable[[Any], None],
    checkpoint: Callable[[int], None],
    out_of_time: Callable[[], bool],
) -> tuple[bool, int, int]:
    """Apply a results stream one line at a time, from line ``done`` on (the lines before
    it are read and dropped: the stream is never held whole). Every
    :data:`CHECKPOINT_EVERY` lines the position is checkpointed, and the run stops there
    when ``out_of_time()``. Returns ``(finished, position, applied)``."""
    position = 0
    applied = 0
    for line in stream:
        position += 1
        if position <= done:
            continue
        apply(line)
        applied += 1
        if position % CHECKPOINT_EVERY == 0:
            checkpoint(position)
            if out_of_time():
                return False, position, applied
    return True, position, applied


def _retry_after(exc: Any) -> float:
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    try:
        return max(1.0, float(headers.get("retry-after") or 60))
    except ValueError:
        return 60.0


def create_bytes_limit(context: Any) -> int:
    """The largest create body this invocation sends: :data:`MAX_CREATE_BYTES`, or less
    when the function's memory (``context.memory_limit_in_mb``) cannot hold it while it is
    sent: ``(memory - RUNTIME_RESERVE_MB) * CREATE_BYTES_PER_MB``, at least
    :data:`MIN_CREATE_BYTES`. 512 MB sends up to 117 MB, 1,024 MB the API's whole 256 MB.
    Without a memory size (a test double), :data:`MAX_CREATE_BYTES`."""
    try:
        memory = int(getattr(context, "memory_limit_in_mb", None) or 0)
    except (TypeError, ValueError):
        memory = 0
    if memory <= 0:
        return MAX_CREATE_BYTES
    room = (memory - RUNTIME_RESERVE_MB) * CREATE_BYTES_PER_MB
    return max(MIN_CREATE_BYTES, min(MAX_CREATE_BYTES, room))


def out_of_time(context: Any) -> bool:
    """True when the invocation has less than :data:`RESERVE_MILLIS` left."""
    return _out_of_time(context)


def _out_of_time(context: Any) -> bool:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    return remaining is not None and float(remaining()) < RESERVE_MILLIS
