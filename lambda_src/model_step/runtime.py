"""``ModelStep``: one idempotent, retry-safe model call per EventBridge event.

Flow of ``handle(event, context)`` for one EventBridge event:

1. Extract the business key from ``event["detail"]`` and check every part, and check the
   reserved field ``replay_generation`` (an operator's retry: an int >= 1). Either failing is
   dead-lettered without a model call.
2. Run the model call inside Powertools ``idempotent_function`` (record prefix
   ``IDEMPOTENCY_RECORD_PREFIX``), keyed on business key + ``PROMPT_VERSION`` + ``MODEL_ID`` +
   the request fingerprint (+ the replay generation when present) and validated on the detail
   without ``replay_generation``. A completed record replays its stored outcome; a record in
   progress raises ``IdempotencyAlreadyInProgressError``.
3. Transient failures raise: the record is released and a retry calls the model again.
   Non-retryable ones (4xx, a label outside ``ALLOWED_LABELS``, an incomplete ``stop_reason``,
   a parser error) are STORED as a ``dead_lettered`` outcome, then handed to the DLQ through a
   second idempotent record (suffix ``#dead-letter``): a duplicate replays both, so it makes
   no model request and sends no second DLQ message; a failed send raises and its retry only
   re-sends.

An SQS batch (the buffer queue) is detected by shape; each record's body is such an event, and
the runtime owns retry timing there (see ``_handle_record``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

import boto3
from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyValidationError,
)

from . import buffer_queue
from .client import ModelClientProvider
from .config import Settings
from .dead_letter import DeadLetterPublisher, truncate
from .errors import (
    COMPLETE_STOP_REASONS,
    IncompleteAnswerError,
    InvalidAnswerError,
    InvalidReplayGenerationError,
    LabelNotAllowedError,
    MaxTokensReachedError,
    ModelRefusedError,
    NonRetryableError,
    PayloadMismatchError,
    ResultTooLargeError,
    RetriesExhaustedError,
    RetryableAnswerError,
    classify_model_error,
    is_rate_limited,
    should_retry_header,
)
from .key import extract_business_key
from .persistence import ReleasingDynamoDBPersistenceLayer

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

BuildUserMessage = Callable[[dict[str, Any]], str]
ParseAnswer = Callable[[str], Any]
OnOutcome = Callable[[Mapping[str, Any], Mapping[str, Any]], None]

# Seconds kept between the SDK giving up and Lambda killing the invocation, so the failure is
# a clean exception (record deleted, retry scheduled) rather than a timeout.
TIMEOUT_SAFETY_MARGIN_SECONDS = 3.0
# Never hand the SDK less than this; a shorter timeout could not succeed anyway.
MIN_MODEL_TIMEOUT_SECONDS = 1.0
#: Reserved detail field of an operator's retry; joins the key, never the payload validation.
REPLAY_GENERATION_FIELD = "replay_generation"
#: At most this many bytes of answer text are stored (as Powertools stores it: JSON with
#: ASCII escapes). See the README ("Stored results") for why 64 KB.
MAX_STORED_ANSWER_BYTES = 64 * 1024
#: The whole stored result (answer, parsed value, key, ...) must fit in this, far below
#: DynamoDB's 400 KB item limit; a larger one is dead-lettered as ``ResultTooLarge``.
MAX_STORED_RESULT_BYTES = 300 * 1024
DEAD_LETTER_SUFFIX = "#dead-letter"
IN_PROGRESS_ERROR = "IdempotencyAlreadyInProgressError"


def default_user_message(detail: Mapping[str, Any]) -> str:
    """The default user message: the event detail as JSON with sorted keys (stable, so the
    same event always produces the same request)."""
    return json.dumps(detail, sort_keys=True, ensure_ascii=False, default=str)


def model_timeout(limit_seconds: float, context: Any) -> float:
    """``min(limit_seconds, remaining Lambda time - 3 s)``, at least 1 s."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is None:
        return limit_seconds
    budget = remaining() / 1000 - TIMEOUT_SAFETY_MARGIN_SECONDS
    return max(MIN_MODEL_TIMEOUT_SECONDS, min(limit_seconds, budget))


def request_fingerprint(settings: Settings, handler_prompt_version: str | None = None) -> str:
    """sha256 over everything that shapes the request: system prompt, model id, max_tokens,
    sorted allowed labels, PROMPT_VERSION and a custom handler's declared prompt version."""
    document = {
        "system_prompt": settings.system_prompt,
        "model_id": settings.model_id,
        "max_tokens": settings.max_tokens,
        "allowed_labels": sorted(settings.allowed_labels),
        "prompt_version": settings.prompt_version,
        "handler_prompt_version": handler_prompt_version,
    }
    encoded = json.dumps(document, sort_keys=True, ensure_ascii=False).encode()
    return hashlib.sha256(encoded).hexdigest()


def split_replay_generation(detail: Mapping[str, Any]) -> tuple[dict[str, Any], int | None]:
    """``(detail without replay_generation, generation or None)``. Raises
    ``InvalidReplayGenerationError`` unless the field is absent or an int >= 1."""
    rest = {name: value for name, value in detail.items() if name != REPLAY_GENERATION_FIELD}
    if REPLAY_GENERATION_FIELD not in detail:
        return rest, None
    value = detail[REPLAY_GENERATION_FIELD]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidReplayGenerationError(
            f"detail.{REPLAY_GENERATION_FIELD} must be an integer >= 1, got "
            f"{truncate(repr(value), 80)}"
        )
    return rest, value


def cap_answer(text: str, limit: int = MAX_STORED_ANSWER_BYTES) -> tuple[str, bool]:
    """``(text, False)`` if its stored form (JSON, ASCII escapes) fits ``limit`` bytes, else
    the longest prefix that fits and True."""
    if len(json.dumps(text)) <= limit:
        return text, False
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if len(json.dumps(text[:middle])) <= limit:
            low = middle
        else:
            high = middle - 1
    return text[:low], True


def _zero_usage() -> dict[str, int]:
    return {"input_tokens": 0, "output_tokens": 0}


@dataclass
class _Invocation:
    """Per-delivery state shared with the idempotent function (one per delivery)."""

    context: Any
    queue: buffer_queue.QueueDelivery | None = None
    ran: bool = False  # the model-call body ran
    replayed: bool = False  # the outcome came from a stored record: no model request
    requests: int = 0  # billed requests (a 401, 429 or 529 answer is not billed)
    rate_limited: int = 0  # 429 / 529 answers
    usage: dict[str, int] = field(default_factory=_zero_usage)
    verdict: str | None = None  # transient: "rate_limited" | "retry"
    wait_seconds: float = 0.0  # rate limited: how long the row should wait
    sent_dead_letter: bool = False  # this delivery's hand-off sent a DLQ message


# boto3 sessions are not thread-safe to create clients from, so every client is created under
# this lock. Steps share one default session so its loaded service models are reused.
_CLIENT_LOCK = threading.Lock()
_default_session: boto3.session.Session | None = None


def _shared_session() -> boto3.session.Session:
    global _default_session
    if _default_session is None:
        _default_session = boto3.session.Session()
    return _default_session


class _Runtime:
    """Everything built on the first invocation: settings, AWS clients, Powertools objects."""

    def __init__(
        self,
        settings: Settings,
        complete: Callable[..., dict],
        hand_off: Callable[..., dict],
        boto3_session: boto3.session.Session | None,
        handler_prompt_version: str | None,
    ) -> None:
        self.settings = settings
        self.logger = Logger(service=settings.service_name)
        self._session = boto3_session
        self._clients: dict[str, Any] = {}
        self.fingerprint = request_fingerprint(settings, handler_prompt_version)
        self.idempotency_config = IdempotencyConfig(
            event_key_jmespath="key",
            payload_validation_jmespath="detail",
            # Belt and braces: extract_business_key already rejects incomplete keys.
            raise_on_no_idempotency_key=True,
            expires_after_seconds=settings.expires_after_seconds,
        )
        self.persistence = ReleasingDynamoDBPersistenceLayer(
            table_name=settings.idempotency_table_name,
            boto3_client=self.boto3_client("dynamodb"),
        )
        self.complete = idempotent_function(
            complete,
            data_keyword_argument="request",
            persistence_store=self.persistence,
            config=self.idempotency_config,
            key_prefix=settings.record_prefix,
        )
        # The DLQ hand-off has its own record (and persistence object: Powertools keeps the
        # prefix on it), keyed on the outcome's key; no payload validation.
        self.dead_letter_config = IdempotencyConfig(
            event_key_jmespath="key",
            raise_on_no_idempotency_key=True,
            expires_after_seconds=settings.expires_after_seconds,
        )
        self.hand_off = idempotent_function(
            hand_off,
            data_keyword_argument="request",
            persistence_store=ReleasingDynamoDBPersistenceLayer(
                table_name=settings.idempotency_table_name,
                boto3_client=self.boto3_client("dynamodb"),
            ),
            config=self.dead_letter_config,
            key_prefix=settings.record_prefix + DEAD_LETTER_SUFFIX,
        )
        self.model_clients = ModelClientProvider(settings, self.boto3_client)
        self.dead_letters = DeadLetterPublisher(
            settings.dead_letter_queue_url, lambda: self.boto3_client("sqs")
        )

    def boto3_client(self, service_name: str) -> Any:
        """A cached boto3 client for ``service_name``, created on first use."""
        with _CLIENT_LOCK:
            if service_name not in self._clients:
                session = self._session or _shared_session()
                self._clients[service_name] = session.client(service_name)
            return self._clients[service_name]

    def register_context(self, context: Any) -> None:
        # idempotent_function does not do this itself; without it a timed-out invocation
        # would leave its record INPROGRESS until expiry and block every retry.
        self.idempotency_config.register_lambda_context(context)
        self.dead_letter_config.register_lambda_context(context)


class ModelStep:
    """An idempotent, retry-safe model call in front of which you can put your own
    prompt building and answer parsing.

    Parameters
    ----------
    settings:
        Explicit settings. Default None: read from the environment on the first invocation
        (see ``model_step.config`` for the variables and their defaults).
    build_user_message:
        ``detail -> str``. Default: ``json.dumps(detail, sort_keys=True)``. It never sees the
        reserved ``replay_generation`` field.
    parse_answer:
        ``answer text -> JSON-serialisable value``, stored as ``"parsed"`` in the result and
        replayed with it. Default None (no ``"parsed"`` key). ANY exception it raises
        dead-letters the answer (stored, never re-billed): ``InvalidAnswerError`` and other
        ``NonRetryableError`` keep their code, anything else (e.g. ``json.JSONDecodeError``)
        becomes ``InvalidAnswer``. Raise ``RetryableAnswerError`` to ask for a retry, which is
        a new billed request.
    prompt_version:
        Your handler's own prompt version (e.g. of ``build_user_message``). It joins the
        request fingerprint, so changing it misses the old records. Default None.
    on_outcome:
        ``(event, outcome) -> None``, called once per delivery once its outcome is final (see
        the README for the ``outcome`` keys). An exception from it is transient.
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
        self._runtime: _Runtime | None = None
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
        return self._get_runtime().settings

    @property
    def logger(self) -> Logger:
        """The Powertools Logger of this step (service ``POWERTOOLS_SERVICE_NAME``)."""
        return self._get_runtime().logger

    # -- entry point -------------------------------------------------------------------------
    def handle(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
        """Process a bare EventBridge event (direct path) or an SQS batch (buffer queue).

        EventBridge event: returns ``{"status": "completed", ...}`` (fresh or replayed:
        identical) or ``{"status": "dead_lettered", "error_code": ..., ...}``; raises on
        transient failures and ``IdempotencyAlreadyInProgressError`` on a concurrent duplicate,
        so Lambda retries. SQS batch: returns ``{"batchItemFailures": [...]}``.
        """
        if buffer_queue.is_sqs_batch(event):
            return self._handle_batch(event, context)
        invocation = _Invocation(context=context)
        try:
            result = self._deliver(event, context, invocation)
        except Exception as exc:
            status = "rate_limited" if invocation.rate_limited else "retry"
            try:
                self._notify(event, invocation, status, None, _error_code(exc))
            except Exception:
                self._get_runtime().logger.exception("on_outcome failed on a failed delivery")
            raise
        self._notify(event, invocation, result["status"], result, result.get("error_code"))
        return result

    # -- one delivery of one event -------------------------------------------------------------
    def _deliver(
        self, event: Mapping[str, Any], context: Any, invocation: _Invocation
    ) -> dict[str, Any]:
        """Metrics and logs around ``_process``; returns its result or raises."""
        runtime = self._get_runtime()
        settings = runtime.settings
        runtime.register_context(context)
        metrics = EphemeralMetrics(
            namespace=settings.metrics_namespace, service=settings.service_name
        )
        log: dict[str, Any] = {
            "prompt_version": settings.prompt_version,
            "model_id": settings.model_id,
            "aws_request_id": getattr(context, "aws_request_id", None),
        }
        try:
            try:
                result = self._process(event, invocation, log)
            except IdempotencyAlreadyInProgressError:
                metrics.add_metric("ConcurrentDuplicates", MetricUnit.Count, 1)
                runtime.logger.warning(
                    "duplicate while first delivery in progress; retry later",
                    extra={**log, "outcome": "in_progress"},
                )
                raise
            except Exception as exc:
                self._count_requests(metrics, invocation)
                if not (invocation.queue is not None and invocation.verdict == "rate_limited"):
                    metrics.add_metric("TransientFailures", MetricUnit.Count, 1)
                runtime.logger.warning(
                    "rate limited; the row waits"
                    if invocation.rate_limited
                    else "transient failure; raising so the delivery is retried",
                    extra={
                        **log,
                        "outcome": "rate_limited" if invocation.rate_limited else "retry",
                        "error_type": type(exc).__name__,
                        "request_id": getattr(exc, "request_id", None),
                    },
                )
                raise
            self._count_requests(metrics, invocation)
            if result["status"] == "completed":
                duplicate = invocation.replayed
                if duplicate:
                    metrics.add_metric("DuplicatesSuppressed", MetricUnit.Count, 1)
                runtime.logger.info(
                    "duplicate suppressed" if duplicate else "model answer stored",
                    extra={
                        **log,
                        "outcome": "duplicate" if duplicate else "completed",
                        "request_id": result.get("request_id"),
                    },
                )
                return result
            # dead_lettered: fresh, a re-send after a failed send, or a pure replay.
            if invocation.sent_dead_letter:
                metrics.add_metric("NonRetryableFailures", MetricUnit.Count, 1)
                runtime.logger.error(
                    "non-retryable failure sent to dead-letter queue",
                    extra={
                        **log,
                        "outcome": "dead_lettered",
                        "error_code": result["error_code"],
                        "error_message": result["error_message"],
                        "request_id": result.get("request_id"),
                        "dead_letter_message_id": result.get("dead_letter_message_id"),
                    },
                )
            else:
                metrics.add_metric("DuplicatesSuppressed", MetricUnit.Count, 1)
                runtime.logger.info(
                    "duplicate of a dead-lettered event suppressed",
                    extra={
                        **log,
                        "outcome": "duplicate",
                        "error_code": result["error_code"],
                        "request_id": result.get("request_id"),
                    },
                )
            return result
        finally:
            # Only flush when something was recorded: an empty flush warns.
            if metrics.metric_set:
                metrics.flush_metrics()

    @staticmethod
    def _count_requests(metrics: EphemeralMetrics, invocation: _Invocation) -> None:
        if invocation.requests:
            metrics.add_metric("ModelRequests", MetricUnit.Count, invocation.requests)
        if invocation.rate_limited:
            metrics.add_metric("RateLimited", MetricUnit.Count, invocation.rate_limited)

    def _process(
        self, event: Mapping[str, Any], invocation: _Invocation, log: dict[str, Any]
    ) -> dict[str, Any]:
        runtime = self._get_runtime()
        settings = runtime.settings
        raw_detail = event.get("detail")
        raw_detail = raw_detail if isinstance(raw_detail, dict) else {}
        key: list[Any] | None = None
        try:
            key = extract_business_key(
                {k: v for k, v in raw_detail.items() if k != REPLAY_GENERATION_FIELD},
                settings.idempotency_key,
            )
            log["business_key"] = key
            detail, generation = split_replay_generation(raw_detail)
        except NonRetryableError as error:
            # No record can hold this outcome; the hand-off is keyed on the event id instead.
            event_id = event.get("id")
            dead_key = {"event_id": event_id, "error_code": error.error_code} if event_id else None
            outcome = self._dead_letter_outcome(error, key, None)
            outcome = self._hand_off_outcome(event, outcome, dead_key, invocation)
            invocation.replayed = not invocation.sent_dead_letter
            return outcome

        record_key: dict[str, Any] = {
            "business_key": key,
            "prompt_version": settings.prompt_version,
            "model_id": settings.model_id,
            "fingerprint": runtime.fingerprint,
        }
        if generation is not None:
            record_key[REPLAY_GENERATION_FIELD] = generation
            log[REPLAY_GENERATION_FIELD] = generation
        request = {"key": record_key, "detail": detail}
        try:
            outcome = runtime.complete(request=request, invocation=invocation)
        except IdempotencyValidationError as exc:
            error = PayloadMismatchError(f"same idempotency key, different payload: {exc}")
            payload = hashlib.sha256(default_user_message(detail).encode()).hexdigest()
            outcome = self._dead_letter_outcome(error, key, generation)
            outcome = self._hand_off_outcome(
                event, outcome, {**record_key, "payload": payload}, invocation
            )
            invocation.replayed = not invocation.sent_dead_letter
            return outcome
        invocation.replayed = not invocation.ran
        if outcome["status"] == "dead_lettered":
            return self._hand_off_outcome(event, outcome, record_key, invocation)
        return outcome

    def _dead_letter_outcome(
        self, error: NonRetryableError, key: list[Any] | None, generation: int | None
    ) -> dict[str, Any]:
        settings = self._get_runtime().settings
        outcome: dict[str, Any] = {
            "status": "dead_lettered",
            "error_code": error.error_code,
            "error_message": truncate(str(error) or error.error_code),
            "request_id": error.request_id,
            "key": key,
            "model": settings.model_id,
            "prompt_version": settings.prompt_version,
        }
        if generation is not None:
            outcome[REPLAY_GENERATION_FIELD] = generation
        return outcome

    def _hand_off_outcome(
        self,
        event: Mapping[str, Any],
        outcome: dict[str, Any],
        dead_key: dict[str, Any] | None,
        invocation: _Invocation,
    ) -> dict[str, Any]:
        """Send a dead-lettered outcome to the DLQ once per key (its own record), and return
        the outcome with the DLQ message id (replayed for duplicates)."""
        runtime = self._get_runtime()
        request = {
            "event": event,
            "error_code": outcome["error_code"],
            "error_message": outcome["error_message"],
            "request_id": outcome.get("request_id"),
        }
        if dead_key is None:  # no key at all (an event without an id): send, not recorded
            sent = self._hand_off(request=request, invocation=invocation)
        else:
            sent = runtime.hand_off(request={**request, "key": dead_key}, invocation=invocation)
        return {**outcome, "dead_letter_message_id": sent["dead_letter_message_id"]}

    # -- inside the idempotency records --------------------------------------------------------
    def _complete(self, *, request: dict[str, Any], invocation: _Invocation) -> dict[str, Any]:
        """The idempotent unit of work. Returns the outcome to store: a completed answer or a
        non-retryable failure. Raises transient failures (the record is then released)."""
        invocation.ran = True
        generation = request["key"].get(REPLAY_GENERATION_FIELD)
        key = request["key"]["business_key"]
        try:
            return self._ask_model(request, invocation)
        except NonRetryableError as error:
            return self._dead_letter_outcome(error, key, generation)
        except Exception as exc:
            exhausted = self._transient_verdict(exc, invocation)
            if exhausted is None:
                raise
            return self._dead_letter_outcome(exhausted, key, generation)

    def _hand_off(self, *, request: dict[str, Any], invocation: _Invocation) -> dict[str, Any]:
        """The idempotent DLQ send (record suffix ``#dead-letter``). Raises
        ``DeadLetterError`` when SQS fails, which releases this record only."""
        message_id = self._get_runtime().dead_letters.send(
            request["event"],
            error_code=request["error_code"],
            error_message=request["error_message"],
            request_id=request.get("request_id"),
        )
        invocation.sent_dead_letter = True
        return {"dead_letter_message_id": message_id}

    def _transient_verdict(
        self, exc: BaseException, invocation: _Invocation
    ) -> NonRetryableError | None:
        """On the buffer-queue path, decide what a transient failure means: a rate-limit wait
        (no attempt), a retry, or - past the wait window or the attempt budget - an outcome to
        store and dead-letter. Always None (raise) on the direct path."""
        queue = invocation.queue
        settings = self._get_runtime().settings
        request_id = getattr(exc, "request_id", None)
        if is_rate_limited(exc):
            invocation.verdict = "rate_limited"
            if queue is None:
                return None
            wait = buffer_queue.retry_after_seconds(exc)
            if wait is None:
                wait = buffer_queue.backoff_seconds(queue.rate_limited_before)
            invocation.wait_seconds = wait
            if queue.event_age_seconds + wait > settings.max_event_age_seconds:
                return RetriesExhaustedError(
                    f"still rate limited ({type(exc).__name__}) after "
                    f"{queue.event_age_seconds:.0f} s; waiting {wait:.0f} s more would pass "
                    f"MAX_EVENT_AGE_SECONDS={settings.max_event_age_seconds}",
                    error_code="RateLimitExhausted",
                    request_id=request_id,
                )
            return None
        invocation.verdict = "retry"
        if queue is None or queue.attempt < settings.max_attempts:
            return None
        return RetriesExhaustedError(
            f"transient failure on attempt {queue.attempt} of {settings.max_attempts}: "
            f"{type(exc).__name__}: {exc}",
            error_code=_error_code(exc),
            request_id=request_id,
        )

    def _ask_model(self, request: dict[str, Any], invocation: _Invocation) -> dict[str, Any]:
        runtime = self._get_runtime()
        settings = runtime.settings
        user_message = self._build_user_message(request["detail"])
        client = runtime.model_clients.get()
        try:
            message = self._send(client, user_message, invocation)
        except Exception as exc:
            if not _is_auth_failure(exc) or not runtime.model_clients.can_refresh:
                _raise_classified(exc)
            # A rotated key: re-read the secret once and, if it changed, retry once. A 401 is
            # not billed, so this stays within one billed request per attempt.
            client, changed = runtime.model_clients.refresh(client)
            if not changed:
                _raise_classified(exc)
            try:
                message = self._send(client, user_message, invocation)
            except Exception as retry_exc:
                _raise_classified(retry_exc)

        request_id = getattr(message, "_request_id", None)
        invocation.usage = {
            "input_tokens": message.usage.input_tokens,
            "output_tokens": message.usage.output_tokens,
        }
        stop_reason = getattr(message, "stop_reason", None)
        if stop_reason not in COMPLETE_STOP_REASONS:
            raise _incomplete(stop_reason, message.usage.output_tokens, request_id)
        full_text = "".join(
            getattr(block, "text", "") for block in message.content if block.type == "text"
        ).strip()
        text, truncated = cap_answer(full_text)
        result: dict[str, Any] = {
            "status": "completed",
            "key": request["key"]["business_key"],
            "answer": text,
            "answer_truncated": truncated,
            "request_id": request_id,
            "model": message.model,
            "prompt_version": settings.prompt_version,
            "stop_reason": stop_reason,
            "usage": dict(invocation.usage),
            "completed_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        generation = request["key"].get(REPLAY_GENERATION_FIELD)
        if generation is not None:
            result[REPLAY_GENERATION_FIELD] = generation
        if settings.allowed_labels:
            label = full_text.lower()
            if label not in settings.allowed_labels:
                allowed = list(settings.allowed_labels)
                raise LabelNotAllowedError(
                    f"answer {truncate_answer(full_text)!r} is not one of {allowed}",
                    request_id=request_id,
                )
            result["label"] = label
        if self._parse_answer is not None:
            result["parsed"] = self._parse(full_text, request_id)
        size = len(json.dumps(result, default=str))
        if size > MAX_STORED_RESULT_BYTES:
            raise ResultTooLargeError(
                f"result to store is {size} bytes, over {MAX_STORED_RESULT_BYTES}",
                request_id=request_id,
            )
        return result

    def _send(self, client: Any, user_message: str, invocation: _Invocation) -> Any:
        settings = self._get_runtime().settings
        try:
            # No temperature/top_p/top_k: the default model rejects non-default values.
            message = client.messages.create(
                model=settings.model_id,
                max_tokens=settings.max_tokens,
                system=settings.system_prompt,
                messages=[{"role": "user", "content": user_message}],
                timeout=model_timeout(settings.model_timeout_seconds, invocation.context),
            )
        except Exception as exc:
            status = getattr(exc, "status_code", None)
            if is_rate_limited(exc):
                invocation.rate_limited = 1
            elif status != 401:
                invocation.requests = 1
            raise
        invocation.requests = 1
        return message

    def _parse(self, text: str, request_id: str | None) -> Any:
        assert self._parse_answer is not None
        try:
            return self._parse_answer(text)
        except RetryableAnswerError:
            raise
        except NonRetryableError as exc:
            exc.request_id = exc.request_id or request_id
            raise
        except Exception as exc:
            # A parser bug or an unparseable answer is the same answer on every retry: stored
            # as a dead letter, never three billed calls.
            raise InvalidAnswerError(
                f"parse_answer raised {type(exc).__name__}: {truncate(str(exc), 300)}",
                request_id=request_id,
            ) from exc

    # -- the buffer queue (SQS batch) ---------------------------------------------------------
    def _handle_batch(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        failures = []
        for record in event["Records"]:
            try:
                self._handle_record(record, context)
            except Exception as exc:
                self._get_runtime().logger.warning(
                    "buffer-queue record reported as a batch item failure",
                    extra={"message_id": record.get("messageId"), "error_type": _error_code(exc)},
                )
                failures.append({"itemIdentifier": record["messageId"]})
        return {"batchItemFailures": failures}

    def _handle_record(self, record: Mapping[str, Any], context: Any) -> None:
        """One SQS record. Returns when the record is done (processed, re-enqueued or
        dead-lettered); raises to report it as a batch item failure (SQS retries it after its
        visibility timeout; the queue's redrive policy is the backstop)."""
        runtime = self._get_runtime()
        settings = runtime.settings
        event = buffer_queue.parse_body(record)
        if event is None:
            runtime.dead_letters.send(
                str(record.get("body") or ""),
                error_code="InvalidMessageBody",
                error_message="buffer-queue message body is not an EventBridge event (JSON)",
            )
            return
        queue = buffer_queue.QueueDelivery.from_record(record, event, dt.datetime.now(dt.UTC))
        invocation = _Invocation(context=context, queue=queue)
        try:
            result = self._deliver(event, context, invocation)
        except IdempotencyAlreadyInProgressError as exc:
            self._requeue(event, queue, self._holder_wait(event), queue.rate_limited_before)
            self._notify(event, invocation, "retry", None, type(exc).__name__)
            return
        except Exception as exc:
            if invocation.verdict == "rate_limited":
                self._requeue(event, queue, invocation.wait_seconds, queue.rate_limited_before + 1)
                self._notify(event, invocation, "rate_limited", None, _error_code(exc))
                return
            if queue.attempt < settings.max_attempts:
                self._delay_retry(record, queue)
                self._notify(event, invocation, "retry", None, _error_code(exc))
                raise
            # Attempts used up outside the record (the record itself stores exhaustion): e.g.
            # DynamoDB or the DLQ failing. Dead-letter without a record; if that fails too,
            # the batch item failure leaves it to the queue's redrive policy.
            message_id = runtime.dead_letters.send(
                event,
                error_code=_error_code(exc),
                error_message=f"transient failure on the last attempt: {exc}",
                request_id=getattr(exc, "request_id", None),
            )
            result = {
                **self._dead_letter_outcome(
                    RetriesExhaustedError(str(exc), error_code=_error_code(exc)), None, None
                ),
                "dead_letter_message_id": message_id,
            }
        self._notify(event, invocation, result["status"], result, result.get("error_code"))

    def _requeue(
        self,
        event: Mapping[str, Any],
        queue: buffer_queue.QueueDelivery,
        wait: float,
        rate_limited: int,
    ) -> None:
        """A delayed copy of the event on the buffer queue; the original counts as processed."""
        runtime = self._get_runtime()
        self._buffer_queue_client().send_message(
            QueueUrl=self._buffer_queue_url(queue),
            MessageBody=json.dumps(event, default=str),
            DelaySeconds=buffer_queue.delay_seconds(wait),
            MessageAttributes={
                buffer_queue.ATTEMPTS_ATTRIBUTE: _number(queue.attempts_used),
                buffer_queue.RATE_LIMITED_ATTRIBUTE: _number(rate_limited),
            },
        )
        runtime.logger.info(
            "re-enqueued on the buffer queue",
            extra={"message_id": queue.message_id, "delay_seconds": math.ceil(wait)},
        )

    def _delay_retry(self, record: Mapping[str, Any], queue: buffer_queue.QueueDelivery) -> None:
        """Space transient retries like Lambda async (1 min, then 2 min). Best effort: if it
        fails, the queue's visibility timeout applies."""
        try:
            self._buffer_queue_client().change_message_visibility(
                QueueUrl=self._buffer_queue_url(queue),
                ReceiptHandle=queue.receipt_handle,
                VisibilityTimeout=buffer_queue.RETRY_SPACING_SECONDS * queue.attempt,
            )
        except Exception:
            self._get_runtime().logger.exception("could not delay the retry")

    def _holder_wait(self, event: Mapping[str, Any]) -> float:
        """Seconds until the holder's in-progress expiry, or the default when unknown."""
        runtime = self._get_runtime()
        settings = runtime.settings
        try:
            detail = event.get("detail") if isinstance(event.get("detail"), dict) else {}
            key = extract_business_key(
                {k: v for k, v in detail.items() if k != REPLAY_GENERATION_FIELD},
                settings.idempotency_key,
            )
            rest, generation = split_replay_generation(detail)
        except NonRetryableError:
            return buffer_queue.IN_PROGRESS_DEFAULT_WAIT_SECONDS
        record_key: dict[str, Any] = {
            "business_key": key,
            "prompt_version": settings.prompt_version,
            "model_id": settings.model_id,
            "fingerprint": runtime.fingerprint,
        }
        if generation is not None:
            record_key[REPLAY_GENERATION_FIELD] = generation
        expiry_ms = runtime.persistence.in_progress_expiry_ms({"key": record_key, "detail": rest})
        if expiry_ms is None:
            return buffer_queue.IN_PROGRESS_DEFAULT_WAIT_SECONDS
        return max(1.0, expiry_ms / 1000 - dt.datetime.now(dt.UTC).timestamp() + 1)

    def _buffer_queue_client(self) -> Any:
        return self._get_runtime().boto3_client("sqs")

    def _buffer_queue_url(self, queue: buffer_queue.QueueDelivery) -> str:
        configured = self._get_runtime().settings.buffer_queue_url
        if configured:
            return configured
        parsed = buffer_queue.queue_url_from_arn(queue.event_source_arn)
        if parsed is None:
            raise RuntimeError("BUFFER_QUEUE_URL is not set and the record has no queue ARN")
        name, account = parsed
        return self._buffer_queue_client().get_queue_url(
            QueueName=name, QueueOwnerAWSAccountId=account
        )["QueueUrl"]

    # -- the outcome hook ----------------------------------------------------------------------
    def _notify(
        self,
        event: Mapping[str, Any],
        invocation: _Invocation,
        status: str,
        result: dict[str, Any] | None,
        error_code: str | None,
    ) -> None:
        if self._on_outcome is None:
            return
        billed = invocation.requests > 0
        self._on_outcome(
            event,
            {
                "status": status,
                "replayed": result is not None and invocation.replayed,
                "model_requests": 1 if billed else 0,
                "rate_limited": 1 if invocation.rate_limited else 0,
                "usage": dict(invocation.usage) if billed else _zero_usage(),
                "result": result,
                "error_code": error_code,
            },
        )

    def _get_runtime(self) -> _Runtime:
        if self._runtime is None:
            with self._lock:
                if self._runtime is None:
                    settings = self._settings or Settings.from_environment()
                    self._runtime = _Runtime(
                        settings,
                        self._complete,
                        self._hand_off,
                        self._boto3_session,
                        self._prompt_version,
                    )
        return self._runtime


def _is_auth_failure(exc: BaseException) -> bool:
    return getattr(exc, "status_code", None) == 401 and should_retry_header(exc) is not True


def _raise_classified(exc: BaseException) -> NoReturn:
    """Raise the non-retryable error an SDK exception stands for, or the exception itself."""
    rejected = classify_model_error(exc)
    if rejected is not None:
        raise rejected from exc
    raise exc


def _incomplete(stop_reason: Any, output_tokens: int, request_id: str | None) -> NonRetryableError:
    message = f"stop_reason {stop_reason!r} is not a complete answer ({output_tokens} tokens)"
    if stop_reason == "max_tokens":
        return MaxTokensReachedError(message, request_id=request_id)
    if stop_reason == "refusal":
        return ModelRefusedError(message, request_id=request_id)
    return IncompleteAnswerError(message, request_id=request_id)


def _error_code(exc: BaseException) -> str:
    error_code = getattr(exc, "error_code", None)
    return error_code if isinstance(error_code, str) else type(exc).__name__


def _number(value: int) -> dict[str, str]:
    return {"DataType": "String", "StringValue": str(value)}


def truncate_answer(text: str, limit: int = 200) -> str:
    """Shorten a model answer for an error message."""
    return text if len(text) <= limit else text[:limit] + "…"
