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

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import boto3
from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
)

from . import batch_limits, batch_signals, buffer_queue, clock, delivery_flow, misconfiguration
from .buffer_queue import QueueDelivery
from .components import StepComponents
from .config import Settings
from .delivery import IN_PROGRESS_ERROR, Delivery, Wait
from .delivery_log import DeliveryLog
from .errors import (
    DeadLetterError,
)
from .hand_off_item import MAX_HAND_OFF_FAILURES
from .model_call import (
    BuildUserMessage,
    ParseAnswer,
    default_user_message,
    error_code,
    model_timeout,
    request_cost_usd,
    request_fingerprint,
)
from .outcome import (
    DeliveryStatus,
    Outcome,
    StepResult,
    usage_of,
)
from .persistence import LockHeld

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from .batch_answer import BatchAnswer

__all__ = ["ModelStep", "default_user_message", "model_timeout", "request_fingerprint"]

OnOutcome = Callable[[Mapping[str, Any], Outcome], None]


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
        # Message Batches delivery (issue 19): rows staged by the invocation in progress.
        self._staging = threading.local()

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
        if batch_signals.is_tick(event):
            return self._batch_tick(context)
        if buffer_queue.is_sqs_batch(event):
            return self._handle_batch(event, context)
        if self._components().batch is not None:
            return self._stage_direct(event, context)
        delivery = self._new_delivery(event, context, None)
        try:
            result = delivery_flow.deliver(self._components(), delivery)
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
        self._staging.rows = []
        staging = self._components().batch is not None
        for record in event["Records"]:
            if staging and batch_limits.out_of_time(context):
                # Message Batches delivery (issue 19): up to 10,000 rows a delivery; the
                # ones left when time runs short come back, never half-staged.
                failures.append({"itemIdentifier": record["messageId"]})
                continue
            try:
                self._handle_record(record, context)
            except Exception as exc:
                self._components().logger.warning(
                    "queue record reported as a batch item failure",
                    extra={"message_id": record.get("messageId"), "error_type": error_code(exc)},
                )
                failures.append({"itemIdentifier": record["messageId"]})
        failures.extend(self._flush_staged(context))
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
            result = delivery_flow.deliver(self._components(), delivery)
        except batch_signals.Staged as staged:
            # Message Batches delivery (issue 19): the key waits in a batch; the message is
            # deleted once the invocation's submission is written (_flush_staged).
            if staged.new:
                sent = (record.get("attributes") or {}).get("SentTimestamp")
                sent_at = float(sent) / 1000 if sent else clock.now()
                self._staging.rows.append(
                    (record["messageId"], batch_signals.StagedRow(staged.custom_id, sent_at))
                )
            return
        except IdempotencyAlreadyInProgressError as held:
            self._notify(delivery, "retry", None, IN_PROGRESS_ERROR)
            delivery_flow.requeue(parts, delivery, event, queue, _holder_wait(held))
            return
        except Wait as wait:
            self._notify(delivery, wait.status, None, wait.code)
            delivery_flow.requeue(parts, delivery, event, queue, wait.seconds)
            return
        except Exception as exc:
            self._notify(delivery, "retry", None, error_code(exc))
            if misconfiguration.waits_for_the_fix(exc):  # issue 36: waits, never spins
                if queue.source == "buffer":
                    parts.buffer.hold(queue, misconfiguration.CONFIGURATION_RETRY_SECONDS)
                raise
            if queue.source == "redrive" and not _dead_letter_queue_refuses(exc):
                # Receives are scarce here and plenty on the buffer queue: the row goes back
                # there (a stored result replays, a failed hand-off is sent again). Not when
                # the DLQ keeps refusing the key's dead letter: raised, the row moves on to
                # the DLQ by the redrive policy, which needs no send permission.
                delivery_flow.requeue(
                    parts, delivery, event, queue, buffer_queue.RETRY_SPACING_SECONDS
                )
                return
            if delivery.attempts_spent:
                parts.buffer.space_retry(queue, delivery.attempts_spent)
            raise
        self._notify(delivery, result["status"], result, _result_code(result))

    # -- one delivery ----------------------------------------------------------------------------
    def _new_delivery(
        self, event: Mapping[str, Any], context: Any, queue: QueueDelivery | None
    ) -> Delivery:
        parts = self._components()
        parts.register_context(context)
        return Delivery(event, context, DeliveryLog(parts.settings, parts.logger, context), queue)

    def _notify(
        self,
        delivery: Delivery,
        status: DeliveryStatus,
        result: StepResult | None,
        code: str | None,
    ) -> None:
        if self._on_outcome is None:
            return
        spend = delivery.spend
        # Issue 32: this delivery's dollars (a replay's result keeps its original's).
        cost = (
            request_cost_usd(
                self._components().settings, spend.usage, batch=False if spend.realtime else None
            )
            if spend.requests > 0
            else 0.0
        )
        self._on_outcome(delivery.event, delivery.outcome(status, result, code, cost_usd=cost))

    def _components(self) -> StepComponents:
        if self._parts is None:
            with self._lock:
                if self._parts is None:
                    self._parts = StepComponents(
                        self._settings or Settings.from_environment(),
                        build_user_message=self._build_user_message,
                        parse_answer=self._parse_answer,
                        boto3_session=self._boto3_session,
                        handler_prompt_version=self._prompt_version,
                    )
        return self._parts

    # -- Message Batches delivery (issue 19) ----------------------------------------------------
    def _stage_direct(self, event: Mapping[str, Any], context: Any) -> Any:
        """A bare EventBridge event under batch delivery: staged as a one-row submission
        (or answered from its stored record)."""
        delivery = self._new_delivery(event, context, None)
        try:
            result = delivery_flow.deliver(self._components(), delivery)
        except batch_signals.Staged as staged:
            parts = self._components()
            assert parts.batch is not None
            rows = [batch_signals.StagedRow(staged.custom_id, clock.now())] if staged.new else []
            # A failure raises: Lambda retries the event, which adopts its staged row.
            parts.batch.flush(rows, context, self._answer_from_batch)
            return {"status": "staged"}
        self._notify(delivery, result["status"], result, _result_code(result))
        return result

    def _flush_staged(self, context: Any) -> list[dict[str, str]]:
        """Write the invocation's staged rows as one submission (sent when due); the batch
        item failures to report if that write failed (the rows come back and are adopted)."""
        parts = self._components()
        rows: list[tuple[str, batch_signals.StagedRow]] = getattr(self._staging, "rows", [])
        self._staging.rows = []
        if parts.batch is None:
            return []
        try:
            parts.batch.flush([row for _, row in rows], context, self._answer_from_batch)
        except Exception as exc:
            parts.logger.warning(
                "staged rows not written as a submission; their messages come back",
                extra={"rows": len(rows), "error_type": error_code(exc)},
            )
            return [{"itemIdentifier": message_id} for message_id, _ in rows if message_id]
        return []

    def _batch_tick(self, context: Any) -> dict[str, Any]:
        """The schedule's ``{"model_step_batch": "tick"}``: submit, reconcile, collect."""
        parts = self._components()
        if parts.batch is None:
            return {"model_step_batch": "realtime"}
        parts.register_context(context)
        return parts.batch.tick(context, self._answer_from_batch)

    def _answer_from_batch(
        self, event: Mapping[str, Any], answer: BatchAnswer, context: Any
    ) -> StepResult | None:
        """One key's batch result through the realtime path (stored in its record, dead
        letter handed off, result event published), then ``on_outcome`` once. None when the
        key is sent again (nothing stored, no outcome yet)."""
        delivery = self._new_delivery(event, context, None)
        delivery.batch_answer = answer
        delivery.ran = True  # the answer is this collection's, not another delivery's
        if answer.kind == "succeeded" and answer.message is not None:
            delivery.spend.requests = 1
            delivery.spend.usage = usage_of(answer.message.usage)
        try:
            result = delivery_flow.deliver(self._components(), delivery)
        except batch_signals.BatchResubmit:
            return None
        self._notify(delivery, result["status"], result, _result_code(result))
        return result


def _dead_letter_queue_refuses(exc: Exception) -> bool:
    """The DLQ refused this key's dead letter on ``MAX_HAND_OFF_FAILURES`` deliveries."""
    return isinstance(exc, DeadLetterError) and exc.failures >= MAX_HAND_OFF_FAILURES


def _result_code(result: StepResult) -> str | None:
    return result["error_code"] if result["status"] == "dead_lettered" else None


def _holder_wait(held: IdempotencyAlreadyInProgressError) -> float:
    """Seconds until the lock ``held`` met expires (the key's record, its DLQ hand-off's or
    its result event's: :func:`.persistence.naming_the_holder`), or the default when
    unknown."""
    expiry_ms = held.lock_expiry_ms if isinstance(held, LockHeld) else None
    if expiry_ms is None:
        return buffer_queue.IN_PROGRESS_DEFAULT_WAIT_SECONDS
    return max(1.0, expiry_ms / 1000 - clock.now() + 1)
