"""The unit of work inside a record's lock, and the dead letters it produces.

``complete`` is what Powertools' ``idempotent_function`` runs for a record nobody holds and
nobody completed: it spends the key's attempt budget (:mod:`.budget`) and returns the result
to store, or raises a transient failure or a :class:`~.delivery.Wait` (the lock is then
released). ``hand_off`` is the DLQ send, under a record of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import buffer_queue, clock
from .batch import StagedDeadLetter
from .budget import AttemptBudget, Claim
from .dead_letter import truncate
from .delivery import Delivery, Wait
from .errors import (
    MemoryExpiredError,
    NonRetryableError,
    ReceivesExhaustedError,
    RetriesExhaustedError,
    is_rate_limited,
    model_error_reason,
)
from .model_call import error_code
from .outcome import DeadLetteredResult, StepResult, as_provider
from .tracing import MODEL_CALL

if TYPE_CHECKING:
    from .components import StepComponents

#: Times a row that the buffer queue gave up on is put back while its key has budget left.
REDRIVE_REQUEUES = 2


class UnitOfWork:
    """The step's work inside the idempotency records (one per container)."""

    def __init__(self, parts: StepComponents) -> None:
        self._parts = parts

    def complete(self, *, request: dict[str, Any], delivery: Delivery) -> StepResult:
        """The idempotent unit of work: returns the result to store (an answer or a dead
        letter), raises a transient failure or a :class:`_Wait` (the lock is released)."""
        delivery.ran = True
        parts = self._parts
        key = request["key"]
        # Message Batches delivery (issue 19): a batch result (or resubmission) of the key.
        if parts.batch is not None and delivery.batch_answer is not None:
            return parts.batch.answer(request, delivery)
        budget = parts.budget(request, delivery.first_seen)
        forgotten = self._memory_expired(budget, delivery)
        if forgotten is not None:
            return self.dead_letter(forgotten, key, dict(key))
        if delivery.queue is not None and delivery.queue.source == "redrive":
            return self._answer_redriven(request, budget, delivery)
        try:
            # Everything that can fail before the request is sent comes before the claim.
            prepared = parts.model_call.prepare(request["detail"])
        except NonRetryableError as error:
            return self.dead_letter(error, key, dict(key))
        # Message Batches delivery (issue 19): stage the row instead of sending it.
        if parts.batch is not None:
            try:
                parts.batch.stage(request, delivery, prepared.user_message)
            except StagedDeadLetter as spent:
                return self.dead_letter(spent.error, key, dict(key))
        claim = budget.claim()
        delivery.attempts_spent = claim.state.attempts
        if not claim.granted:
            return self.dead_letter(_exhausted(claim), key, dict(key))
        if claim.state.interrupted:
            delivery.log.interrupted()
        try:
            with parts.tracer.subsegment(MODEL_CALL):
                message = parts.model_call.send(prepared, delivery.context, delivery.spend)
            return parts.model_call.result(message, key)
        except NonRetryableError as error:
            return self.dead_letter(error, key, dict(key))
        except Exception as exc:
            return self._transient(exc, request, budget, claim, delivery)

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
                return self.dead_letter(exhausted, key, dict(key))
            if delivery.queue is None:
                raise exc
            raise Wait("rate_limited", code, wait) from exc
        budget.report_failure(code)
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
        return self.dead_letter(exhausted, key, dict(key))

    def _answer_redriven(
        self, request: dict[str, Any], budget: AttemptBudget, delivery: Delivery
    ) -> StepResult:
        """A row the buffer queue gave up on (``maxReceiveCount`` receives without an answer:
        throttles, kills, timeouts). Never a model call: it goes back with a fresh receive
        count while its key has budget and time left, else it is stored and dead-lettered."""
        settings = self._parts.settings
        key = request["key"]
        state = budget.note_requeue()
        delivery.first_seen = state.first_seen
        if state.attempts >= budget.limit:
            return self.dead_letter(_exhausted(Claim(False, state)), key, dict(key))
        if (
            state.requeues <= REDRIVE_REQUEUES
            and state.age_seconds(clock.now()) < settings.max_event_age_seconds
        ):
            raise Wait("retry", "Requeued", 0)
        assert delivery.queue is not None
        error = ReceivesExhaustedError(
            f"the buffer queue gave up on this row {state.requeues} times (the last after "
            f"{delivery.queue.receive_count} receives) without an answer: crashes, timeouts or "
            f"throttles; {state.attempts} of {budget.limit} attempts were spent"
        )
        return self.dead_letter(error, key, dict(key))

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
        message_id = parts.dead_letters.send(
            request["event"],
            error_code=request["error_code"],
            error_message=request["error_message"],
            dead_letter_id=request["dead_letter_id"],
            request_id=request.get("request_id"),
        )
        delivery.sent_dead_letter = True
        if parts.hand_off_counter(request).count_dead_letter_once():
            delivery.counted_dead_letter = True
            delivery.log.counted_dead_letter()
        return {"dead_letter_message_id": message_id}

    def publish_result(self, *, request: dict[str, Any], delivery: Delivery) -> dict[str, Any]:
        """The idempotent result-event publish (record suffix ``#result-event``). Raises
        ``ResultEventError`` when the bus refuses it, which releases this record only: the
        retry replays the key's stored result and publishes again."""
        publisher = self._parts.result_events
        assert publisher is not None
        event_id = publisher.publish(request["result"], request["record_id"])
        return {"result_event_id": event_id}

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
        self, result: DeadLetteredResult, dead_key: dict[str, Any], delivery: Delivery
    ) -> DeadLetteredResult:
        """Send a dead-lettered result to the DLQ once per key (its own record), and return it
        with the DLQ message id (replayed for duplicates)."""
        request = {
            "key": dead_key,
            "event": delivery.event,
            "error_code": result["error_code"],
            "error_message": result["error_message"],
            "request_id": result.get("request_id"),
            "dead_letter_id": result.get("dead_letter_id"),
        }
        sent = self._parts.hand_off(request=request, delivery=delivery)
        handed_off = DeadLetteredResult(**result)
        handed_off["dead_letter_message_id"] = sent["dead_letter_message_id"]
        return handed_off


def _exhausted(claim: Claim) -> RetriesExhaustedError:
    state = claim.state
    return RetriesExhaustedError(
        f"the key's budget of attempts is spent ({state.attempts} used); the last one "
        f"ended with {state.exhaustion_code}",
        error_code=state.exhaustion_code,
    )
