"""A batch result of one key, inside the key's record lock: what is stored, or a resubmission.

The collector hands each result line to the runtime, which runs the key's unit of work with
a :class:`BatchAnswer` (so the outcome is stored, dead-lettered and published exactly as in
realtime); the unit of work calls :func:`answer`. It returns the result to store, or raises
:class:`BatchResubmit` (nothing stored: the row is sent again in a later batch).

A row holds one claimed attempt of the key's budget at a time (``claimed``): a result that
does not end the key (``errored`` with budget left, ``expired``, ``canceled``, a lost batch)
uses it up once (:meth:`.batch_store.BatchStore.close_claim`), so a result read twice, or
two batches answering one row after an uncertain create, change the budget once; a row
that goes again with its claim unused (it was in no batch) claims no second attempt.

Per result:

- ``succeeded``: the realtime checks (stop reason, labels, the parser) and stored; a
  parser's ``RetryableAnswerError`` is a failed attempt (below);
- ``errored``, the request's own fault (:data:`REQUEST_FAULTS`): a stored dead letter with
  the error type as its code;
- ``errored``, ``rate_limit_error`` / ``overloaded_error``: not served, so as ``expired``,
  with ``RateLimitExhausted`` past ``MAX_EVENT_AGE_SECONDS``;
- ``errored``, any other type: the attempt stays spent; resubmitted while the key's budget
  (``MAX_ATTEMPTS``) lasts, then a dead letter with the error type as its code;
- ``expired``, ``canceled``: not billed: the attempt is given back and the row goes again;
  past ``MAX_EVENT_AGE_SECONDS`` a dead letter ``BatchExpired`` / ``BatchCanceled``;
- its batch is lost: the attempt stays spent (the batch may have run); resubmitted within
  the budget and ``MAX_EVENT_AGE_SECONDS``, else a dead letter ``BatchLost``;
- ``realtime``: a submission too small for the provider's batch (below Bedrock's minimum
  records per job) is sent one request a row, on the row's claimed attempt
  (:func:`_realtime`): stored as a realtime answer at the realtime price, or a failure
  handled as realtime handles it, resubmitted instead of raised.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import clock
from .batch_signals import BatchResubmit, exhausted
from .batch_store import BatchStore, custom_id_of
from .budget_state import BudgetState
from .delivery import Delivery
from .errors import (
    BEDROCK_NON_RETRYABLE_ERRORS,
    BEDROCK_RATE_LIMIT_ERRORS,
    NonRetryableError,
    RetriesExhaustedError,
    RetryableAnswerError,
    is_rate_limited,
)
from .key import dead_key_of_life
from .model_call import error_code, request_cost_usd
from .outcome import StepResult
from .step_parts import StepParts

#: Error types of an ``errored`` result that are the request's own fault (the realtime path
#: dead-letters a 4xx other than 408, 409 and 429 without a retry); a Bedrock record's
#: error is named as realtime names the same InvokeModel error (:mod:`.bedrock_batches`).
REQUEST_FAULTS = frozenset(
    {"invalid_request_error", "authentication_error", "billing_error", "permission_error"}
    | {"not_found_error", "request_too_large"}
    | BEDROCK_NON_RETRYABLE_ERRORS
)
#: Error types of an ``errored`` result that were not served (a 429 or 529 in realtime).
NOT_SERVED = frozenset({"rate_limit_error", "overloaded_error"}) | BEDROCK_RATE_LIMIT_ERRORS
#: Codes of the dead letters only the batch path makes.
BATCH_EXPIRED = "BatchExpired"
BATCH_CANCELED = "BatchCanceled"
BATCH_LOST = "BatchLost"
BATCH_RESULT_UNAPPLIED = "BatchResultUnapplied"
RATE_LIMIT_EXHAUSTED = "RateLimitExhausted"


@dataclass(frozen=True)
class BatchAnswer:
    """What the collector hands the unit of work for one key.

    ``kind``: ``succeeded``, ``errored``, ``expired``, ``canceled``, ``lost`` (its batch is
    lost), ``resubmit`` (the key is about to be sent again: claim an attempt), ``rejected``
    (the create refused the row itself) or ``unapplied`` (the line failed to apply
    :data:`~.batch_limits.MAX_APPLY_FAILURES` times). ``late``: a billed answer for a row
    another submission now owns (stored if usable, never a budget change)."""

    kind: str
    batch_id: str | None = None
    message: Any = None
    error_type: str | None = None
    error_message: str | None = None
    request_id: str | None = None
    late: bool = False


#: ``(event, answer, context) -> stored result or None`` (None: the row goes again); the
#: runtime's path of one key's batch result through its record.
AnswerRow = Callable[[Mapping[str, Any], BatchAnswer, Any], Any]


def answer(
    parts: StepParts, store: BatchStore, request: dict[str, Any], delivery: Delivery
) -> StepResult:
    """The unit of work for a key the collector (or the submitter) answers: the result to
    store, or :class:`BatchResubmit` (see the module docstring)."""
    given = delivery.batch_answer
    assert isinstance(given, BatchAnswer)
    key = request["key"]
    work = parts.work
    if given.kind == "resubmit":
        claim = parts.budget(request).claim()
        delivery.attempts_spent = claim.state.attempts
        if not claim.granted:
            return work.dead_letter(exhausted(claim), key, _of_life(parts, request, claim.state))
        raise BatchResubmit("Resubmitted")
    if given.kind == "succeeded":
        return _succeeded(parts, store, request, given)
    if given.kind == "realtime":
        return _realtime(parts, store, request, delivery)
    if given.kind in ("rejected", "unapplied") or (
        given.kind == "errored" and (given.error_type or "api_error") in REQUEST_FAULTS
    ):
        return _stored_failure(parts, request, given)
    if not store.close_claim(custom_id_of(parts.persistence.record_id(request))):
        raise BatchResubmit("AlreadyApplied")  # a result read again: no second change
    return _retry_or_end(parts, request, given)


def _succeeded(
    parts: StepParts, store: BatchStore, request: dict[str, Any], given: BatchAnswer
) -> StepResult:
    key = request["key"]
    try:
        result: StepResult = parts.model_call.result(given.message, key)
    except NonRetryableError as error:
        result = parts.work.dead_letter(error, key, _of_life(parts, request))
    except RetryableAnswerError as exc:
        custom_id = custom_id_of(parts.persistence.record_id(request))
        if given.late or not store.close_claim(custom_id):
            raise BatchResubmit("AlreadyApplied") from exc
        return _retry_or_end(parts, request, given, code=error_code(exc))
    return _from_batch(result, given)


def _realtime(
    parts: StepParts, store: BatchStore, request: dict[str, Any], delivery: Delivery
) -> StepResult:
    """One request on the row's claimed attempt (used up first, so a kill mid-request never
    sends a second one on it): the answer, a stored dead letter, or :class:`BatchResubmit`
    (a transient failure with budget left, a rate limit within ``MAX_EVENT_AGE_SECONDS``)."""
    key = request["key"]
    settings = parts.settings
    if not store.close_claim(custom_id_of(parts.persistence.record_id(request))):
        raise BatchResubmit("AlreadyApplied")
    budget = parts.budget(request)
    try:
        prepared = parts.model_call.prepare(request["detail"])
    except NonRetryableError as error:
        return parts.work.dead_letter(error, key, _of_life(parts, request))
    spend = delivery.spend
    spend.realtime = True
    try:
        message = parts.model_call.send(prepared, delivery.context, spend)
        result: StepResult = parts.model_call.result(message, key)
    except NonRetryableError as error:
        return parts.work.dead_letter(error, key, _of_life(parts, request))
    except Exception as exc:
        code = error_code(exc)
        if is_rate_limited(exc):
            state = budget.give_back()
            if state.age_seconds(clock.now()) < settings.max_event_age_seconds:
                raise BatchResubmit(code) from exc
            code = RATE_LIMIT_EXHAUSTED
        else:
            budget.report_failure(code, billed=spend.requests > 0)
            state = budget.read()
            if state.attempts < budget.limit:
                raise BatchResubmit(code) from exc
        failure = RetriesExhaustedError(
            f"realtime request below the batch minimum failed ({code}) on attempt "
            f"{state.attempts} of {budget.limit}",
            error_code=code,
        )
        return parts.work.dead_letter(failure, key, _of_life(parts, request, state))
    if result.get("status") == "completed" and "usage" in result:
        result["cost_usd"] = request_cost_usd(settings, result["usage"], batch=False)  # type: ignore[typeddict-item]
    return result


def _stored_failure(parts: StepParts, request: dict[str, Any], given: BatchAnswer) -> StepResult:
    """A dead letter stored at once: a refused row, a request's own fault, or a line that
    could not be applied."""
    key = request["key"]
    if given.kind == "unapplied":
        code = BATCH_RESULT_UNAPPLIED
        message = f"the batch result failed to apply: {given.error_type}"
    elif given.kind == "rejected":
        code = given.error_type or "BadRequestError"
        parts.budget(request).report_failure(code)
        message = given.error_message or "the batch create refused the request"
    else:
        code = given.error_type or "invalid_request_error"
        message = given.error_message or f"batch result errored: {code}"
    failure = RetriesExhaustedError(message, error_code=code, request_id=given.request_id)
    return _from_batch(parts.work.dead_letter(failure, key, _of_life(parts, request)), given)


def _retry_or_end(
    parts: StepParts, request: dict[str, Any], given: BatchAnswer, *, code: str | None = None
) -> StepResult:
    """A result that used the row's claim without ending the key: resubmit it, or store
    its dead letter when its budget or its time is up."""
    budget = parts.budget(request)
    settings = parts.settings
    kind = given.kind
    error_type = given.error_type or "api_error"
    past_budget = past_age = False
    if kind in ("expired", "canceled") or (kind == "errored" and error_type in NOT_SERVED):
        state = budget.give_back()  # never billed
        code = {"expired": BATCH_EXPIRED, "canceled": BATCH_CANCELED}.get(kind)
        code = code or RATE_LIMIT_EXHAUSTED
        past_age = state.age_seconds(clock.now()) >= settings.max_event_age_seconds
    else:
        # Billed or maybe billed: the attempt stays spent, as a realtime 5xx's does. A lost
        # batch is also bounded by the key's age: it may have been lost for a day.
        code = code or (BATCH_LOST if kind == "lost" else error_type)
        budget.report_failure(code)
        state = budget.read()
        past_budget = state.attempts >= budget.limit
        past_age = kind == "lost" and (
            state.age_seconds(clock.now()) >= settings.max_event_age_seconds
        )
    if not (past_budget or past_age):
        raise BatchResubmit(code)
    age = state.age_seconds(clock.now())
    why = (
        f"attempt {state.attempts} of {budget.limit}"
        if past_budget
        else f"{age:.0f} s after the step first saw the row, past "
        f"MAX_EVENT_AGE_SECONDS={settings.max_event_age_seconds}"
    )
    late = RetriesExhaustedError(
        f"batch result {kind} ({code}) on {why}", error_code=code, request_id=given.request_id
    )
    key = request["key"]
    return _from_batch(parts.work.dead_letter(late, key, _of_life(parts, request, state)), given)


def _of_life(
    parts: StepParts, request: dict[str, Any], state: BudgetState | None = None
) -> dict[str, Any]:
    """The dead key of the key's outcome in its current life (:func:`.key.dead_key_of_life`);
    the budget is read when the caller holds no state of it."""
    state = state or parts.budget(request).read()
    return dead_key_of_life(request["key"], state.first_seen)


def _from_batch(result: StepResult, given: BatchAnswer) -> StepResult:
    """The result as realtime stores it, plus where it came from."""
    result["delivery"] = "batch"
    if given.batch_id is not None:
        result["batch_id"] = given.batch_id
    return result
