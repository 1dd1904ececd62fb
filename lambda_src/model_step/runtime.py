"""``ModelStep``: one idempotent, retry-safe model call per EventBridge event.

Flow of ``handle(event, context)``:

1. Extract the business key from ``event["detail"]`` and check every part (no model call and
   a dead letter if any part is missing).
2. Run the model call inside Powertools ``idempotent_function``, keyed on business key +
   ``PROMPT_VERSION`` + ``MODEL_ID`` and validated on the whole detail. A completed record
   replays its stored answer; a record in progress raises ``IdempotencyAlreadyInProgressError``
   (left to propagate, so Lambda retries later and then gets the stored answer).
3. Transient failures raise: Powertools deletes the record and the retry calls the model again.
   Non-retryable ones go to the dead-letter queue and the handler returns normally. They are
   deliberately NOT cached, so a replay after the cause is fixed reaches the model.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import boto3
from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyValidationError,
)

from .client import ModelClientProvider
from .config import Settings
from .dead_letter import DeadLetterPublisher
from .errors import (
    LabelNotAllowedError,
    NonRetryableError,
    PayloadMismatchError,
    classify_model_error,
)
from .key import extract_business_key

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

BuildUserMessage = Callable[[dict[str, Any]], str]
ParseAnswer = Callable[[str], Any]

# Seconds kept between the SDK giving up and Lambda killing the invocation, so the failure is
# a clean exception (record deleted, retry scheduled) rather than a timeout.
TIMEOUT_SAFETY_MARGIN_SECONDS = 3.0
# Never hand the SDK less than this; a shorter timeout could not succeed anyway.
MIN_MODEL_TIMEOUT_SECONDS = 1.0


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


class _DeadLetter(Exception):
    """Raised INSIDE the idempotent function so Powertools deletes the record instead of
    caching the failure; caught outside, where the event is dead-lettered."""

    def __init__(self, error: NonRetryableError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass
class _Invocation:
    """Per-invocation state shared with the idempotent function (thread-safe: one each)."""

    context: Any
    ran: bool = False
    request_sent: bool = False


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
        boto3_session: boto3.session.Session | None,
    ) -> None:
        self.settings = settings
        self.logger = Logger(service=settings.service_name)
        self._session = boto3_session
        self._clients: dict[str, Any] = {}
        self.idempotency_config = IdempotencyConfig(
            event_key_jmespath="key",
            payload_validation_jmespath="detail",
            # Belt and braces: extract_business_key already rejects incomplete keys.
            raise_on_no_idempotency_key=True,
            expires_after_seconds=settings.expires_after_seconds,
        )
        persistence = DynamoDBPersistenceLayer(
            table_name=settings.idempotency_table_name,
            boto3_client=self.boto3_client("dynamodb"),
        )
        self.complete = idempotent_function(
            complete,
            data_keyword_argument="request",
            persistence_store=persistence,
            config=self.idempotency_config,
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


class ModelStep:
    """An idempotent, retry-safe model call in front of which you can put your own
    prompt building and answer parsing.

    Parameters
    ----------
    settings:
        Explicit settings. Default None: read from the environment on the first invocation
        (see ``model_step.config`` for the variables and their defaults).
    build_user_message:
        ``detail -> str``. Default: ``json.dumps(detail, sort_keys=True)``.
    parse_answer:
        ``answer text -> JSON-serialisable value``, stored as ``"parsed"`` in the result and
        replayed with it. Default None (no ``"parsed"`` key). Raise ``InvalidAnswerError`` to
        dead-letter an answer; any other exception is treated as transient (retried).
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
        boto3_session: boto3.session.Session | None = None,
    ) -> None:
        self._settings = settings
        self._boto3_session = boto3_session
        self._build_user_message = build_user_message or default_user_message
        self._parse_answer = parse_answer
        self._runtime: _Runtime | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_environment(
        cls,
        *,
        build_user_message: BuildUserMessage | None = None,
        parse_answer: ParseAnswer | None = None,
        boto3_session: boto3.session.Session | None = None,
    ) -> ModelStep:
        """A step configured from the environment. Nothing is read, imported or created
        until the first ``handle`` call, so building it at module level is cheap."""
        return cls(
            build_user_message=build_user_message,
            parse_answer=parse_answer,
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

    def handle(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
        """Process one EventBridge event and return a small JSON-serialisable dict.

        Returns ``{"status": "completed", ...}`` (fresh or replayed: identical) or
        ``{"status": "dead_lettered", "error_code": ..., ...}``. Raises on transient failures
        and ``IdempotencyAlreadyInProgressError`` on a concurrent duplicate, so Lambda retries.
        """
        runtime = self._get_runtime()
        settings = runtime.settings
        # idempotent_function does not do this itself; without it a timed-out invocation
        # would leave its record INPROGRESS until expiry and block every retry.
        runtime.idempotency_config.register_lambda_context(context)
        detail = event.get("detail")
        detail = detail if isinstance(detail, dict) else {}
        invocation = _Invocation(context=context)
        metrics = EphemeralMetrics(
            namespace=settings.metrics_namespace, service=settings.service_name
        )
        log = {
            "prompt_version": settings.prompt_version,
            "model_id": settings.model_id,
            "aws_request_id": getattr(context, "aws_request_id", None),
        }
        key: list[Any] | None = None
        try:
            try:
                key = extract_business_key(detail, settings.idempotency_key)
                log["business_key"] = key
                request = {
                    "key": {
                        "business_key": key,
                        "prompt_version": settings.prompt_version,
                        "model_id": settings.model_id,
                    },
                    "detail": detail,
                }
                result = runtime.complete(request=request, invocation=invocation)
            except _DeadLetter as signal:
                error: NonRetryableError = signal.error
            except NonRetryableError as exc:
                error = exc
            except IdempotencyValidationError as exc:
                error = PayloadMismatchError(f"same idempotency key, different payload: {exc}")
            except IdempotencyAlreadyInProgressError:
                metrics.add_metric("ConcurrentDuplicates", MetricUnit.Count, 1)
                runtime.logger.warning(
                    "duplicate while first delivery in progress; retry later",
                    extra={**log, "outcome": "in_progress"},
                )
                raise
            except Exception as exc:
                if invocation.request_sent:
                    metrics.add_metric("ModelRequests", MetricUnit.Count, 1)
                metrics.add_metric("TransientFailures", MetricUnit.Count, 1)
                runtime.logger.warning(
                    "transient failure; raising so Lambda retries",
                    extra={
                        **log,
                        "outcome": "retry",
                        "error_type": type(exc).__name__,
                        "request_id": getattr(exc, "request_id", None),
                    },
                )
                raise
            else:
                duplicate = not invocation.ran
                metrics.add_metric(
                    "DuplicatesSuppressed" if duplicate else "ModelRequests", MetricUnit.Count, 1
                )
                runtime.logger.info(
                    "duplicate suppressed" if duplicate else "model answer stored",
                    extra={
                        **log,
                        "outcome": "duplicate" if duplicate else "completed",
                        "request_id": result.get("request_id"),
                    },
                )
                return result

            if invocation.request_sent:
                metrics.add_metric("ModelRequests", MetricUnit.Count, 1)
            metrics.add_metric("NonRetryableFailures", MetricUnit.Count, 1)
            message_id = runtime.dead_letters.send(event, error)
            runtime.logger.error(
                "non-retryable failure sent to dead-letter queue",
                extra={
                    **log,
                    "outcome": "dead_lettered",
                    "error_code": error.error_code,
                    "error_message": str(error),
                    "request_id": error.request_id,
                    "dead_letter_message_id": message_id,
                },
            )
            return {
                "status": "dead_lettered",
                "error_code": error.error_code,
                "error_message": str(error),
                "request_id": error.request_id,
                "key": key,
                "model": settings.model_id,
                "prompt_version": settings.prompt_version,
                "dead_letter_message_id": message_id,
            }
        finally:
            # Only flush when something was recorded: an empty flush warns.
            if metrics.metric_set:
                metrics.flush_metrics()

    # -- inside the idempotency record -------------------------------------------------------
    def _complete(self, *, request: dict[str, Any], invocation: _Invocation) -> dict[str, Any]:
        """The idempotent unit of work. Its qualified name is part of the record key, so
        renaming it invalidates stored answers."""
        invocation.ran = True
        try:
            return self._ask_model(request, invocation)
        except NonRetryableError as exc:
            raise _DeadLetter(exc) from exc

    def _ask_model(self, request: dict[str, Any], invocation: _Invocation) -> dict[str, Any]:
        runtime = self._get_runtime()
        settings = runtime.settings
        user_message = self._build_user_message(request["detail"])
        client = runtime.model_clients.get()
        invocation.request_sent = True
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
            rejected = classify_model_error(exc)
            if rejected is not None:
                raise rejected from exc
            raise

        request_id = getattr(message, "_request_id", None)
        text = "".join(
            getattr(block, "text", "") for block in message.content if block.type == "text"
        ).strip()
        result: dict[str, Any] = {
            "status": "completed",
            "key": request["key"]["business_key"],
            "answer": text,
            "request_id": request_id,
            "model": message.model,
            "prompt_version": settings.prompt_version,
            "usage": {
                "input_tokens": message.usage.input_tokens,
                "output_tokens": message.usage.output_tokens,
            },
            "completed_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        if settings.allowed_labels:
            label = text.lower()
            if label not in settings.allowed_labels:
                allowed = list(settings.allowed_labels)
                raise LabelNotAllowedError(
                    f"answer {truncate_answer(text)!r} is not one of {allowed}",
                    request_id=request_id,
                )
            result["label"] = label
        if self._parse_answer is not None:
            try:
                result["parsed"] = self._parse_answer(text)
            except NonRetryableError as exc:
                exc.request_id = exc.request_id or request_id
                raise
        return result

    def _get_runtime(self) -> _Runtime:
        if self._runtime is None:
            with self._lock:
                if self._runtime is None:
                    settings = self._settings or Settings.from_environment()
                    self._runtime = _Runtime(settings, self._complete, self._boto3_session)
        return self._runtime


def truncate_answer(text: str, limit: int = 200) -> str:
    """Shorten a model answer for an error message."""
    return text if len(text) <= limit else text[:limit] + "…"
