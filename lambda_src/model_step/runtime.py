"""``ModelStep``: one idempotent, retry-safe model call per business key.

One delivery of one event (``handle``):

1. The detail is put in canonical form (:mod:`.key`), the business key is extracted and every
   part checked, and the record key is built once (:func:`.key.record_key`): business key,
   prompt version, model, request fingerprint, and an operator's retry markers
   (``replay_generation``, or the dead-letter id of a message moved back from the DLQ). A
   keyless event is dead-lettered without a model call.
2. Inside Powertools ``idempotent_function`` (prefix ``IDEMPOTENCY_RECORD_PREFIX``): a
   completed record replays its stored result; a held record raises
   ``IdempotencyAlreadyInProgressError``; otherwise the unit of work runs with the lock held.
3. The unit of work spends the key's attempt budget (:mod:`.budget`) right before the request
   is sent, never a count of this message: copies, kills, throttles and redrives all see one
   budget. A non-retryable failure, a used-up budget or an unstorable answer is STORED as a
   ``dead_lettered`` result; a transient failure raises, so the lock is released and a retry
   really runs.
4. A stored dead letter goes to the DLQ through its own record (suffix ``#dead-letter``), so a
   duplicate sends no second message, and it is counted once per key.

An SQS batch (the buffer queue or the step's redrive queue) is detected by shape; the
buffer-queue path (:mod:`.buffer_queue`) owns retry timing there.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import boto3
from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyValidationError,
)

from . import buffer_queue, clock
from .budget import AttemptBudget, Claim
from .buffer_queue import QueueDelivery
from .components import StepComponents
from .config import Settings
from .dead_letter import truncate
from .delivery_log import DeliveryLog
from .errors import (
    NonRetryableError,
    PayloadMismatchError,
    ReceivesExhaustedError,
    RetriesExhaustedError,
    is_rate_limited,
)
from .key import (
    canonical,
    extract_business_key,
    record_key,
    redrive_marker,
    split_replay_generation,
)
from .model_call import (
    BuildUserMessage,
    ParseAnswer,
    Spend,
    default_user_message,
    error_code,
    model_timeout,
    request_fingerprint,
)
from .outcome import (
    DeadLetteredResult,
    DeliveryStatus,
    Outcome,
    StepResult,
    Usage,
    zero_usage,
)

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

__all__ = ["ModelStep", "default_user_message", "model_timeout", "request_fingerprint"]

OnOutcome = Callable[[Mapping[str, Any], Outcome], None]
IN_PROGRESS_ERROR = "IdempotencyAlreadyInProgressError"
#: Times a row that the buffer queue gave up on is put back while its key has budget left.
REDRIVE_REQUEUES = 2


class _Wait(Exception):
    """Raised inside the unit of work so the lock is released and the row waits ``seconds``
    on the buffer queue as a delayed copy; no attempt is spent."""

    def __init__(self, status: DeliveryStatus, code: str, seconds: float) -> None:
        super().__init__(code)
        self.status = status
        self.code = code
        self.seconds = seconds


@dataclass
class _Delivery:
    """Per-delivery state shared with the idempotent functions (one per delivery)."""

    event: Mapping[str, Any]
    context: Any
    log: DeliveryLog
    queue: QueueDelivery | None = None
    request: dict[str, Any] | None = None  # {"key": RecordKey, "detail": canonical detail}
    spend: Spend = field(default_factory=Spend)
    attempts_spent: int = 0
    ran: bool = False  # the unit of work ran
    sent_dead_letter: bool = False
    counted_dead_letter: bool = False

    @property
    def replayed(self) -> bool:
        """The result came from stored records: no request, no DLQ message."""
        return not self.ran and not self.sent_dead_letter


class ModelStep:
    """An idempotent, retry-safe model call in front of which you can put your own
    prompt building and answer parsing.

    Parameters
    ----------
    settings:
        Explicit settings. Default None: read from the environment on the first invocation
        (see ``model_step.config`` for the variables and their defaults).
    build_user_message:
        ``detail -> str``. Default: ``json.dumps(detail, sort_keys=True)``. It sees the detail
        in canonical form (see ``model_step.key``), never the reserved ``replay_generation``.
    parse_answer:
        ``answer text -> JSON-serialisable value``, stored as ``"parsed"`` in the result and
        replayed with it. Default None (no ``"parsed"`` key). ANY exception it raises, and a
        value the store cannot serialise, dead-letters the answer (stored, never re-billed):
        ``InvalidAnswerError`` and other ``NonRetryableError`` keep their code, anything else
        becomes ``InvalidAnswer``. Raise ``RetryableAnswerError`` to ask for a retry, which
        spends another attempt of the key's budget.
    prompt_version:
        Your handler's own prompt version (e.g. of ``build_user_message``). It joins the
        request fingerprint, so changing it misses the old records. Default None.
    on_outcome:
        ``(event, outcome) -> None``, called once per delivery once its outcome is final (see
        ``model_step.outcome.Outcome``). An exception from it is transient.
    boto3_session:
        Session for the DynamoDB, SQS and Secrets Manager clients. Default: one shared
        ``boto3.session.Session()``. Clients are created on the first invocation.

    Example
    -------
    ::

        from model_step import ModelStep

        step = ModelStep.from_environment(build_user_message=lambda detail: detail["text"])

        def handler(event, context):
            return step.handle(event, context)
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        build_user_message: BuildUserMessage | None = None,
        parse_answer: ParseAnswer | None = None,
        prompt_version: str | None = None,
        on_outcome: OnOutcome | None = None,
        boto3_session: boto3.session.Session | None = None,
    ) -> None:
        self._settings = settings
        self._boto3_session = boto3_session
        self._build_user_message = build_user_message or default_user_message
        self._parse_answer = parse_answer
        self._prompt_version = prompt_version
        self._on_outcome = on_outcome
        self._parts: StepComponents | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_environment(
        cls,
        *,
        build_user_message: BuildUserMessage | None = None,
        parse_answer: ParseAnswer | None = None,
        prompt_version: str | None = None,
        on_outcome: OnOutcome | None = None,
        boto3_session: boto3.session.Session | None = None,
    ) -> ModelStep:
        """A step configured from the environment. Nothing is read, imported or created
        until the first ``handle`` call, so building it at module level is cheap."""
        return cls(
            build_user_message=build_user_message,
            parse_answer=parse_answer,
            prompt_version=prompt_version,
            on_outcome=on_outcome,
            boto3_session=boto3_session,
        )

    @property
    def settings(self) -> Settings:
        """The settings in use (read from the environment on first access if not given)."""
        return self._components().settings

    @property
    def logger(self) -> Logger:
        """The Powertools Logger of this step (service ``POWERTOOLS_SERVICE_NAME``)."""
        return self._components().logger

    # -- entry points --------------------------------------------------------------------------
    def handle(self, event: Mapping[str, Any], context: LambdaContext) -> Any:
        """Process a bare EventBridge event (direct path) or an SQS batch (buffer queue).

        EventBridge event: returns the stored result (``{"status": "completed", ...}`` or
        ``{"status": "dead_lettered", "error_code": ..., ...}``, fresh or replayed: identical);
        raises on transient failures and ``IdempotencyAlreadyInProgressError`` on a concurrent
        duplicate, so Lambda retries. SQS batch: returns ``{"batchItemFailures": [...]}``.
        """
        if buffer_queue.is_sqs_batch(event):
            return self._handle_batch(event, context)
        delivery = self._new_delivery(event, context, None)
        try:
            result = self._deliver(delivery)
        except Exception as exc:
            status: DeliveryStatus = "rate_limited" if delivery.spend.rate_limited else "retry"
            try:
                self._notify(delivery, status, None, error_code(exc))
            except Exception:
                self._components().logger.exception("on_outcome failed on a failed delivery")
            raise
        self._notify(delivery, result["status"], result, _result_code(result))
        return result

    def _handle_batch(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        failures = []
        for record in event["Records"]:
            try:
                self._handle_record(record, context)
            except Exception as exc:
                self._components().logger.warning(
                    "queue record reported as a batch item failure",
                    extra={"message_id": record.get("messageId"), "error_type": error_code(exc)},
                )
                failures.append({"itemIdentifier": record["messageId"]})
        return {"batchItemFailures": failures}

    def _handle_record(self, record: Mapping[str, Any], context: Any) -> None:
        """One SQS record. Returns when it is done (answered, re-enqueued or dead-lettered);
        raises to report it as a batch item failure (SQS retries it after the visibility
        timeout). The hook runs BEFORE any copy is re-enqueued: if it fails, no copy exists
        and this message simply comes back."""
        parts = self._components()
        event = buffer_queue.parse_body(record)
        if event is None:
            parts.dead_letters.send(
                str(record.get("body") or ""),
                error_code="InvalidMessageBody",
                error_message="queue message body is not an EventBridge event (JSON)",
            )
            return
        queue = QueueDelivery.from_record(record, parts.settings.redrive_queue_arn)
        delivery = self._new_delivery(event, context, queue)
        try:
            result = self._deliver(delivery)
        except IdempotencyAlreadyInProgressError:
            self._notify(delivery, "retry", None, IN_PROGRESS_ERROR)
            parts.buffer.requeue(event, queue, self._holder_wait(delivery))
            return
        except _Wait as wait:
            self._notify(delivery, wait.status, None, wait.code)
            parts.buffer.requeue(event, queue, wait.seconds)
            return
        except Exception as exc:
            self._notify(delivery, "retry", None, error_code(exc))
            if queue.source == "redrive":
                # Receives are scarce here and plenty on the buffer queue: the row goes back
                # there (a stored result replays, a failed hand-off is sent again).
                parts.buffer.requeue(event, queue, buffer_queue.RETRY_SPACING_SECONDS)
                return
            if delivery.attempts_spent:
                parts.buffer.space_retry(queue, delivery.attempts_spent)
            raise
        self._notify(delivery, result["status"], result, _result_code(result))

    # -- one delivery ----------------------------------------------------------------------------
    def _new_delivery(
        self, event: Mapping[str, Any], context: Any, queue: QueueDelivery | None
    ) -> _Delivery:
        parts = self._components()
        parts.register_context(context)
        return _Delivery(event, context, DeliveryLog(parts.settings, parts.logger, context), queue)

    def _deliver(self, delivery: _Delivery) -> StepResult:
        """Logs and metrics around :meth:`_process`; returns its result or raises."""
        log = delivery.log
        try:
            result = self._process(delivery)
        except IdempotencyAlreadyInProgressError:
            log.in_progress()
            log.flush()
            raise
        except _Wait as wait:
            log.spent(delivery.spend)
            log.waiting("requeued" if wait.code == "Requeued" else wait.status, wait.code, 0)
            log.flush()
            raise
        except Exception as exc:
            log.spent(delivery.spend)
            log.transient(error_code(exc), getattr(exc, "request_id", None))
            log.flush()
            raise
        log.spent(delivery.spend)
        log.finished(
            result,
            replayed=delivery.replayed,
            sent=delivery.sent_dead_letter,
            counted=delivery.counted_dead_letter,
        )
        log.flush()
        return result

    def _process(self, delivery: _Delivery) -> StepResult:
        parts = self._components()
        settings = parts.settings
        event = delivery.event
        raw_detail = event.get("detail")
        redrive_of = redrive_marker(event)
        try:
            detail, generation = split_replay_generation(
                canonical(raw_detail) if isinstance(raw_detail, dict) else {}
            )
            business_key = extract_business_key(detail, settings.idempotency_key)
        except NonRetryableError as error:
            # No record can hold this outcome; the hand-off is keyed on the event id instead.
            dead_key = {"event_id": event.get("id"), "error_code": error.error_code}
            if redrive_of is not None:
                dead_key["redrive_of"] = redrive_of
            result = self._dead_letter(error, None, dead_key)
            return self._hand_off_result(result, dead_key, delivery)
        delivery.log.fields["business_key"] = business_key
        key = record_key(
            business_key,
            prompt_version=settings.prompt_version,
            model_id=settings.model_id,
            fingerprint=parts.fingerprint,
            replay_generation=generation,
            redrive_of=redrive_of,
        )
        request: dict[str, Any] = {"key": key, "detail": detail}
        delivery.request = request
        try:
            stored: StepResult = parts.complete(request=request, delivery=delivery)
        except IdempotencyValidationError as exc:
            mismatch = PayloadMismatchError(f"same idempotency key, different payload: {exc}")
            payload = hashlib.sha256(default_user_message(detail).encode()).hexdigest()
            dead_key = {**key, "payload": payload}
            result = self._dead_letter(mismatch, key, dead_key)
            return self._hand_off_result(result, dead_key, delivery)
        if stored["status"] == "dead_lettered":
            return self._hand_off_result(stored, dict(key), delivery)
        return stored

    # -- inside the record's lock ----------------------------------------------------------------
    def _complete(self, *, request: dict[str, Any], delivery: _Delivery) -> StepResult:
        """The idempotent unit of work: returns the result to store (an answer or a dead
        letter), raises a transient failure or a :class:`_Wait` (the lock is released)."""
        delivery.ran = True
        parts = self._components()
        key = request["key"]
        budget = parts.budget(request)
        if delivery.queue is not None and delivery.queue.source == "redrive":
            return self._answer_redriven(request, budget, delivery)
        try:
            # Everything that can fail before the request is sent comes before the claim.
            prepared = parts.model_call.prepare(request["detail"])
        except NonRetryableError as error:
            return self._dead_letter(error, key, dict(key))
        claim = budget.claim()
        delivery.attempts_spent = claim.state.attempts
        if not claim.granted:
            return self._dead_letter(_exhausted(claim), key, dict(key))
        if claim.state.interrupted:
            delivery.log.interrupted()
        try:
            message = parts.model_call.send(prepared, delivery.context, delivery.spend)
            return parts.model_call.result(message, key)
        except NonRetryableError as error:
            return self._dead_letter(error, key, dict(key))
        except Exception as exc:
            return self._transient(exc, request, budget, claim, delivery)

    def _transient(
        self,
        exc: Exception,
        request: dict[str, Any],
        budget: AttemptBudget,
        claim: Claim,
        delivery: _Delivery,
    ) -> StepResult:
        """A transient failure of a claimed attempt: a rate limit gives the attempt back and
        waits (or, past the window, is stored as ``RateLimitExhausted``); anything else
        stays spent, and the last attempt's failure is stored as ``RetriesExhausted``."""
        settings = self._components().settings
        key = request["key"]
        code = error_code(exc)
        request_id = getattr(exc, "request_id", None)
        if is_rate_limited(exc):
            state = budget.give_back()
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
                return self._dead_letter(exhausted, key, dict(key))
            if delivery.queue is None:
                raise exc
            raise _Wait("rate_limited", code, wait) from exc
        budget.report_failure(code)
        if claim.state.attempts < budget.limit:
            raise exc
        exhausted = RetriesExhaustedError(
            f"transient failure on attempt {claim.state.attempts} of {budget.limit}: "
            f"{code}: {truncate(str(exc), 300)}",
            error_code=code,
            request_id=request_id,
        )
        return self._dead_letter(exhausted, key, dict(key))

    def _answer_redriven(
        self, request: dict[str, Any], budget: AttemptBudget, delivery: _Delivery
    ) -> StepResult:
        """A row the buffer queue gave up on (``maxReceiveCount`` receives without an answer:
        throttles, kills, timeouts). Never a model call: it goes back with a fresh receive
        count while its key has budget and time left, else it is stored and dead-lettered."""
        settings = self._components().settings
        key = request["key"]
        state = budget.note_requeue()
        if state.attempts >= budget.limit:
            return self._dead_letter(_exhausted(Claim(False, state)), key, dict(key))
        if (
            state.requeues <= REDRIVE_REQUEUES
            and state.age_seconds(clock.now()) < settings.max_event_age_seconds
        ):
            raise _Wait("retry", "Requeued", 0)
        assert delivery.queue is not None
        error = ReceivesExhaustedError(
            f"the buffer queue gave up on this row {state.requeues} times (the last after "
            f"{delivery.queue.receive_count} receives) without an answer: crashes, timeouts or "
            f"throttles; {state.attempts} of {budget.limit} attempts were spent"
        )
        return self._dead_letter(error, key, dict(key))

    def _hand_off(self, *, request: dict[str, Any], delivery: _Delivery) -> dict[str, Any]:
        """The idempotent DLQ send (record suffix ``#dead-letter``). Raises
        ``DeadLetterError`` when SQS fails, which releases this record only. The key is
        counted by the first delivery whose send succeeds, once."""
        parts = self._components()
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

    # -- results -----------------------------------------------------------------------------------
    def _dead_letter(
        self, error: NonRetryableError, key: Mapping[str, Any] | None, dead_key: dict[str, Any]
    ) -> DeadLetteredResult:
        parts = self._components()
        result = DeadLetteredResult(
            status="dead_lettered",
            error_code=error.error_code,
            error_message=truncate(str(error) or error.error_code),
            request_id=error.request_id,
            key=None if key is None else key["business_key"],
            model=parts.settings.model_id,
            prompt_version=parts.settings.prompt_version,
            dead_letter_id=parts.dead_letter_id(dead_key),
        )
        if key is not None and "replay_generation" in key:
            result["replay_generation"] = key["replay_generation"]
        return result

    def _hand_off_result(
        self, result: DeadLetteredResult, dead_key: dict[str, Any], delivery: _Delivery
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
        sent = self._components().hand_off(request=request, delivery=delivery)
        handed_off = DeadLetteredResult(**result)
        handed_off["dead_letter_message_id"] = sent["dead_letter_message_id"]
        return handed_off

    def _holder_wait(self, delivery: _Delivery) -> float:
        """Seconds until the holder's lock expires, or the default when unknown."""
        if delivery.request is None:
            return buffer_queue.IN_PROGRESS_DEFAULT_WAIT_SECONDS
        expiry_ms = self._components().persistence.in_progress_expiry_ms(delivery.request)
        if expiry_ms is None:
            return buffer_queue.IN_PROGRESS_DEFAULT_WAIT_SECONDS
        return max(1.0, expiry_ms / 1000 - clock.now() + 1)

    def _notify(
        self,
        delivery: _Delivery,
        status: DeliveryStatus,
        result: StepResult | None,
        code: str | None,
    ) -> None:
        if self._on_outcome is None:
            return
        spend = delivery.spend
        billed = spend.requests > 0
        self._on_outcome(
            delivery.event,
            Outcome(
                status=status,
                replayed=result is not None and delivery.replayed,
                model_requests=1 if billed else 0,
                rate_limited=1 if spend.rate_limited else 0,
                usage=Usage(**spend.usage) if billed else zero_usage(),
                result=result,
                error_code=code,
            ),
        )

    def _components(self) -> StepComponents:
        if self._parts is None:
            with self._lock:
                if self._parts is None:
                    self._parts = StepComponents(
                        self._settings or Settings.from_environment(),
                        complete=self._complete,
                        hand_off=self._hand_off,
                        build_user_message=self._build_user_message,
                        parse_answer=self._parse_answer,
                        boto3_session=self._boto3_session,
                        handler_prompt_version=self._prompt_version,
                    )
        return self._parts


def _result_code(result: StepResult) -> str | None:
    return result["error_code"] if result["status"] == "dead_lettered" else None


def _exhausted(claim: Claim) -> RetriesExhaustedError:
    state = claim.state
    return RetriesExhaustedError(
        f"the key's budget of attempts is spent ({state.attempts} used); the last one "
        f"ended with {state.exhaustion_code}",
        error_code=state.exhaustion_code,
    )
