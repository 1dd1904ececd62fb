"""The parts of a model step, built once per container on its first invocation: settings,
AWS clients, the Powertools idempotency objects, the model call and the queues."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import boto3
from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function

from . import misconfiguration
from .budget import AttemptBudget
from .buffer_queue import BufferQueue
from .client import ModelClientProvider
from .config import Settings
from .dead_letter import DeadLetterPublisher
from .hand_off_item import HandOffItem
from .key import RecordKey, key_fields
from .model_call import BuildUserMessage, ModelCall, ParseAnswer, request_fingerprint
from .persistence import ReleasingDynamoDBPersistenceLayer, naming_the_holder
from .result_events import (
    CLIENT_CONFIG,
    CLIENT_SERVICES,
    RESULT_EVENT_SUFFIX,
    BusKind,
    ResultPublisher,
)
from .result_hand_off import ResultHandOff
from .tracing import StepTracer
from .work import UnitOfWork

if TYPE_CHECKING:
    from .batch import BatchDelivery

DEAD_LETTER_SUFFIX = "#dead-letter"
#: An operator's retry buys exactly one new request for the key: a DLQ redrive
#: (``redrive_of``) or a re-publish with a new ``replay_generation`` (the viewer's Retry).
REDRIVE_ATTEMPTS = 1
#: The record-key members that mark an operator's retry (see :func:`StepComponents.budget`).
OPERATOR_RETRY_MARKERS = ("redrive_of", "replay_generation")

# boto3 sessions are not thread-safe to create clients from, so every client is created under
# this lock. Steps share one default session so its loaded service models are reused.
_CLIENT_LOCK = threading.Lock()
_default_session: boto3.session.Session | None = None


def shared_session() -> boto3.session.Session:
    """The process-wide default boto3 session."""
    global _default_session
    if _default_session is None:
        _default_session = boto3.session.Session()
    return _default_session


class StepComponents:
    """Everything a step's deliveries share."""

    def __init__(
        self,
        settings: Settings,
        *,
        build_user_message: BuildUserMessage,
        parse_answer: ParseAnswer | None,
        boto3_session: boto3.session.Session | None,
        handler_prompt_version: str | None,
    ) -> None:
        self.settings = settings
        self.logger = Logger(service=settings.service_name)
        self._session = boto3_session
        self._clients: dict[str, Any] = {}
        self.fingerprint = request_fingerprint(settings, handler_prompt_version)
        self.tracer = StepTracer(enabled=settings.tracing_enabled, service=settings.service_name)
        self.work = UnitOfWork(self)
        self.idempotency_config = IdempotencyConfig(
            event_key_jmespath="key",
            payload_validation_jmespath="detail",
            # Belt and braces: extract_business_key already rejects incomplete keys.
            raise_on_no_idempotency_key=True,
            expires_after_seconds=settings.expires_after_seconds,
        )
        self.persistence = self._persistence(self.idempotency_config, settings.record_prefix)
        self.complete = _idempotent(
            self.work.complete, self.persistence, self.idempotency_config, settings.record_prefix
        )
        # The DLQ hand-off has its own record (and persistence object: Powertools keeps the
        # prefix on it), keyed on the dead-lettered record's key; no payload validation.
        self.dead_letter_config = IdempotencyConfig(
            event_key_jmespath="key",
            raise_on_no_idempotency_key=True,
            expires_after_seconds=settings.expires_after_seconds,
        )
        hand_off_prefix = settings.record_prefix + DEAD_LETTER_SUFFIX
        self.hand_off_persistence = self._persistence(self.dead_letter_config, hand_off_prefix)
        self.hand_off = _idempotent(
            self.work.hand_off, self.hand_off_persistence, self.dead_letter_config, hand_off_prefix
        )
        self.model_call = ModelCall(
            settings,
            ModelClientProvider(settings, self.boto3_client),
            build_user_message,
            parse_answer,
        )
        self.dead_letters = self._dead_letter_publisher(settings)
        self.buffer = BufferQueue(settings.buffer_queue_url, lambda: self.boto3_client("sqs"))
        self._result_events(settings)
        # Message Batches delivery (issue 19); None in realtime.
        # Imported here: a realtime step never loads the batch path (issue 35: cold starts).
        self.batch: BatchDelivery | None = None
        if settings.model_delivery == "batch":
            from .batch import BatchDelivery

            self.batch = BatchDelivery(self)

    def _dead_letter_publisher(self, settings: Settings) -> DeadLetterPublisher:
        """The DLQ sender; a body cut to fit never drops the business key's fields."""
        return DeadLetterPublisher(
            settings.dead_letter_queue_url,
            lambda: self.boto3_client("sqs"),
            protected=key_fields(settings.idempotency_key),
        )

    def _result_events(self, settings: Settings) -> None:
        """With a result bus: the publisher, and its hand-off under a record of its own
        (suffix ``#result-event``) keyed on the result's record key, so each key's terminal
        result is published at most once, whatever its deliveries."""
        #: ``None`` without ``RESULT_BUS_ARN``.
        self.result_events: ResultPublisher | None = None
        self.result_hand_off = ResultHandOff(self)
        if settings.result_bus_arn is None:
            return
        kind: BusKind = "v2" if settings.result_bus_kind == "v2" else "classic"
        self.result_events = ResultPublisher(
            settings.result_bus_arn,
            kind,
            settings.result_event_source,
            self.boto3_client,
            optional=settings.result_fields,
        )
        self.result_event_config = IdempotencyConfig(
            event_key_jmespath="key",
            raise_on_no_idempotency_key=True,
            expires_after_seconds=settings.expires_after_seconds,
        )
        prefix = settings.record_prefix + RESULT_EVENT_SUFFIX
        self.result_event_persistence = self._persistence(self.result_event_config, prefix)
        self.publish_result = _idempotent(
            self.result_hand_off.publish,
            self.result_event_persistence,
            self.result_event_config,
            prefix,
        )

    def _persistence(
        self, config: IdempotencyConfig, prefix: str
    ) -> ReleasingDynamoDBPersistenceLayer:
        layer = ReleasingDynamoDBPersistenceLayer(
            table_name=self.settings.idempotency_table_name,
            boto3_client=self.boto3_client("dynamodb"),
            tracer=self.tracer,
        )
        layer.bind(config, prefix)
        return layer

    def boto3_client(self, service_name: str) -> Any:
        """A cached boto3 client for ``service_name``, created on first use."""
        with _CLIENT_LOCK:
            if service_name not in self._clients:
                session = self._session or shared_session()
                config = CLIENT_CONFIG if service_name in CLIENT_SERVICES else None
                client = session.client(service_name, config=config)
                # Each call named, so a refused one is logged with its action and resource.
                self._clients[service_name] = misconfiguration.watch(client)
            return self._clients[service_name]

    def register_context(self, context: Any) -> None:
        """Give Powertools the Lambda context, so a lock expires at this invocation's deadline.
        ``idempotent_function`` does not do this itself; without it a timed-out invocation
        would leave its record INPROGRESS until expiry and block every retry."""
        self.idempotency_config.register_lambda_context(context)
        self.dead_letter_config.register_lambda_context(context)
        if self.result_events is not None:
            self.result_event_config.register_lambda_context(context)

    def budget(self, request: dict[str, Any], first_seen: float | None = None) -> AttemptBudget:
        """The attempt budget of the record ``request`` maps to: ``MAX_ATTEMPTS`` requests, or
        one for an operator's retry (a DLQ redrive, or a new ``replay_generation``: the
        operator asked for one more request, and a retry that bills the whole budget again
        would be a second full run of the row). ``first_seen``: the key's first-seen time a
        copy carried, if any (a lost item restarts from it, never from now)."""
        key: RecordKey = request["key"]
        retry = any(marker in key for marker in OPERATOR_RETRY_MARKERS)
        limit = REDRIVE_ATTEMPTS if retry else self.settings.max_attempts
        return self._budget(self.persistence.record_id(request), limit, first_seen)

    def hand_off_counter(self, request: dict[str, Any]) -> AttemptBudget:
        """The budget item of a dead letter's hand-off record, which counts it once."""
        return self._budget(self.hand_off_persistence.record_id(request), 0)

    def hand_off_item(self, request: dict[str, Any]) -> HandOffItem:
        """The same item of a dead letter's hand-off: its failed sends."""
        return self._hand_off_item(self.hand_off_persistence.record_id(request))

    def result_event_item(self, request: dict[str, Any]) -> HandOffItem:
        """The item of a result event's hand-off: its intent and failed publishes."""
        return self._hand_off_item(self.result_event_persistence.record_id(request))

    def _hand_off_item(self, record_id: str) -> HandOffItem:
        return HandOffItem(
            self.boto3_client("dynamodb"),
            self.settings.idempotency_table_name,
            record_id,
            self.settings.expires_after_seconds,
        )

    def _budget(self, record_id: str, limit: int, first_seen: float | None = None) -> AttemptBudget:
        return AttemptBudget(
            self.boto3_client("dynamodb"),
            self.settings.idempotency_table_name,
            record_id,
            limit,
            self.settings.expires_after_seconds,
            first_seen=first_seen,
        )

    def dead_letter_id(self, dead_key: dict[str, Any]) -> str:
        """The stable id of the dead letter of ``dead_key`` (sha256 of its hand-off record)."""
        record_id = self.hand_off_persistence.record_id({"key": dead_key})
        return hashlib.sha256(record_id.encode()).hexdigest()


def _idempotent(
    function: Callable[..., Any],
    persistence: ReleasingDynamoDBPersistenceLayer,
    config: IdempotencyConfig,
    prefix: str,
) -> Callable[..., Any]:
    """``function`` under Powertools' ``idempotent_function`` (its data in ``request=``),
    raising :class:`~.persistence.LockHeld` for a held record."""
    return naming_the_holder(
        idempotent_function(
            function,
            data_keyword_argument="request",
            persistence_store=persistence,
            config=config,
            key_prefix=prefix,
        ),
        persistence,
    )
