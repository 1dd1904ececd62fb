"""The unit of work inside a record's lock, and the dead letters it produces.

``complete`` is what Powertools' ``idempotent_function`` runs for a record nobody holds and
nobody completed: it spends the key's attempt budget (:mod:`.budget`) and returns the result
to store, or raises a transient failure or a :class:`~.delivery.Wait` (the lock is then
released). ``hand_off`` is the DLQ send, under a record of its own.

Every result it returns carries the key's totals so far (``key_model_requests``,
``key_usage``: billed requests and tokens across all its deliveries, from the budget's own
counts), so a replay reports them with no extra write. What a request cost is written to
the metrics as soon as it is answered or fails (:meth:`.delivery_log.DeliveryLog.spent`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from . import buffer_queue, clock
from .batch_signals import StagedDeadLetter
from .batch_signals import exhausted as _exhausted
from .budget import AttemptBudget
from .budget_state import RESULT_NOT_SAVED, BudgetState, Claim
from .config import Settings
from .dead_letter import truncate
from .delivery import Delivery, Wait
from .errors import (
    DeadLetterError,
    MemoryExpiredError,
    NonRetryableError,
    PayloadOmittedError,
    ReceivesExhaustedError,
    RetriesExhaustedError,
    is_rate_limited,
    model_error_reason,
)
from .key import dead_key_of_life
from .model_call import Prepared, Spend, error_code, request_cost_usd
from .outcome import DeadLetteredResult, StepResult, Usage, as_provider
from .request_cost import NANOS_PER_USD
from .step_parts import StepParts
from .tracing import MODEL_CALL

#: Times a row that the buffer queue gave up on is put back while its key has budget left.
REDRIVE_REQUEUES = 2


class UnitOfWork:
    """The step's work inside the idempotency records (one per container)."""

    def __init__(self, parts: StepParts) -> None:
        self._parts = parts

    def complete(self, *, request: dict[str, Any], delivery: Delivery) -> StepResult:
        """The idempotent unit of work: returns the result to store (an answer or a dead
        letter), raises a transient failure or a :class:`_Wait` (the lock is released)."""
        delivery.ran = True
        parts = self._parts
        key = request["key"]
        # Message Batches delivery (issue 19): a batch result (or resubmission) of the key.
        if parts.batch is not None and delivery.batch_answer is not None:
            answered = parts.batch.answer(request, delivery)
            # The batch's one billed request, if any, is this collection's (no claim now).
            add_key_totals(answered, BudgetState(), delivery.spend, settings=parts.settings)
            return answered
        budget = parts.budget(request, delivery.first_seen)
        forgotten = self._memory_expired(budget, delivery)
        if forgotten is not None:
            return self._stored(forgotten, key, BudgetState())
        # Under batch delivery a redriven copy is staged as any copy is: a row that waits in
        # a batch makes it a duplicate, and staging sends no request to bounce off.
        redriven = delivery.queue is not None and delivery.queue.source == "redrive"
        if redriven and parts.batch is None:
            return self._answer_redriven(request, budget, delivery)
        try:
            # Everything that can fail before the request is sent comes before the claim.
            prepared = parts.model_call.prepare(request["detail"])
        except NonRetryableError as error:
            return self._stored(error, key, budget.read())
        # Message Batches delivery (issue 19): stage the row instead of sending it.
        if parts.batch is not None:
            try:
                parts.batch.stage(request, delivery, prepared.user_message)
            except StagedDeadLetter as spent:
                return self._stored(spent.error, key, budget.read())
        claim = budget.claim()
        delivery.attempts_spent = claim.state.attempts
        self._count_interrupted(budget, claim, delivery)
        if not claim.granted:
            return self._stored(_exhausted(claim), key, claim.state)
        return self._attempt(prepared, request, budget, claim, delivery)

    def _attempt(
        self,
        prepared: Prepared,
        request: dict[str, Any],
        budget: AttemptBudget,
        claim: Claim,
        delivery: Delivery,
    ) -> StepResult:
        """The claimed attempt: one request. What it cost is written as soon as it is
        answered or fails, before anything else can kill the delivery."""
        parts = self._parts
        spend = delivery.spend
        try:
            with parts.tracer.subsegment(MODEL_CALL):
                message = parts.model_call.send(prepared, delivery.context, spend)
            delivery.log.spent(spend)
            result = parts.model_call.result(message, request["key"])
        except NonRetryableError as error:
            delivery.log.spent(spend)
            return self._stored(error, request["key"], claim.state, spend)
        except Exception as exc:
            delivery.log.spent(spend)
            return self._transient(exc, request, budget, claim, delivery)
        add_key_totals(result, claim.state, spend, settings=self._parts.settings)
        # Only this result carries the answer's spend until it is saved; if the save fails,
        # the runtime writes it to the budget (Delivery.result_not_saved), priced only then.
        delivery.report_spend = functools.partial(
            _report_unsaved, budget, spend, self._parts.settings
        )
        return result

    def _count_interrupted(self, budget: AttemptBudget, claim: Claim, delivery: Delivery) -> None:
        """Count the key's previous attempt if it never reported back, once: by the claim
        that replaced its token or, when the budget is spent, by the one delivery whose
        conditional write settles it."""
        if claim.granted and claim.state.interrupted:
            delivery.log.interrupted()
        elif not claim.granted:
            self._settle_interrupted(budget, claim.state, delivery)

    @staticmethod
    def _settle_interrupted(budget: AttemptBudget, state: BudgetState, delivery: Delivery) -> None:
        """A key that ends with an attempt that never reported back: count it once, by the
        one delivery whose conditional write settles it."""
        if state.pending is not None and budget.settle_interrupted(state.pending):
            delivery.log.interrupted()

    def _stored(
        self,
        error: NonRetryableError,
        key: Mapping[str, Any],
        state: BudgetState,
        spend: Spend | None = None,
    ) -> DeadLetteredResult:
        """The dead letter to store for ``key``, with the key's totals (see
        :func:`add_key_totals`)."""
        result = self.dead_letter(error, key, dead_key_of_life(key, state.first_seen))
        add_key_totals(result, state, spend, settings=self._parts.settings)
        return result

    def _transient(
        self,
        exc: Exception,
        request: dict[str, Any],
        budget: AttemptBudget,
        claim: Claim,
        delivery: Delivery,
    ) -> StepResult:
        """A transient failure of a claimed attempt: a rate limit gives the attempt back and
        waits (or, past the window, is stored as ``RateLimitExhausted``); anything else
        stays spent, and the last attempt's failure is stored as ``RetriesExhausted``."""
        settings = self._parts.settings
        key = request["key"]
        code = error_code(exc)
        request_id = getattr(exc, "request_id", None)
        spend = delivery.spend
        if is_rate_limited(exc):
            state = budget.give_back()
            delivery.first_seen = state.first_seen
            wait = buffer_queue.retry_after_seconds(exc)
            if wait is None:
                wait = buffer_queue.backoff_seconds(max(0, state.rate_limited - 1))
            age = state.age_seconds(clock.now())
            if age + wait > settings.max_event_age_seconds:
                exhausted = RetriesExhaustedError(
                    f"still rate limited ({code}) {age:.0f} s after the step first saw the "
                    f"row; waiting {wait:.0f} s more would pass "
                    f"MAX_EVENT_AGE_SECONDS={settings.max_event_age_seconds}",
                    error_code="RateLimitExhausted",
                    request_id=request_id,
                )
                return self._stored(exhausted, key, state)
            if delivery.queue is None:
                raise exc
            raise Wait("rate_limited", code, wait) from exc
        cost = spend_cost_nanousd(settings, spend)
        budget.report_failure(
            code, billed=spend.requests > 0, usage=spend.usage, cost_nanousd=cost or 0
        )
        if claim.state.attempts < budget.limit:
            raise exc
        # The error's type, status and request id, never its text: a provider's message can
        # quote the request, and this reason is stored, dead-lettered and logged.
        reason = model_error_reason(exc)
        if not reason.startswith(code):
            reason = f"{code}: {reason}"  # e.g. ModelDeadlineExceeded: APITimeoutError
        exhausted = RetriesExhaustedError(
            f"transient failure on attempt {claim.state.attempts} of {budget.limit}: {reason}",
            error_code=code,
            request_id=request_id,
        )
        return self._stored(exhausted, key, claim.state, spend)

    def _answer_redriven(
        self, request: dict[str, Any], budget: AttemptBudget, delivery: Delivery
    ) -> StepResult:
        """A row the buffer queue gave up on (``maxReceiveCount`` receives without an answer:
        throttles, kills, timeouts). Never a model call: it goes back with a fresh receive
        count while its key has budget and time left, else it is stored and dead-lettered."""
        settings = self._parts.settings
        key = request["key"]
        assert delivery.queue is not None
        state, counted = budget.note_requeue(delivery.queue.message_id)
        delivery.first_seen = state.first_seen
        if state.attempts < budget.limit and (
            state.requeues <= REDRIVE_REQUEUES
            and state.age_seconds(clock.now()) < settings.max_event_age_seconds
        ):
            raise Wait("retry", "Requeued", 0, counted=counted)
        # The row ends here: an attempt killed after its request is counted now, by the one
        # delivery whose write settles it, as a claim would have counted it.
        self._settle_interrupted(budget, state, delivery)
        if state.attempts >= budget.limit:
            return self._stored(_exhausted(Claim(False, state)), key, state)
        error = ReceivesExhaustedError(
            f"the buffer queue gave up on this row {state.requeues} times (the last after "
            f"{delivery.queue.receive_count} receives) without an answer: crashes, timeouts or "
            f"throttles; {state.attempts} of {budget.limit} attempts were spent"
        )
        return self._stored(error, key, state)

    def _memory_expired(
        self, budget: AttemptBudget, delivery: Delivery
    ) -> MemoryExpiredError | None:
        """A copy the runtime re-enqueued (it carries the key's first-seen time) whose key's
        memory may be gone: the lifetime has passed since it was first seen and its budget
        item is no longer there. Answering it could bill the key past its budget, so it is
        refused (:data:`.lifetime.MEMORY_EXPIRED`), never sent. Costs one read, and only
        for a stamped copy that old; with the lifetime the construct derives, none is."""
        first_seen = delivery.first_seen
        lifetime = self._parts.settings.expires_after_seconds
        if first_seen is None or clock.now() - first_seen < lifetime:
            return None
        if budget.read().first_seen is not None:
            return None  # the budget is still remembered: the key goes on as usual
        return MemoryExpiredError(
            f"this copy of the key was first seen {clock.now() - first_seen:.0f} s ago, past "
            f"the key's memory lifetime (IDEMPOTENCY_EXPIRES_AFTER_SECONDS={lifetime}), and "
            "its attempt budget is gone: answering it could bill the key again"
        )

    def hand_off(self, *, request: dict[str, Any], delivery: Delivery) -> dict[str, Any]:
        """The idempotent DLQ send (record suffix ``#dead-letter``). Raises
        ``DeadLetterError`` when SQS fails, which releases this record only. The key is
        counted by the first delivery whose send succeeds, once."""
        parts = self._parts
        try:
            message_id = parts.dead_letters.send(
                request["event"],
                error_code=request["error_code"],
                error_message=request["error_message"],
                dead_letter_id=request["dead_letter_id"],
                request_id=request.get("request_id"),
                record_id=request.get("record_id"),
            )
        except DeadLetterError as error:
            # Counted on the key, so a DLQ that keeps refusing ends the row's tries.
            error.failures = parts.hand_off_item(request).failed()
            raise
        delivery.sent_dead_letter = True
        if parts.hand_off_counter(request).count_dead_letter_once():
            delivery.counted_dead_letter = True
            delivery.log.counted_dead_letter()
        return {"dead_letter_message_id": message_id}

    def refuse_cut_payload(self, key: Mapping[str, Any], delivery: Delivery) -> DeadLetteredResult:
        """An operator's redrive of a dead letter whose body was cut to fit the DLQ: answering
        it would send the model a cut payload, so it is dead-lettered again (its body keeps
        the ``payload_omitted`` note), once per redrive, with no request."""
        refused = PayloadOmittedError(
            "this dead letter's body was cut to fit the dead-letter queue "
            "(dead_letter.payload_omitted), so the model is not asked: publish the full "
            "event again (a new replay_generation) to retry it"
        )
        dead_key = dict(key)
        return self.hand_off_result(self.dead_letter(refused, key, dead_key), dead_key, delivery)

    def dead_letter(
        self, error: NonRetryableError, key: Mapping[str, Any] | None, dead_key: dict[str, Any]
    ) -> DeadLetteredResult:
        parts = self._parts
        result = DeadLetteredResult(
            status="dead_lettered",
            error_code=error.error_code,
            error_message=truncate(str(error) or error.error_code),
            request_id=error.request_id,
            key=None if key is None else key["business_key"],
            model=parts.settings.model_id,
            prompt_version=parts.settings.prompt_version,
            provider=as_provider(parts.settings.model_provider),
            dead_letter_id=parts.dead_letter_id(dead_key),
        )
        if key is not None and "replay_generation" in key:
            result["replay_generation"] = key["replay_generation"]
        return result

    def hand_off_result(
        self,
        result: DeadLetteredResult,
        dead_key: dict[str, Any],
        delivery: Delivery,
        *,
        record_id: str | None = None,
    ) -> DeadLetteredResult:
        """Send a dead-lettered result to the DLQ once per key (its own record), and return it
        with the DLQ message id (replayed for duplicates). ``record_id``: the record the
        dead letter's marker names (one whose redrive republishes that record's result)."""
        request = {
            "key": dead_key,
            "event": delivery.event,
            "error_code": result["error_code"],
            "error_message": result["error_message"],
            "request_id": result.get("request_id"),
            "dead_letter_id": result.get("dead_letter_id"),
        }
        if record_id is not None:
            request["record_id"] = record_id
        sent = self._parts.hand_off(request=request, delivery=delivery)
        handed_off = DeadLetteredResult(**result)
        handed_off["dead_letter_message_id"] = sent["dead_letter_message_id"]
        return handed_off


def add_key_totals(
    result: StepResult, state: BudgetState, spend: Spend | None = None, *, settings: Settings
) -> None:
    """Add the key's totals to ``result``: ``key_model_requests`` (its billed requests over
    every delivery: the budget's claimed attempts less the unbilled ones, an interrupted one
    counted as billed), ``key_usage`` (the tokens of its billed answers) and
    ``key_cost_usd`` (what they cost at the prices they were billed at; None when the model
    has no price). ``spend``: the cost of this delivery's attempt, whose claim ``state``
    already includes."""
    requests = state.billed_requests
    usage = Usage(**state.usage)
    nanousd = state.cost_nanousd
    if spend is not None:
        requests += spend.requests - (1 if state.attempts else 0)
        usage = Usage(
            input_tokens=usage["input_tokens"] + spend.usage["input_tokens"],
            output_tokens=usage["output_tokens"] + spend.usage["output_tokens"],
            cache_creation_input_tokens=usage["cache_creation_input_tokens"]
            + spend.usage["cache_creation_input_tokens"],
            cache_read_input_tokens=usage["cache_read_input_tokens"]
            + spend.usage["cache_read_input_tokens"],
        )
        nanousd += spend_cost_nanousd(settings, spend) or 0
    result["key_model_requests"] = max(0, requests)
    result["key_usage"] = usage
    result["key_cost_usd"] = None if settings.model_rates is None else nanousd / NANOS_PER_USD


def _report_unsaved(budget: AttemptBudget, spend: Spend, settings: Settings) -> None:
    """Write a billed answer whose result could not be saved to its key's budget."""
    cost = spend_cost_nanousd(settings, spend) or 0
    budget.report_failure(RESULT_NOT_SAVED, usage=spend.usage, cost_nanousd=cost)


def spend_cost_nanousd(settings: Settings, spend: Spend) -> int | None:
    """What ``spend``'s billed request cost in billionths of a dollar (0 without one; None
    when the model has no price)."""
    if spend.requests <= 0:
        return 0
    cost = request_cost_usd(settings, spend.usage, batch=None if not spend.realtime else False)
    return None if cost is None else round(cost * NANOS_PER_USD)
