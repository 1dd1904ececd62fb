"""IdempotentModelStep: an EventBridge subscription that calls a model once per business key."""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import jmespath
import jmespath.exceptions
from aws_cdk import (
    Acknowledgment,
    Annotations,
    Aspects,
    Duration,
    Names,
    RemovalPolicy,
    Stack,
    Token,
    Validations,
)
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_eventsv2 as eventsv2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from . import bedrock_models, defaults, queue_grants
from . import point_in_time_recovery as pitr
from . import result_fields as result_field_names
from ._paths import lambda_src_root
from ._runtime_environment import runtime_batch_limits, runtime_lifetime
from ._runtime_environment import runtime_environment as env
from ._validation import (
    PropValidationError,
    check_duration_range,
    check_int_range,
    check_non_empty,
)
from .alarms import (
    NobodyNotified,
    events_rule_metric,
    events_v2_subscriber_metric,
    occurrence_alarm,
    threshold_alarm,
)
from .bedrock_batch_jobs import BedrockBatchJobs
from .checkov_acknowledgments import MODEL_STEP, acknowledge_checkov_findings
from .event_bus_v2 import EventBusV2Base
from .model_delivery import ModelDelivery
from .model_fit import Effort, ModelFit, Thinking, fit
from .model_prices import ModelPrice, price_for, price_table
from .model_step_handler import ModelStepHandler
from .python_function import python_function
from .record_prefix_grants import grant_record_prefix
from .result_event_loop import describe_bus, own_results_matched, same_bus
from .result_fields import DEFAULT_RESULT_FIELDS, ResultFields
from .system_prompt_asset import SYSTEM_PROMPT_MAX_BYTES, prompt_package, prompt_sha256

#: Environment names the runtime reads that a user's ``environment`` may not set: every
#: reserved name of ``lambda_src/model_step/environment.py``. Every name starting with one
#: of ``RESERVED_ENVIRONMENT_PREFIXES`` is refused too.
RESERVED_ENVIRONMENT: frozenset[str] = frozenset(env.RESERVED_NAMES)

#: Prefixes no user variable may start with: ``POWERTOOLS_*`` would let a caller
#: switch idempotency off (``POWERTOOLS_IDEMPOTENCY_DISABLED``) or redirect
#: metrics; ``AWS_*`` belongs to Lambda and the AWS SDKs.
RESERVED_ENVIRONMENT_PREFIXES = ("POWERTOOLS_", "AWS_")

METRICS_NAMESPACE = "IdempotentModelStep"
#: Detail types of the result events (``lambda_src/model_step/result_events.py``).
RESULT_COMPLETED = "Model Step Completed"
RESULT_DEAD_LETTERED = "Model Step Dead Lettered"
RESULT_DETAIL_TYPES = (RESULT_COMPLETED, RESULT_DEAD_LETTERED)
#: Annotation id of the synth warning for alarms that notify nobody (no ``alarm_topic``, no
#: action added): ``Annotations.of(step).acknowledge_warning(ALARMS_WITHOUT_ACTION_WARNING,
#: reason)`` silences it.
ALARMS_WITHOUT_ACTION_WARNING = "idempotent-model-step:alarms-without-action"
#: The requirements file (beside the runtime's) that ``tracing=True`` adds to the bundle.
TRACING_REQUIREMENTS = "requirements-tracing.txt"

#: Fixed construct ids of the SnapStart alias (and its name): renaming either
#: would replace the alias and the event source mapping that points at it.
SNAP_START_ALIAS_ID = "FunctionAlias"
SNAP_START_ALIAS_NAME = "live"

#: Integer props and the range each allows (inclusive).
INT_RANGES: Mapping[str, tuple[int, int]] = {
    "max_tokens": (1, 128_000),
    "max_concurrency": defaults.MAX_CONCURRENCY_RANGE,
    "lambda_retry_attempts": (0, 2),
    "event_retry_attempts": (0, 185),
    "memory_size": (128, 10_240),
}
#: Duration props and the range each allows (inclusive, whole seconds).
DURATION_RANGES: Mapping[str, tuple[Duration, Duration]] = {
    "max_event_age": (Duration.minutes(1), Duration.hours(24)),
    "timeout": (Duration.seconds(10), Duration.minutes(15)),
    "expires_after": (Duration.minutes(1), Duration.days(30)),
    "api_key_max_age": (Duration.seconds(0), Duration.hours(1)),
}


class ModelProvider(enum.Enum):
    """Where the model runs."""

    #: The Anthropic API; the key is read from ``api_key_secret`` at run time.
    ANTHROPIC = "anthropic"
    #: Claude on Amazon Bedrock; IAM grants ``bedrock:InvokeModel`` on the model, no secret.
    BEDROCK = "bedrock"


class PromptCache(enum.Enum):
    """How long Anthropic's prompt cache keeps the system prompt (``cache_control`` TTL).

    A cache read and a cache write bill the prefix at the model's own cache rates (the model
    catalogue's: Claude Haiku 5.5 reads at $0.01 and writes at $0.125 (five minutes) or $0.20
    (one hour) per million tokens, against $0.10 of input). The setting changes the cost,
    never the answer, so it does not join the record key.
    """

    #: ``{"type": "ephemeral", "ttl": "5m"}``: the default; pays back from the second row
    #: within five minutes of the previous one.
    FIVE_MINUTES = "5m"
    #: ``"ttl": "1h"``: for rows spaced more than five minutes apart, and batches.
    ONE_HOUR = "1h"
    #: No ``cache_control``: every request bills the whole prompt at the input price.
    OFF = "off"


@dataclass(frozen=True)
class _StepProps:
    """The props of one :class:`IdempotentModelStep`, as passed; :meth:`validate` checks them.

    Every check of every prop is here, so a bad value fails before any resource exists.
    The props are documented on :class:`IdempotentModelStep`.
    """

    event_pattern: events.EventPattern
    idempotency_key: str
    prompt_version: str
    system_prompt: str | None
    api_key_secret: secretsmanager.ISecret | None
    model_provider: ModelProvider
    event_bus: events.IEventBus | EventBusV2Base | None
    model_id: str
    max_tokens: int
    allowed_labels: list[str] | None
    table: dynamodb.ITable | None
    dead_letter_queue: sqs.IQueue | None
    alarm_topic: sns.ITopic | None
    max_concurrency: int
    lambda_retry_attempts: int
    event_retry_attempts: int
    max_event_age: Duration
    expires_after: Duration | None
    timeout: Duration
    memory_size: int
    architecture: lambda_.Architecture
    log_retention: logs.RetentionDays
    api_key_max_age: Duration
    snap_start: bool
    handler: ModelStepHandler | None
    environment: Mapping[str, str] | None
    # -- issue 20: prompt size and caching
    system_prompt_file: str | Path | None
    prompt_cache: PromptCache
    # Compose and watch (issue 21).
    dashboard: bool = False
    tracing: bool = False
    result_bus: events.IEventBus | EventBusV2Base | None = None
    # Message Batches delivery (issue 19).
    delivery: ModelDelivery = field(default_factory=ModelDelivery.realtime)
    # The model as it really is (issue 32).
    thinking: Thinking | None = None
    effort: Effort | str | None = None
    model_prices: Mapping[str, Mapping[str, Any] | ModelPrice | None] | None = None
    # Personal data (issue 34).
    result_fields: ResultFields | None = None
    point_in_time_recovery: pitr.PointInTimeRecovery | None = None
    # Bedrock batch inference (issue 37).
    batch_bucket: s3.IBucket | None = None

    @property
    def bedrock_batch(self) -> bool:
        """Batch delivery on Bedrock: model invocation jobs (issue 37)."""
        return self.delivery.is_batch and self.model_provider is ModelProvider.BEDROCK

    @property
    def bedrock_batch_timeout_hours(self) -> int:
        """The jobs' ``timeoutDurationInHours``: ``max_event_age`` in whole hours, at least
        24 (``batch_limits.bedrock_timeout_hours``; 168 at most, checked by validate)."""
        return int(runtime_batch_limits.bedrock_timeout_hours(int(self.max_event_age.to_seconds())))

    def validate(self, owner: str, source: str, resolve: Callable[[Any], Any]) -> None:
        """Raise :class:`PropValidationError` naming ``owner``, the prop, the value and the
        range it allows, for the first prop that is out of range or contradicts another.
        ``source``: the step's construct path, its result events' source; ``resolve``: its
        stack's ``resolve``, which turns ``events.Match`` tokens into the JSON they stand for."""
        self._check_strings(owner)
        self._check_ranges(owner)
        self._check_provider(owner)
        self._check_dead_letter_queue(owner)
        self._check_environment(owner)
        self._check_allowed_labels(owner)
        self._check_system_prompt(owner)
        self._check_watch(owner)
        self._check_delivery(owner)
        self._check_personal_data(owner)
        self._check_result_loop(owner, source, resolve)

    def _check_strings(self, owner: str) -> None:
        for prop in ("idempotency_key", "prompt_version", "model_id"):
            check_non_empty(owner, prop, getattr(self, prop))
        key = self.idempotency_key
        try:
            jmespath.compile(key)
        except jmespath.exceptions.JMESPathError as error:
            raise PropValidationError(
                f"{owner}: idempotency_key must be a JMESPath expression over the event's "
                f"detail, e.g. '[upload_id, row_number]'; got {key!r} ({error})"
            ) from error
        if "detail." in key:
            raise PropValidationError(
                f"{owner}: idempotency_key is evaluated over the event's detail already; "
                f"write '[upload_id, row_number]', not 'detail.' paths; got {key!r}"
            )

    def _check_ranges(self, owner: str) -> None:
        for prop, (low, high) in INT_RANGES.items():
            check_int_range(owner, prop, getattr(self, prop), low, high)
        for prop, (shortest, longest) in DURATION_RANGES.items():
            value = getattr(self, prop)
            if value is not None:  # expires_after: None is derived
                check_duration_range(owner, prop, value, shortest, longest)
        self._check_key_lifetime(owner)

    def _check_key_lifetime(self, owner: str) -> None:
        """An explicit ``expires_after`` must outlive every path that can bring a key back
        (``model_step.lifetime``): shorter, a copy that came back would be billed again."""
        expires, age = self.expires_after, self.max_event_age
        if expires is None or expires.is_unresolved() or age.is_unresolved():
            return
        least = self.minimum_key_lifetime_seconds
        if expires.to_seconds() < least:
            batch = " and delivery=ModelDelivery.batch() (a batch holds a row about 2 days)"
            raise PropValidationError(
                f"{owner}: expires_after must be at least {least:,} seconds "
                f"({Duration.seconds(least).to_human_string()}), got "
                f"{int(expires.to_seconds()):,} seconds ({expires.to_human_string()}): it is "
                f"the key's memory, and with max_event_age "
                f"{age.to_human_string()}, the buffer and redrive queues' "
                f"{defaults.BUFFER_RETENTION.to_human_string()} retention"
                f"{batch if self.delivery.is_batch else ''} a copy of a key can come back "
                f"that late; a copy that finds its memory expired would be billed again. "
                "Leave expires_after unset to derive it, or shorten max_event_age."
            )

    @property
    def minimum_key_lifetime_seconds(self) -> int:
        """The shortest key memory these props allow (``model_step.lifetime``)."""
        return int(
            runtime_lifetime.minimum_key_lifetime(
                max_event_age=int(self.max_event_age.to_seconds()),
                queue_retention=int(defaults.BUFFER_RETENTION.to_seconds()),
                batch=self.delivery.is_batch,
                batch_lifetime=self.bedrock_batch_timeout_hours * 3600
                if self.bedrock_batch
                else runtime_lifetime.BATCH_LIFETIME_SECONDS,
            )
        )

    @property
    def key_lifetime(self) -> Duration:
        """The key's memory lifetime: ``expires_after``, or the minimum the props allow."""
        if self.expires_after is not None:
            return self.expires_after
        return Duration.seconds(self.minimum_key_lifetime_seconds)

    def _check_provider(self, owner: str) -> None:
        provider, secret, model_id = self.model_provider, self.api_key_secret, self.model_id
        if provider is ModelProvider.ANTHROPIC and secret is None:
            raise PropValidationError(
                f"{owner}: api_key_secret is required with ModelProvider.ANTHROPIC "
                "(or pass model_provider=ModelProvider.BEDROCK)"
            )
        if provider is ModelProvider.BEDROCK and secret is not None:
            raise PropValidationError(
                f"{owner}: api_key_secret must not be set with ModelProvider.BEDROCK, "
                "which authenticates with the function's IAM role"
            )
        if (
            provider is ModelProvider.BEDROCK
            and not Token.is_unresolved(model_id)
            and bedrock_models.parse_model_id(model_id) is None
        ):
            raise PropValidationError(
                f"{owner}: model_id must be a Bedrock foundation-model id or inference-profile "
                f"id with ModelProvider.BEDROCK: {bedrock_models.ALLOWED}; got {model_id!r}"
            )

    def _check_delivery(self, owner: str) -> None:
        """Batch delivery: Message Batches (issue 19), or Bedrock batch inference (issue 37),
        whose jobs run 24-168 h and hold at most 50,000 records."""
        if self.batch_bucket is not None and not self.bedrock_batch:
            raise PropValidationError(
                f"{owner}: batch_bucket is used only with delivery=ModelDelivery.batch() and "
                "model_provider=ModelProvider.BEDROCK (it holds the jobs' input and output)"
            )
        if not self.bedrock_batch:
            return
        # A job's timeoutDurationInHours follows max_event_age, within Bedrock's 24-168 h:
        # DURATION_RANGES caps the age at a day, so every job runs 24 h.
        limits = runtime_batch_limits
        if self.delivery.max_requests > limits.BEDROCK_MAX_REQUESTS:
            raise PropValidationError(
                f"{owner}: ModelDelivery.batch(max_requests=...) must be at most "
                f"{limits.BEDROCK_MAX_REQUESTS:,} with model_provider=ModelProvider.BEDROCK "
                f"(Bedrock's records per batch inference job); got {self.delivery.max_requests:,}"
            )

    def _check_dead_letter_queue(self, owner: str) -> None:
        queue = self.dead_letter_queue
        if queue is not None and queue.fifo:
            raise PropValidationError(
                f"{owner}: dead_letter_queue must be a standard SQS queue, got the FIFO "
                f"queue {queue.node.path!r}. EventBridge dead-letter queues and "
                "the redrive queue's redrive policy (a standard queue) do not accept FIFO "
                "queues."
            )

    def _check_environment(self, owner: str) -> None:
        reserved = sorted(
            name
            for name in self.environment or {}
            if name in RESERVED_ENVIRONMENT or name.startswith(RESERVED_ENVIRONMENT_PREFIXES)
        )
        if reserved:
            raise PropValidationError(
                f"{owner}: environment may not set {', '.join(reserved)}; the step sets "
                "its runtime's names from its own props, and every name starting with "
                f"{' or '.join(RESERVED_ENVIRONMENT_PREFIXES)} is reserved (Powertools "
                "settings could switch idempotency off; AWS_* belongs to Lambda)"
            )

    def _check_allowed_labels(self, owner: str) -> None:
        labels = self.allowed_labels
        if labels is None:
            return
        bad = [label for label in labels if not label.strip() or "," in label]
        if not labels or bad:
            raise PropValidationError(
                f"{owner}: allowed_labels must be non-empty strings without commas, got {labels!r}"
            )

    # -- issue 20: prompt size and caching
    def _check_system_prompt(self, owner: str) -> None:
        if not isinstance(self.prompt_cache, PromptCache):
            raise PropValidationError(
                f"{owner}: prompt_cache must be PromptCache.FIVE_MINUTES, ONE_HOUR or OFF, "
                f"got {self.prompt_cache!r}"
            )
        text, prop = self.system_prompt_text(owner)
        if not text.strip():
            raise PropValidationError(f"{owner}: {prop} must be a non-empty string, got {text!r}")
        size = len(text.encode())
        if size > SYSTEM_PROMPT_MAX_BYTES:
            raise PropValidationError(
                f"{owner}: {prop} must be at most {SYSTEM_PROMPT_MAX_BYTES:,} bytes (UTF-8), "
                f"got {size:,} bytes"
            )

    def system_prompt_text(self, owner: str) -> tuple[str, str]:
        """The system prompt's text and the prop it came from (``system_prompt_file`` is read
        now, at synth). Exactly one of the two props must be given, and a literal."""
        given, path = self.system_prompt, self.system_prompt_file
        if (given is None) == (path is None):
            raise PropValidationError(
                f"{owner}: pass exactly one of system_prompt (the text) and system_prompt_file "
                f"(a path read at synth), got {'both' if given is not None else 'neither'}"
            )
        if path is None:
            if not isinstance(given, str) or Token.is_unresolved(given):
                raise PropValidationError(
                    f"{owner}: system_prompt must be a literal string (it ships with the "
                    f"function's code), got {given!r}"
                )
            return given, "system_prompt"
        file = Path(path)
        try:
            data = file.read_bytes()
        except OSError as error:
            raise PropValidationError(
                f"{owner}: system_prompt_file must be a readable file, got {str(path)!r} "
                f"({error.strerror or error})"
            ) from error
        if len(data) > SYSTEM_PROMPT_MAX_BYTES:
            raise PropValidationError(
                f"{owner}: system_prompt_file must be at most {SYSTEM_PROMPT_MAX_BYTES:,} bytes, "
                f"got {len(data):,} bytes ({str(path)!r})"
            )
        try:
            return data.decode(), "system_prompt_file"
        except UnicodeDecodeError as error:
            raise PropValidationError(
                f"{owner}: system_prompt_file must be UTF-8 text, got {str(path)!r} ({error})"
            ) from error

    def _check_watch(self, owner: str) -> None:
        """The props of issue 21: the dashboard and tracing switches."""
        for prop in ("dashboard", "tracing"):
            value = getattr(self, prop)
            if not isinstance(value, bool):
                raise PropValidationError(f"{owner}: {prop} must be True or False, got {value!r}")
        bus = self.result_bus
        if bus is not None and not isinstance(bus, EventBusV2Base) and not _is_event_bus(bus):
            raise PropValidationError(
                f"{owner}: result_bus must be an events.IEventBus or an EventBusV2, "
                f"got {type(bus).__name__}"
            )

    # -- issue 32: the model as it really is
    def model_fit(self, owner: str) -> ModelFit:
        """``thinking``, ``effort`` and ``max_tokens`` checked against the model catalogue
        (:mod:`.model_fit`); an unresolved ``model_id`` token cannot be looked up."""
        if Token.is_unresolved(self.model_id):
            return ModelFit(None, None, None)
        return fit(
            owner,
            model_id=self.model_id,
            provider=self.model_provider.value,
            max_tokens=self.max_tokens,
            thinking=self.thinking,
            effort=self.effort,
        )

    def model_price(self, owner: str) -> ModelPrice | None:
        """The price the step bills its requests at: the catalogue's row of its model under
        ``model_prices``; None when there is none (the cost is reported as unknown)."""
        table = price_table(self.model_prices, source=f"{owner}: model_prices")
        return None if Token.is_unresolved(self.model_id) else price_for(self.model_id, table)

    def _check_personal_data(self, owner: str) -> None:
        """The props of issue 34: what result events carry, and the table's backups."""
        fields = self.result_fields
        if fields is not None and not isinstance(fields, ResultFields):
            raise PropValidationError(
                f"{owner}: result_fields must be ResultFields flags (ResultFields.LABEL | "
                f"ResultFields.KEY | ResultFields.PARSED, or ResultFields.NONE), got {fields!r}"
            )
        if fields is not None and self.result_bus is None:
            raise PropValidationError(
                f"{owner}: result_fields says what result events carry, and there are none "
                f"without a result_bus; got result_fields={result_field_names.describe(fields)} "
                "and no result_bus"
            )
        if self.point_in_time_recovery is not None and self.table is not None:
            raise PropValidationError(
                f"{owner}: point_in_time_recovery applies to the table the step creates; the "
                f"table you passed keeps its own setting (got point_in_time_recovery="
                f"{self.point_in_time_recovery!r} with table={self.table.node.path!r})"
            )
        pitr.period_days(owner, "point_in_time_recovery", self.point_in_time_recovery)

    def _check_result_loop(self, owner: str, source: str, resolve: Callable[[Any], Any]) -> None:
        """Issue 36: a step whose ``event_pattern`` matches its own result events on the bus
        it subscribes to would answer each result again, billing a request every turn
        (:mod:`.result_event_loop` says when a pattern surely matches)."""
        if not same_bus(self.event_bus, self.result_bus):
            return
        pattern = resolve(_render_pattern(self.event_pattern))
        fields = self.result_fields if self.result_fields is not None else DEFAULT_RESULT_FIELDS
        matched = own_results_matched(pattern, source, RESULT_DETAIL_TYPES, fields)
        if not matched:
            return
        raise PropValidationError(
            f"{owner}: event_pattern {json.dumps(pattern, default=str)} matches the step's "
            f"own result events (source {source!r}, detail-type "
            f"{' and '.join(repr(detail_type) for detail_type in matched)}) on result_bus "
            f"{describe_bus(self.result_bus)}, the bus it subscribes to (event_bus "
            f"{describe_bus(self.event_bus)}): every result would come back as a new row and "
            "be answered again, a loop that bills a model request each turn. Filter "
            "event_pattern on its producer's source or detail-type, or publish the results "
            "on another bus (result_bus)."
        )

    @property
    def recovery_period_days(self) -> int:
        """The created table's point-in-time recovery period in days (0: off)."""
        return pitr.period_days("", "point_in_time_recovery", self.point_in_time_recovery)

    @property
    def max_attempts(self) -> int:
        """The runtime's ``MAX_ATTEMPTS``: transient-failure attempts of one delivery."""
        return self.lambda_retry_attempts + 1

    @property
    def buffer_max_receive_count(self) -> int:
        """Receives after which SQS moves a buffered row to the redrive queue."""
        return defaults.buffer_queue_max_receive_count(self.max_attempts)


class IdempotentModelStep(Construct):
    """EventBridge -> buffer queue -> Lambda that calls a model at most once per business key.

    What it creates, each a public attribute:

    - ``rule`` (classic bus) or ``subscriber`` (an :class:`EventBusV2`): matches
      ``event_pattern`` and delivers the whole event to ``buffer_queue``, with a
      retry policy (``event_retry_attempts``, ``max_event_age``) and failed
      deliveries dead-lettered to ``dead_letter_queue``;
    - ``buffer_queue``: a standard, encrypted, TLS-only queue that holds rows
      behind the concurrency cap for up to 14 days, visibility 6 x ``timeout``; its
      redrive policy moves a row received ``buffer_max_receive_count`` times
      (``MAX_ATTEMPTS + 1 + 5``, 9 by default) without an answer to ``redrive_queue``;
    - ``redrive_queue``: the same kind of queue, for the rows SQS gave up on; the
      function consumes it too, and puts each row back on ``buffer_queue`` (a fresh
      receive count) while its key has attempts and ``max_event_age`` left, or
      dead-letters it as ``ReceivesExhausted``. Its own redrive policy moves a row to
      ``dead_letter_queue`` after 5 receives;
    - ``function``: Python 3.13, the runtime in ``lambda_src/model_step``, its own
      log group, consuming ``buffer_queue`` through an event source mapping (batch
      size 1, partial batch responses, at most ``max_concurrency`` concurrent) and
      ``redrive_queue`` through a second one (batch size 1, at most 2 concurrent);
      ``REDRIVE_QUEUE_ARN`` tells the runtime which queue a record came from;
    - ``alias``: with ``snap_start=True``, the alias both mappings invoke;
    - ``table``: the Powertools idempotency table (``id`` / TTL ``expiration``);
    - ``dead_letter_queue``: a standard, encrypted, TLS-only queue;
    - ``alarms``: delivery failures (EventBridge ``InvocationsSentToDlq`` /
      ``InvocationsFailedToBeSentToDlq``, or on a v2 bus ``OnFailureDestinationDelivered``
      / ``EventsDropped``); messages on the DLQ (its depth, and every receive from it,
      so SQS's own redrives and messages a DLQ consumer took are both seen); any row
      reaching ``redrive_queue``; any call the deployment refuses the runtime
      (``ConfigurationErrorsAlarm``); the buffer's oldest message approaching
      ``max_event_age``; and, with ``result_bus``, any result event the runtime could not
      tell was published (``ResultEventsUncertainAlarm``). Each notifies ``alarm_topic``
      if given; an alarm still without an action at synth makes synth warn
      (``ALARMS_WITHOUT_ACTION_WARNING``).

    Example::

        IdempotentModelStep(
            self, "Classify",
            event_pattern=events.EventPattern(detail_type=["Prospect Row Validated"]),
            idempotency_key="[upload_id, row_number]",
            prompt_version="2026-11-01",
            system_prompt="Answer hot, warm or cold.",
            api_key_secret=secret,
            max_concurrency=5,    # about 5 x 60 / 3 s = 100 requests a minute
        )

    Retry arithmetic: the SDK makes one request per attempt (``max_retries=0``) and
    the runtime allows ``MAX_ATTEMPTS = lambda_retry_attempts + 1`` attempts per
    record key for transient failures (500s, timeouts, a kill after the request was
    sent), claimed on the key's record, so a business key costs at most
    ``max_model_requests_per_delivery`` billed requests (3 by default) however many
    copies, redeliveries and throttles it meets; an operator's DLQ redrive buys one
    more. A 429 or 529 is not billed and is not an attempt: the row waits in
    ``buffer_queue``. A duplicate delivery costs none.

    Props (keyword arguments of the constructor; every one is checked at synth, and a
    bad value fails with the prop, the value and the range it allows):

    :param event_pattern: which events on ``event_bus`` the step handles. A pattern that
        matches the step's own result events on that bus (it is also ``result_bus``) is
        refused at synth, naming both props: each result would come back and be answered
        again (:mod:`constructs_lib.result_event_loop`). Required.
    :param idempotency_key: a JMESPath over the event's ``detail`` giving the
        business key, e.g. ``"[upload_id, row_number]"``. Never the event id:
        a redelivered or re-published event gets a new id. Required.
    :param prompt_version: joins the key, so a changed prompt gets a new answer. Required.
    :param system_prompt: the system prompt, at most 200,000 bytes (UTF-8). It ships with
        the function's code (``model_step_prompt/<sha256>.txt``), never in its environment,
        which carries only ``SYSTEM_PROMPT_SHA256``; the full text joins the record key's
        fingerprint, so an edited prompt gets new answers. Give this or
        ``system_prompt_file``, not both. Default: none.
    :param api_key_secret: the Secrets Manager secret holding the Anthropic API
        key (the raw key, or JSON ``{"api_key": ...}``). Required with
        ``ModelProvider.ANTHROPIC``; refused with ``ModelProvider.BEDROCK``.
        Granted ``secretsmanager:GetSecretValue`` only (the runtime never calls
        DescribeSecret), on the ARN ``grant_read`` would use, so a secret imported by name
        or partial ARN and a customer managed KMS key both work. Default: none.
    :param model_provider: ``ModelProvider.ANTHROPIC`` (the Claude API, with
        ``api_key_secret``) or ``ModelProvider.BEDROCK`` (Claude on Amazon Bedrock through
        the function's role, no secret). Default ``ModelProvider.ANTHROPIC``.
    :param event_bus: a classic ``IEventBus`` (a rule is created) or a v2 bus,
        :class:`EventBusV2` or ``EventBusV2.from_event_bus_arn(...)`` (a
        subscriber is created). Default: the account's default bus.
    :param model_id: the model to call; joins the record key. With
        ``ModelProvider.BEDROCK``: a foundation-model id (``anthropic.<model>``, e.g.
        ``anthropic.claude-haiku-5-5``) or an inference-profile id (``us.``, ``eu.``,
        ``apac.``, ``jp.``, ``au.``, ``us-gov.`` or ``global.`` then ``anthropic.<model>``),
        granted on the profile and on the model in every region the profile routes to
        (``constructs_lib.bedrock_models``). An id the model catalogue does not list is not
        refused: synth warns, naming ``model_id``, and its cost is unknown unless
        ``model_prices`` gives it. Default ``"claude-haiku-5-5"``.
    :param max_tokens: 1-128,000 and at most the model's maximum output; with thinking on
        (``Thinking.ADAPTIVE``, or no ``thinking`` on a model that thinks by default, as
        Claude Haiku 5.5 does) at least the model's ``thinking_min_max_tokens`` (1,024), since
        thinking tokens count toward it. Default 1,024.
    :param allowed_labels: if given, an answer must be one of these (case-insensitive)
        or the event is dead-lettered. Default: any answer.
    :param table: an idempotency table to share across steps (partition key ``id``,
        TTL ``expiration``). The function may touch only its own records on it, those
        whose id starts with the step's construct path and ``#`` (``dynamodb:LeadingKeys``).
        Default: a new one.
    :param dead_letter_queue: a STANDARD queue; FIFO is refused. Default: a new one.
    :param alarm_topic: every alarm notifies it. Default: alarms without actions, and synth
        warns (``idempotent-model-step:alarms-without-action``) unless every alarm has an
        action by then; ``Annotations.of(step).acknowledge_warning(id, reason)`` silences it.
    :param max_concurrency: the most model calls the step runs at once, 1-1,000,
        default 10. Requests per minute are about ``max_concurrency x 60 /
        seconds per call``. Implemented as the event source mapping's maximum
        concurrency; 1 is reserved concurrency 1 on the function behind a
        mapping capped at 2 (Lambda's minimum), see docs/construct.md, "A cap of 1".
    :param lambda_retry_attempts: retries of a transient failure (500, timeout,
        connection error, a kill after the request was sent) of one record key,
        0-2, default 2; the runtime's attempt budget, kept on the key's record, is
        ``MAX_ATTEMPTS = lambda_retry_attempts + 1``. Rate limits (429/529) and
        Lambda throttles never use an attempt.
    :param event_retry_attempts: EventBridge delivery retries to the buffer
        queue, 0-185, default 185 (the same range on a v2 subscriber).
    :param max_event_age: how long a row may take to an answer, 1 minute to 24
        hours, default 24 hours: EventBridge stops retrying the hand-off after it, and
        the runtime, counting from when the step first saw the row, dead-letters a
        rate-limited row (``RateLimitExhausted``) that would wait past it and stops
        putting back a row the buffer queue gave up on (``ReceivesExhausted``).
    :param expires_after: the key's memory lifetime: how long its stored outcome, its attempt
        budget and its hand-offs are kept. It must outlive every path that can bring a copy
        of the key back (``max_event_age``, then up to the buffer and redrive queues'
        14-day retention, and under ``ModelDelivery.batch()`` a batch's two days), so it is
        at least ``max_event_age`` + 14 days + 1 hour; a shorter one fails at synth naming
        the props. At most 30 days. Default: that minimum, derived (15 days and 1 hour with
        the default ``max_event_age``); ``key_lifetime`` holds the value in use.
    :param timeout: function timeout, 10 seconds to 15 minutes, default 90 seconds.
        Each model request's total deadline is kept 5 seconds below it; the buffer and
        redrive queues' visibility timeout is 6x it.
    :param memory_size: 128-10,240 MB, default 512. Under ``ModelDelivery.batch`` it also
        bounds each Message Batch create body to ``(memory - 160 MB) / 3``: 117 MB at 512,
        the API's whole 256 MB from 1,024 (a long system prompt is sent once a request).
    :param architecture: default ``X86_64``; wheels are bundled for it.
    :param log_retention: default one month.
    :param api_key_max_age: how long a container reuses the API key before
        reading the secret again, 0 seconds to 1 hour, default 5 minutes.
    :param snap_start: publish a version with Lambda SnapStart and an alias
        ``live`` that the event source mapping invokes. Default ``False``.
    :param handler: default ``ModelStepHandler.default()``.
    :param environment: extra variables for a custom handler. The runtime's own
        names (``RESERVED_ENVIRONMENT``) and every ``POWERTOOLS_*`` and ``AWS_*``
        name are refused. Default: none.
    :param system_prompt_file: a UTF-8 file holding the system prompt, read at synth, at
        most 200,000 bytes; otherwise as ``system_prompt``. Default: none.
    :param prompt_cache: ``PromptCache.FIVE_MINUTES`` (default), ``ONE_HOUR`` or ``OFF``:
        marks the system prompt with ``cache_control`` and that TTL, so rows after the first
        read it at 0.1x the input price. A prompt shorter than the model's minimum cacheable
        length is simply not cached. Never joins the record key.
    :param dashboard: also create a :class:`ModelStepDashboard` of this step alone
        (``dashboard`` attribute). Default ``False``.
    :param result_bus: publish each key's terminal result once on this bus: an
        ``events.IEventBus`` (a classic bus, ``PutEvents`` conditioned on this step's source
        and the two detail types) or an :class:`EventBusV2` (each entry's
        ``DeduplicationId`` is the key's record id). Detail types
        ``RESULT_COMPLETED`` ("Model Step Completed") and ``RESULT_DEAD_LETTERED``
        ("Model Step Dead Lettered"), source the step's construct path; subscribe a
        downstream step with :meth:`result_event_pattern`. At most once per key: an event
        the runtime cannot tell was published (a kill right after ``PutEvents``) is not
        sent again and raises ``ResultEventsUncertainAlarm``; one the bus refuses on 5
        deliveries is a ``ResultEventUndeliverable`` dead letter. Default: none, no events.
    :param tracing: X-Ray active tracing on the function, with Powertools Tracer
        subsegments around the model call and each idempotency-store call (names and an
        error class only, never row or answer text). Default ``False``: X-Ray bills per
        trace recorded and scanned.
    :param delivery: ``ModelDelivery.realtime()`` (default: one request per row) or
        ``ModelDelivery.batch(max_wait=..., max_requests=...)``: rows are sent as Anthropic
        Message Batches (half price, up to 24 h) of at most ``max_requests`` (1-100,000,
        default 10,000) requests and 256 MB, at the latest ``max_wait`` (1 second to 1 hour,
        default 5 minutes) after the first row waited. The buffer mapping then takes
        ``min(max_requests, 10,000)`` rows with a ``min(max_wait, 300 s)`` batching window,
        a rule (``batch_tick_rule``, ``rate(1 minute)``) ticks the function with
        ``{"model_step_batch": "tick"}`` to submit, reconcile and collect, the function's
        timeout is at least 15 minutes, and an alarm fires when a batch stays open past
        24 h. With ``ModelProvider.BEDROCK`` (issue 37) each submission is one Bedrock
        batch inference job (half the on-demand price) of at most 50,000 records, its
        ``timeoutDurationInHours`` ``max_event_age`` in whole hours within Bedrock's 24-168
        (so 24 h, as ``max_event_age`` is at most a day), its JSONL in ``batch_bucket``; a
        submission below Bedrock's minimum of 100 records per job is sent as single requests
        once ``max_wait`` has passed.
    :param batch_bucket: with ``ModelProvider.BEDROCK`` and batch delivery, the S3 bucket of
        the jobs' input and output (under ``bedrock-batch/``); yours keeps its own
        encryption and lifecycle (the runtime deletes each job's objects once collected).
        Default None: the step makes one (``batch_jobs.bucket``): S3-managed encryption,
        TLS only, no public access, objects expired after the job's timeout in days plus 2
        (3 days by default), retained on stack deletion as it empties itself.
    :param thinking: ``Thinking.ADAPTIVE`` (``thinking: {"type": "adaptive"}``) or
        ``Thinking.DISABLED`` (``{"type": "disabled"}``), where the model accepts it (the
        model catalogue); joins the record key's fingerprint, as it changes the answer.
        Default None: none sent, the model's default (Claude Haiku 5.5 thinks, adaptive).
    :param effort: one of the model's effort levels (``Effort.LOW`` ... ``Effort.MAX``, or
        ``"low"`` ... ``"max"``), sent as ``output_config: {"effort": ...}``; with thinking
        off, one of the levels the model accepts then (Claude Haiku 5.5: up to ``high``).
        Joins the record key's fingerprint. Default None: none sent, the model's default
        (Claude Haiku 5.5: ``medium``).
    :param model_prices: overrides of the model catalogue's prices, per model id, as
        ``constructs_lib.model_prices.price_table`` takes them (the fields that changed, a
        ``ModelPrice``, or None for "unknown"); the step's model's row becomes
        ``MODEL_RATES``, which prices every billed request (``cost_usd`` of the result, the
        result event and the ``on_outcome`` outcome). Default None: the catalogue's prices.
    :param result_fields: what each result event carries besides ids, codes and usage,
        ``ResultFields`` flags combined with ``|``: ``LABEL`` (``result.label``, one of
        ``allowed_labels``), ``KEY`` (``key_parts``, the business key's parts, an email if
        the key is one) and ``PARSED`` (``result.parsed``, ``parse_answer``'s free text), or
        ``NONE``. Every subscriber of ``result_bus`` sees what an event carries; the key is
        always named by its record id (``key``). Needs ``result_bus``. Default
        ``ResultFields.LABEL``.
    :param point_in_time_recovery: continuous backups of the table the step creates:
        ``True`` (35 days), ``False`` (off) or a ``Duration`` of whole days from 1 to 35. A
        record that expired or was deleted stays restorable this long: recovery from a
        mistake against stored answers (row data) outliving their TTL. Refused with
        ``table`` (yours keeps its own setting). Default ``True``: on, 35 days.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        event_pattern: events.EventPattern,
        idempotency_key: str,
        prompt_version: str,
        system_prompt: str | None = None,
        api_key_secret: secretsmanager.ISecret | None = None,
        model_provider: ModelProvider = ModelProvider.ANTHROPIC,
        event_bus: events.IEventBus | EventBusV2Base | None = None,
        model_id: str = defaults.DEFAULT_MODEL_ID,
        max_tokens: int = defaults.DEFAULT_MAX_TOKENS,
        allowed_labels: list[str] | None = None,
        table: dynamodb.ITable | None = None,
        dead_letter_queue: sqs.IQueue | None = None,
        alarm_topic: sns.ITopic | None = None,
        max_concurrency: int = defaults.DEFAULT_MAX_CONCURRENCY,
        lambda_retry_attempts: int = defaults.DEFAULT_LAMBDA_RETRY_ATTEMPTS,
        event_retry_attempts: int = defaults.DEFAULT_EVENT_RETRY_ATTEMPTS,
        max_event_age: Duration = defaults.DEFAULT_MAX_EVENT_AGE,
        expires_after: Duration | None = None,
        timeout: Duration = defaults.DEFAULT_TIMEOUT,
        memory_size: int = defaults.DEFAULT_MEMORY_SIZE,
        architecture: lambda_.Architecture = lambda_.Architecture.X86_64,
        log_retention: logs.RetentionDays = defaults.DEFAULT_LOG_RETENTION,
        api_key_max_age: Duration = defaults.DEFAULT_API_KEY_MAX_AGE,
        snap_start: bool = False,
        handler: ModelStepHandler | None = None,
        environment: Mapping[str, str] | None = None,
        system_prompt_file: str | Path | None = None,
        prompt_cache: PromptCache = PromptCache.FIVE_MINUTES,
        dashboard: bool = False,
        tracing: bool = False,
        result_bus: events.IEventBus | EventBusV2Base | None = None,
        delivery: ModelDelivery | None = None,
        thinking: Thinking | None = None,
        effort: Effort | str | None = None,
        model_prices: Mapping[str, Mapping[str, Any] | ModelPrice | None] | None = None,
        result_fields: ResultFields | None = None,
        point_in_time_recovery: bool | Duration | None = None,
        batch_bucket: s3.IBucket | None = None,
    ) -> None:
        """Check every prop, then build the step part by part (props: see the class)."""
        super().__init__(scope, id)
        props = _StepProps(
            event_pattern=event_pattern,
            idempotency_key=idempotency_key,
            prompt_version=prompt_version,
            system_prompt=system_prompt,
            api_key_secret=api_key_secret,
            model_provider=model_provider,
            event_bus=event_bus,
            model_id=model_id,
            max_tokens=max_tokens,
            allowed_labels=allowed_labels,
            table=table,
            dead_letter_queue=dead_letter_queue,
            alarm_topic=alarm_topic,
            max_concurrency=max_concurrency,
            lambda_retry_attempts=lambda_retry_attempts,
            event_retry_attempts=event_retry_attempts,
            max_event_age=max_event_age,
            expires_after=expires_after,
            timeout=timeout,
            memory_size=memory_size,
            architecture=architecture,
            log_retention=log_retention,
            api_key_max_age=api_key_max_age,
            snap_start=snap_start,
            handler=handler,
            environment=environment,
            system_prompt_file=system_prompt_file,
            prompt_cache=prompt_cache,
            dashboard=dashboard,
            tracing=tracing,
            result_bus=result_bus,
            delivery=delivery or ModelDelivery.realtime(),  # batch: see _with_delivery_timeout
            thinking=thinking,
            effort=effort,
            model_prices=model_prices,
            result_fields=result_fields,
            point_in_time_recovery=point_in_time_recovery,
            batch_bucket=batch_bucket,
        )
        owner = f"IdempotentModelStep '{self.node.path}'"
        props.validate(owner, source=self.node.path, resolve=Stack.of(self).resolve)
        self._fit_model(props, owner)
        props = self._with_delivery_timeout(props)
        self._describe(props)
        self._storage(props)
        self._queues(props)
        self._function(props)
        self._consume(props)
        self._subscribe(props)
        self._alarms(props)
        self._batch_delivery(props)
        # Last: the dashboard reads the delivery and every alarm, the batch ones included.
        self._dashboard(props)

    def _describe(self, props: _StepProps) -> None:
        """The step's public attributes: the props it was given and what it derived; and
        the checkov acknowledgments of the resources it makes (applied at synth)."""
        acknowledge_checkov_findings(self, MODEL_STEP)
        self.lambda_retry_attempts = props.lambda_retry_attempts
        self.event_retry_attempts = props.event_retry_attempts
        self.max_concurrency = props.max_concurrency
        self.model_provider = props.model_provider
        #: The model each request names (``model_id``).
        self.model_id = props.model_id
        #: The prompt cache TTL requests ask for (``prompt_cache``): the rate cache writes
        #: are billed at.
        self.prompt_cache = props.prompt_cache
        self.event_bus = props.event_bus
        #: The bus each key's terminal result is published on (``None``: no result events).
        self.result_bus = props.result_bus
        #: What its result events carry besides ids, codes and usage (``result_fields``).
        self.result_fields = (
            props.result_fields if props.result_fields is not None else DEFAULT_RESULT_FIELDS
        )
        #: Transient-failure attempts of one delivery (the runtime's ``MAX_ATTEMPTS``).
        self.max_attempts = props.max_attempts
        #: How long the step remembers a key (its budget, its stored outcome, its hand-offs):
        #: ``expires_after``, or derived from ``max_event_age``, the queues' retention and
        #: the delivery (``model_step.lifetime``).
        self.key_lifetime = props.key_lifetime
        #: Billed model requests one delivery can cost: SDK attempts (1) x ``MAX_ATTEMPTS``.
        #: 429/529 answers are not billed and never use an attempt.
        self.max_model_requests_per_delivery = (
            defaults.SDK_ATTEMPTS_PER_INVOCATION * self.max_attempts
        )
        #: Receives after which SQS moves a buffered row to ``redrive_queue``:
        #: ``MAX_ATTEMPTS + 1 + THROTTLE_RECEIVE_HEADROOM`` (9 by default).
        self.buffer_max_receive_count = props.buffer_max_receive_count
        #: Receives after which SQS moves a row from ``redrive_queue`` to the DLQ:
        #: ``buffer_max_receive_count + REDRIVE_QUEUE_RECEIVE_HEADROOM`` (14 by default).
        self.redrive_max_receive_count = defaults.redrive_queue_max_receive_count(
            self.buffer_max_receive_count
        )

    def _fit_model(self, props: _StepProps, owner: str) -> None:
        """Issue 32: the request checked against the model catalogue (a warning for a model
        it does not know), and the price each billed request is costed at."""
        fitted = props.model_fit(owner)
        #: The model's catalogue row (``ModelSpec``), or None for a model it does not know.
        self.model_spec: Any = fitted.spec
        #: The ``thinking.type`` each request sends (None: the model's default).
        self.thinking: str | None = fitted.thinking
        #: The ``output_config.effort`` each request sends (None: the model's default).
        self.effort: str | None = fitted.effort
        #: The price of the step's requests (``MODEL_RATES``); None: their cost is unknown.
        self.model_price: ModelPrice | None = props.model_price(owner)
        for warning_id, message in fitted.warnings:
            Annotations.of(self).add_warning_v2(warning_id, message)

    # ------------------------------------------------------------------ parts
    def _storage(self, props: _StepProps) -> None:
        """The idempotency table: the caller's, or a new one with ``point_in_time_recovery``;
        and, on Bedrock under batch delivery, the jobs' bucket and role."""
        self._bedrock_batch_jobs(props)
        if props.table is not None:
            self.table: dynamodb.ITable = props.table
            return
        days = props.recovery_period_days
        self.table = dynamodb.Table(
            self,
            "IdempotencyTable",
            **defaults.idempotency_table_props(pitr.specification(days)),
        )
        pitr.acknowledge_off(self.table, days)

    def _bedrock_batch_jobs(self, props: _StepProps) -> None:
        """Issue 37: under batch delivery on Bedrock, the jobs' bucket (``batch_bucket`` or
        a new one, its objects expired ``defaults.bedrock_batch_expiry`` after they are
        written) and their service role, which may invoke the step's model only."""
        #: Bedrock batch delivery's bucket and job role (``BedrockBatchJobs``); else None.
        self.batch_jobs: BedrockBatchJobs | None = None
        if not props.bedrock_batch:
            return
        self.batch_jobs = BedrockBatchJobs(
            self,
            "BedrockBatch",
            bucket=props.batch_bucket,
            expire_after=defaults.bedrock_batch_expiry(props.bedrock_batch_timeout_hours),
        )
        self._grant_bedrock_invoke(self.batch_jobs.job_role, props.model_id)

    def _queues(self, props: _StepProps) -> None:
        """The DLQ (the caller's, or a new one), the redrive queue in front of it and the
        buffer queue in front of the function: buffer -> redrive -> DLQ."""
        self.dead_letter_queue: sqs.IQueue = props.dead_letter_queue or sqs.Queue(
            self, "DeadLetterQueue", **defaults.dead_letter_queue_props()
        )
        self.redrive_queue: sqs.Queue = sqs.Queue(
            self,
            "RedriveQueue",
            **defaults.redrive_queue_props(
                props.timeout, self.dead_letter_queue, self.redrive_max_receive_count
            ),
        )
        self.buffer_queue: sqs.Queue = sqs.Queue(
            self,
            "BufferQueue",
            **defaults.buffer_queue_props(
                props.timeout, self.redrive_queue, self.buffer_max_receive_count
            ),
        )

    def _function(self, props: _StepProps) -> None:
        """The function, its environment and the grants its runtime needs."""
        handler = props.handler or ModelStepHandler.default()
        text, _ = props.system_prompt_text(self.node.path)
        #: sha256 of the system prompt: the function's ``SYSTEM_PROMPT_SHA256``.
        self.system_prompt_sha256 = prompt_sha256(text)
        self.function = python_function(
            self,
            "Function",
            # Last: the first package's parent is the staged source of a synth that skips
            # bundling, and the prompt's directory is in the assembly.
            packages=[*handler.packages, prompt_package(self, text)],
            handler=handler.handler,
            requirements=[*handler.requirements, *self._tracing_requirements(props)],
            architecture=props.architecture,
            timeout=props.timeout,
            memory_size=props.memory_size,
            log_retention=props.log_retention,
            description="Idempotent model step: one model request per business key",
            environment=self._environment(props),
            tracing=lambda_.Tracing.ACTIVE if props.tracing else None,
        )
        if props.tracing:
            self._acknowledge_tracing_grant()
        if props.result_bus is not None:
            self.grant_publish_results(cast(iam.IRole, self.function.role))
        # python_function always creates the role.
        self._grant_runtime_permissions(cast(iam.IRole, self.function.role), props)

    @staticmethod
    def _tracing_requirements(props: _StepProps) -> list[Path]:
        """With ``tracing``, the X-Ray SDK (Powertools' Tracer needs it), locked beside the
        runtime's own requirements; without, nothing, so an untraced step ships no SDK."""
        if not props.tracing:
            return []
        return [lambda_src_root() / "model_step" / TRACING_REQUIREMENTS]

    # ------------------------------------------------------------- result events
    def grant_publish_results(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let ``grantee`` put this step's result events on ``result_bus``: ``PutEvents`` on
        the bus only, for source = this step's path and the two result detail types."""
        bus = self.result_bus
        if bus is None:
            raise PropValidationError(
                f"IdempotentModelStep '{self.node.path}': grant_publish_results needs a result_bus"
            )
        detail_types = list(RESULT_DETAIL_TYPES)
        if isinstance(bus, EventBusV2Base):
            return bus.grant_put_events_to(
                grantee, sources=[self.node.path], detail_types=detail_types
            )
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["events:PutEvents"],
            resource_arns=[bus.event_bus_arn],
            conditions={
                "StringEquals": {
                    "events:source": [self.node.path],
                    "events:detail-type": detail_types,
                }
            },
        )

    def grant_own_records(self, grantee: iam.IGrantable, *actions: str) -> iam.Grant:
        """Grant item ``actions`` on ``table`` for this step's records only: ids starting with
        its record prefix (the construct path) and ``#``, by ``dynamodb:LeadingKeys``. The
        step grants its function this way; use it for a function of yours that reads the
        step's records (it then reads stored answers: row data)."""
        return grant_record_prefix(self.table, grantee, self.node.path, *actions)

    def result_event_pattern(
        self,
        *,
        detail_types: Sequence[str] = (RESULT_COMPLETED,),
        detail: Mapping[str, Any] | None = None,
    ) -> events.EventPattern:
        """The pattern of this step's result events, for a downstream step's
        ``event_pattern`` (on ``result_bus``).

        :param detail_types: default ``("Model Step Completed",)``; add
            ``RESULT_DEAD_LETTERED`` to follow failures too.
        :param detail: an extra detail pattern, e.g. ``{"result": {"label": ["hot"]}}``.
            Default: none (every result).

        Example::

            outreach = IdempotentModelStep(
                self, "Outreach", event_bus=bus,
                event_pattern=classify.result_event_pattern(detail={"result": {"label": ["hot"]}}),
                idempotency_key="key", ...)
        """
        unknown = sorted(set(detail_types) - set(RESULT_DETAIL_TYPES))
        if not detail_types or unknown:
            raise PropValidationError(
                f"IdempotentModelStep '{self.node.path}': result_event_pattern detail_types "
                f"must be some of {list(RESULT_DETAIL_TYPES)}, got {list(detail_types)!r}"
            )
        if self.result_bus is None:
            raise PropValidationError(
                f"IdempotentModelStep '{self.node.path}': result_event_pattern needs a "
                "result_bus (the step publishes no result events without one)"
            )
        missing = result_field_names.fields_a_pattern_needs(detail) & ~self.result_fields
        if missing:
            raise PropValidationError(
                f"IdempotentModelStep '{self.node.path}': result_event_pattern detail "
                f"filters on {result_field_names.describe(missing)}, which this step's "
                f"events do not carry (result_fields="
                f"{result_field_names.describe(self.result_fields)}); add it to "
                "result_fields, or filter on what they carry"
            )
        return events.EventPattern(
            source=[self.node.path],
            detail_type=list(detail_types),
            detail=dict(detail) if detail is not None else None,
        )

    def _acknowledge_tracing_grant(self) -> None:
        # Tracing.ACTIVE grants xray:PutTraceSegments and xray:PutTelemetryRecords on "*",
        # as AWSXRayDaemonWriteAccess does: neither action has resource-level permissions.
        role = cast(iam.Role, self.function.role)
        Validations.of(role).acknowledge(
            Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason="tracing=True: xray:PutTraceSegments and xray:PutTelemetryRecords "
                "support no resource-level permissions, so X-Ray requires Resource '*'; "
                "every other statement of this role names its resources.",
            )
        )

    def _environment(self, props: _StepProps) -> dict[str, str]:
        """What the runtime reads (``lambda_src/model_step/environment.py``), then the caller's."""
        secret = props.api_key_secret
        model_timeout = props.timeout.to_seconds() - defaults.MODEL_TIMEOUT_MARGIN.to_seconds()
        return {
            env.IDEMPOTENCY_TABLE_NAME: self.table.table_name,
            # The construct path, never the generated function name: a replaced
            # function keeps its records, two steps sharing a table never collide.
            env.IDEMPOTENCY_RECORD_PREFIX: self.node.path,
            env.DEAD_LETTER_QUEUE_URL: self.dead_letter_queue.queue_url,
            env.BUFFER_QUEUE_URL: self.buffer_queue.queue_url,
            # Records carry their queue's ARN (eventSourceARN), not its URL.
            env.REDRIVE_QUEUE_ARN: self.redrive_queue.queue_arn,
            env.IDEMPOTENCY_KEY: props.idempotency_key,
            env.IDEMPOTENCY_EXPIRES_AFTER_SECONDS: str(int(props.key_lifetime.to_seconds())),
            env.PROMPT_VERSION: props.prompt_version,
            # Only the hash: the text ships with the code (system_prompt_asset.py).
            env.SYSTEM_PROMPT_SHA256: self.system_prompt_sha256,
            env.PROMPT_CACHE: props.prompt_cache.value,
            env.MODEL_ID: props.model_id,
            env.MAX_TOKENS: str(props.max_tokens),
            env.MODEL_PROVIDER: props.model_provider.value,
            env.MODEL_TIMEOUT_SECONDS: str(int(model_timeout)),
            env.MAX_EVENT_AGE_SECONDS: str(int(props.max_event_age.to_seconds())),
            env.MAX_ATTEMPTS: str(self.max_attempts),
            env.POWERTOOLS_SERVICE_NAME: self.node.path,
            env.POWERTOOLS_METRICS_NAMESPACE: METRICS_NAMESPACE,
            **(
                {env.ALLOWED_LABELS: ",".join(props.allowed_labels)} if props.allowed_labels else {}
            ),
            **(
                {
                    env.ANTHROPIC_API_KEY_SECRET_ARN: secret.secret_full_arn or secret.secret_arn,
                    env.API_KEY_MAX_AGE_SECONDS: str(int(props.api_key_max_age.to_seconds())),
                }
                if secret is not None
                else {}
            ),
            **({env.TRACING_ENABLED: "true"} if props.tracing else {}),
            **self._result_bus_environment(props),
            **props.delivery.environment(),
            **self._bedrock_batch_environment(),
            **self._model_environment(),
            **dict(props.environment or {}),
        }

    def _bedrock_batch_environment(self) -> dict[str, str]:
        """Issue 37: the jobs' bucket, key prefix and role."""
        jobs = self.batch_jobs
        if jobs is None:
            return {}
        return {
            env.BATCH_BUCKET_NAME: jobs.bucket.bucket_name,
            env.BATCH_S3_PREFIX: jobs.prefix,
            env.BATCH_ROLE_ARN: jobs.job_role.role_arn,
        }

    def _model_environment(self) -> dict[str, str]:
        """Issue 32: ``THINKING`` and ``EFFORT`` when set, and ``MODEL_RATES`` when the model
        has a price."""
        found = {env.THINKING: self.thinking, env.EFFORT: self.effort}
        if self.model_price is not None:
            found[env.MODEL_RATES] = self.model_price.for_step()
        return {name: value for name, value in found.items() if value is not None}

    def _result_bus_environment(self, props: _StepProps) -> dict[str, str]:
        bus = props.result_bus
        if bus is None:
            return {}
        return {
            env.RESULT_BUS_ARN: bus.event_bus_arn,
            env.RESULT_BUS_KIND: "v2" if isinstance(bus, EventBusV2Base) else "classic",
            env.RESULT_EVENT_SOURCE: self.node.path,
            env.RESULT_FIELDS: result_field_names.runtime_value(self.result_fields),
        }

    def _consume(self, props: _StepProps) -> None:
        """The concurrency cap and the event source mappings of the buffer and redrive queues."""
        cfn_function = cast(lambda_.CfnFunction, self.function.node.default_child)
        if props.max_concurrency == 1:
            # MaximumConcurrency cannot be 1; the function's own reserved
            # concurrency is the cap, and the mapping's extra poller is throttled
            # (the throttled batch returns to the queue: THROTTLE_RECEIVE_HEADROOM).
            cfn_function.reserved_concurrent_executions = 1
            Annotations.of(self).add_warning_v2(
                "idempotent-model-step:max-concurrency-1",
                "max_concurrency=1 reserves 1 of the account's concurrency for this "
                "function and caps its event source mapping at 2 (Lambda's minimum); the "
                "second poller is throttled, so some rows are received more than once "
                "before they run. See docs/construct.md, 'A cap of 1'.",
            )
        #: With ``snap_start``, the alias the event source mapping invokes; else ``None``.
        self.alias: lambda_.Alias | None = (
            self._snap_start_alias(cfn_function) if props.snap_start else None
        )
        consumer: lambda_.IFunction = self.alias or self.function
        # The poller's actions only; ChangeMessageVisibility on the buffer queue, where the
        # runtime spaces transient retries (queue_grants.py says why not SqsEventSource).
        queue_grants.consume(
            consumer,
            self.buffer_queue,
            # Message Batches delivery (issue 19): many rows a delivery, after a window.
            batch_size=props.delivery.mapping_batch_size,
            max_batching_window=props.delivery.mapping_batching_window,
            max_concurrency=max(props.max_concurrency, defaults.EVENT_SOURCE_MIN_CONCURRENCY),
            change_visibility=True,
        )
        queue_grants.consume(
            consumer,
            self.redrive_queue,
            batch_size=1,
            max_concurrency=defaults.REDRIVE_QUEUE_MAX_CONCURRENCY,
        )

    def _snap_start_alias(self, cfn_function: lambda_.CfnFunction) -> lambda_.Alias:
        # python_function builds every function of the library and takes no
        # SnapStart option; the L1 property is what the L2 prop would set, and
        # SnapStart is version-locked, so currentVersion's hash covers it.
        cfn_function.snap_start = lambda_.CfnFunction.SnapStartProperty(
            apply_on="PublishedVersions"
        )
        version = self.function.current_version
        # CDK retains superseded versions by default; with SnapStart each one
        # keeps a billed snapshot cache, so a replaced version is deleted.
        version.apply_removal_policy(RemovalPolicy.DESTROY)
        return lambda_.Alias(
            self,
            SNAP_START_ALIAS_ID,
            alias_name=SNAP_START_ALIAS_NAME,
            version=version,
            description="SnapStart version the step's event source mappings invoke",
        )

    def _subscribe(self, props: _StepProps) -> None:
        """The classic rule, or the v2 subscriber, that feeds the buffer queue."""
        #: The classic rule (``None`` on an :class:`EventBusV2`).
        self.rule: events.Rule | None = None
        #: The v2 subscriber and the role it assumes (``None`` on a classic bus).
        self.subscriber: eventsv2.CfnSubscriber | None = None
        self.subscriber_role: iam.Role | None = None
        bus = props.event_bus
        if isinstance(bus, EventBusV2Base):
            self._subscribe_v2(bus, props)
            return
        self.rule = events.Rule(
            self,
            "Rule",
            event_bus=bus,
            event_pattern=props.event_pattern,
            description=f"Routes events to the idempotent model step {self.node.path}",
        )
        self.rule.add_target(
            targets.SqsQueue(
                self.buffer_queue,
                dead_letter_queue=self.dead_letter_queue,
                retry_attempts=props.event_retry_attempts,
                max_event_age=props.max_event_age,
            )
        )

    def _subscribe_v2(self, bus: EventBusV2Base, props: _StepProps) -> None:
        # The delivery role: only SendMessage on the buffer queue (the target) and on
        # the DLQ (the on-failure destination). Same-account SQS targets of a v2
        # subscriber are authorized through this role, not a queue policy.
        # Required by CloudFormation; derived from the construct path, as CDK names a
        # classic bus, so it is stable and unique per stack.
        name = Names.unique_resource_name(
            self, max_length=64, separator="-", allowed_special_characters="-_."
        )
        stack = Stack.of(self)
        # Only EventBridge acting for THIS subscriber may assume the role (confused deputy):
        # its ARN is subscriber/<name>/<service id>, and the name is known at synth, so the
        # trust policy names it without a dependency on the subscriber.
        role = iam.Role(
            self,
            "SubscriberRole",
            assumed_by=iam.ServicePrincipal(
                "events.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {
                        "aws:SourceArn": stack.format_arn(
                            service="events", resource="subscriber", resource_name=f"{name}/*"
                        )
                    },
                },
            ),
            description=f"EventBridge v2 subscriber of {self.node.path}: delivers to its "
            "buffer queue and dead-letters to its DLQ",
        )
        queue_grants.grant_send(self.buffer_queue, role)
        queue_grants.grant_send(self.dead_letter_queue, role)
        self.subscriber_role = role
        subscriber = eventsv2.CfnSubscriber(
            self,
            "Subscriber",
            name=name,
            event_bus_arn=bus.event_bus_arn,
            description=f"Routes events to the idempotent model step {self.node.path}"[:512],
            # PutEvents puts the classic envelope (source, detail-type, time,
            # detail) in Data, so a DATA filter takes event_pattern as it is.
            filter_configuration=eventsv2.CfnSubscriber.FilterConfigurationProperty(
                filters=[
                    eventsv2.CfnSubscriber.FilterProperty(
                        pattern=Stack.of(self).to_json_string(_render_pattern(props.event_pattern)),
                        scope="DATA",
                    )
                ]
            ),
            # RAW delivers Data: the same event JSON a classic rule target sends,
            # which is the SQS body the runtime parses (contract section 2).
            transformer=eventsv2.CfnSubscriber.TransformerProperty(type="RAW"),
            type="UNORDERED",
            invoke_configuration=eventsv2.CfnSubscriber.InvokeConfigurationProperty(
                role_arn=role.role_arn,
                target_arn=self.buffer_queue.queue_arn,
                sqs_parameters=eventsv2.CfnSubscriber.SqsParametersProperty(),
            ),
            # The v2 defaults are 5 attempts / 300 s; the step's props (same ranges
            # as a classic target: 0-185, 60-86,400 s) replace them.
            retry_policy=eventsv2.CfnSubscriber.RetryPolicyProperty(
                max_retry_attempts=props.event_retry_attempts,
                max_event_age_in_seconds=int(props.max_event_age.to_seconds()),
                retry_strategy="ALL",
            ),
            on_failure_configuration=eventsv2.CfnSubscriber.OnFailureConfigurationProperty(
                arn=self.dead_letter_queue.queue_arn
            ),
        )
        # CloudFormation must not create the subscriber before its role can send.
        subscriber.node.add_dependency(role)
        self.subscriber = subscriber

    def _alarms(self, props: _StepProps) -> None:
        """The step's alarms, each notifying ``alarm_topic`` when given."""
        self.alarms: list[cloudwatch.Alarm] = self._create_alarms(props.max_event_age)
        if self.result_bus is not None:
            self.alarms.append(self._result_events_alarm())
        if props.alarm_topic is not None:
            for alarm in self.alarms:
                alarm.add_alarm_action(cloudwatch_actions.SnsAction(props.alarm_topic))
        # Read at synth, so an action added after the constructor (or the batch alarms
        # appended by _batch_delivery) counts: no warning when every alarm notifies someone.
        Aspects.of(self).add(
            NobodyNotified(self, self.alarms, ALARMS_WITHOUT_ACTION_WARNING, self._nobody_notified)
        )
        if props.dead_letter_queue is None:
            Validations.of(self.dead_letter_queue).acknowledge(
                Acknowledgment(
                    id="AwsSolutions-SQS3",
                    reason="This queue is itself the dead-letter queue of the step's "
                    "EventBridge delivery and of its redrive queue's redrive policy; a DLQ "
                    "of a DLQ would only move the same messages one hop further.",
                )
            )

    def _nobody_notified(self, silent: int, total: int) -> str:
        """The warning for ``silent`` of the step's ``total`` alarms without an action."""
        which = f"The {total}" if silent == total else f"{silent} of the {total}"
        return (
            f"{which} alarms of IdempotentModelStep '{self.node.path}' have no alarm "
            "action (no alarm_topic): when one fires, nobody is notified. Pass "
            "alarm_topic=<an sns.ITopic> to notify someone, or acknowledge this warning with "
            f'Annotations.of(step).acknowledge_warning("{ALARMS_WITHOUT_ACTION_WARNING}", '
            '"<why>"). See docs/operations.md, "Alarms that notify nobody".'
        )

    def _dashboard(self, props: _StepProps) -> None:
        """With ``dashboard=True``, a dashboard of this step alone."""
        from .model_step_dashboard import ModelStepDashboard

        #: With ``dashboard=True``, the step's own dashboard; else ``None``.
        self.dashboard: ModelStepDashboard | None = (
            ModelStepDashboard(self, "Dashboard", steps=[self]) if props.dashboard else None
        )

    # -------------------------------------------------------------- permissions
    def _grant_runtime_permissions(self, role: iam.IRole, props: _StepProps) -> None:
        # Exactly the four calls Powertools' DynamoDB persistence layer makes, on this step's
        # own records only: the table may be shared (a batch step's staged rows hold prompts).
        self.grant_own_records(
            role,
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:DeleteItem",
        )
        # The handler dead-letters non-retryable failures itself (KMS included).
        queue_grants.grant_send(self.dead_letter_queue, role)
        # A rate-limited row is re-enqueued as a delayed copy on the buffer queue, and a
        # row from the redrive queue is put back there; ChangeMessageVisibility (spacing
        # transient retries) comes with the buffer queue's event source mapping.
        queue_grants.grant_send(self.buffer_queue, role)
        if props.api_key_secret is not None:
            _grant_get_secret_value(role, props.api_key_secret)
        if props.model_provider is ModelProvider.BEDROCK:
            self._grant_bedrock_invoke(role, props.model_id)
        if self.batch_jobs is not None:
            self.batch_jobs.grant_submit(role, self._bedrock_model_arns(props.model_id))

    def _bedrock_model_arns(self, model_id: str) -> list[str]:
        """What ``bedrock:CreateModelInvocationJob`` is evaluated on besides the job: the
        profile and the foundation model in each region it routes to, or the model."""
        stack = Stack.of(self)
        model = None if Token.is_unresolved(model_id) else bedrock_models.parse_model_id(model_id)
        if model is None or not model.is_profile:
            return [
                stack.format_arn(
                    service="bedrock",
                    account="",
                    resource="foundation-model",
                    resource_name=model_id,
                )
            ]
        profile_arn = stack.format_arn(
            service="bedrock", resource="inference-profile", resource_name=model_id
        )
        return [
            profile_arn,
            *bedrock_models.foundation_model_arns(model, stack.partition, stack.region),
        ]

    # -------------------------------------------------------- Bedrock (issue 22)
    def _grant_bedrock_invoke(self, role: iam.IRole, model_id: str) -> None:
        """``bedrock:InvokeModel`` on what IAM evaluates for ``model_id``.

        A foundation-model id: the model in the stack's region. An inference-profile id: the
        profile, and the foundation model in every region the profile routes to
        (``bedrock_models.GEOGRAPHY_REGIONS``; any region for ``global.``), only through that
        profile (``bedrock:InferenceProfileArn``).
        """
        stack = Stack.of(self)
        model = None if Token.is_unresolved(model_id) else bedrock_models.parse_model_id(model_id)
        if model is None or not model.is_profile:
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["bedrock:InvokeModel"],
                    resources=[
                        stack.format_arn(
                            service="bedrock",
                            account="",
                            resource="foundation-model",
                            resource_name=model_id,
                        )
                    ],
                )
            )
            return
        profile_arn = stack.format_arn(
            service="bedrock", resource="inference-profile", resource_name=model_id
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["bedrock:InvokeModel"], resources=[profile_arn])
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["bedrock:InvokeModel"],
                resources=bedrock_models.foundation_model_arns(
                    model, stack.partition, stack.region
                ),
                conditions={
                    "StringEquals": {bedrock_models.INFERENCE_PROFILE_ARN_KEY: profile_arn}
                },
            )
        )
        if model.profile_prefix == bedrock_models.GLOBAL_PREFIX:
            Validations.of(role).acknowledge(
                Acknowledgment(
                    id="AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:bedrock:*::"
                    f"foundation-model/{model.foundation_model}]",
                    reason="A global. inference profile routes each request to any "
                    "commercial region, so the foundation model is granted in every region; "
                    "one action, one model, and only through this profile "
                    "(bedrock:InferenceProfileArn).",
                )
            )

    # ------------------------------------------------------------------ metrics
    def metric_invocations_sent_to_dlq(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Deliveries to the buffer queue that gave up and went to the DLQ (Sum, 1 minute).

        Classic bus: ``AWS/Events`` ``InvocationsSentToDlq`` of the rule. v2 bus:
        ``AWS/EventsV2`` ``OnFailureDestinationDelivered`` of the subscriber.
        """
        if self.subscriber is not None:
            return self._v2_metric("OnFailureDestinationDelivered", period)
        return self._rule_metric("InvocationsSentToDlq", period)

    def metric_invocations_failed_to_be_sent_to_dlq(
        self, period: Duration | None = None
    ) -> cloudwatch.Metric:
        """Deliveries that could not even reach the DLQ: lost events.

        Classic bus: ``InvocationsFailedToBeSentToDlq``. v2 bus: ``EventsDropped``.
        """
        if self.subscriber is not None:
            return self._v2_metric("EventsDropped", period)
        return self._rule_metric("InvocationsFailedToBeSentToDlq", period)

    def metric_buffer_age(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Age of the oldest row waiting in the buffer queue (seconds, Maximum, 1 minute)."""
        return self.buffer_queue.metric_approximate_age_of_oldest_message(
            period=period or Duration.minutes(1), statistic="Maximum"
        )

    def metric_rate_limited(self, period: Duration | None = None) -> cloudwatch.Metric:
        """429/529 answers the runtime waited out (EMF ``RateLimited``, Sum, default 5 minutes)."""
        return self._runtime_metric("RateLimited", period)

    def metric_dead_letter_messages(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Messages sent to the DLQ by a client (SQS ``NumberOfMessagesSent``, Sum, 1 minute).

        Counts the runtime's own dead letters and EventBridge's failed deliveries, but NOT
        a message SQS moved there by a redrive policy (SQS does not count those as sent):
        alarm on :meth:`metric_dead_letter_visible` and :meth:`metric_dead_letter_received`
        to see every message.
        """
        return self.dead_letter_queue.metric_number_of_messages_sent(
            period=period or Duration.minutes(1), statistic="Sum"
        )

    def metric_dead_letter_visible(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Messages waiting on the DLQ, from any path, SQS redrives included
        (``ApproximateNumberOfMessagesVisible``, Maximum, 1 minute)."""
        return self.dead_letter_queue.metric_approximate_number_of_messages_visible(
            period=period or Duration.minutes(1), statistic="Maximum"
        )

    def metric_dead_letter_received(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Receives of DLQ messages by any consumer (``NumberOfMessagesReceived``, Sum,
        1 minute): sees a message a DLQ consumer took before the depth was sampled."""
        return self.dead_letter_queue.metric_number_of_messages_received(
            period=period or Duration.minutes(1), statistic="Sum"
        )

    def metric_redrive_received(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Receives from the redrive queue (``NumberOfMessagesReceived``, Sum, 1 minute).

        The function receives every row that arrives there, so this counts the rows SQS
        gave up on after ``buffer_max_receive_count`` receives (and their re-receives).
        """
        return self.redrive_queue.metric_number_of_messages_received(
            period=period or Duration.minutes(1), statistic="Sum"
        )

    def metric_model_requests(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Billed model requests (Powertools EMF ``ModelRequests``, Sum, default 5 minutes)."""
        return self._runtime_metric("ModelRequests", period)

    def metric_duplicates_suppressed(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Deliveries answered from the table without a model request (Sum, default 5 minutes)."""
        return self._runtime_metric("DuplicatesSuppressed", period)

    # -- issue 20: prompt caching
    def metric_cache_write_input_tokens(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Input tokens written to the prompt cache (EMF ``CacheWriteInputTokens``, Sum,
        default 5 minutes): about one prompt's length per TTL lapse."""
        return self._runtime_metric("CacheWriteInputTokens", period)

    def metric_cache_read_input_tokens(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Input tokens read from the prompt cache at 0.1x the input price (EMF
        ``CacheReadInputTokens``, Sum, default 5 minutes)."""
        return self._runtime_metric("CacheReadInputTokens", period)

    def metric_transient_failures(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Deliveries that failed transiently and were retried (EMF ``TransientFailures``,
        Sum, default 5 minutes)."""
        return self._runtime_metric("TransientFailures", period)

    def metric_non_retryable_failures(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Keys dead-lettered, once per key (EMF ``NonRetryableFailures``, Sum, default 5
        minutes)."""
        return self._runtime_metric("NonRetryableFailures", period)

    def metric_configuration_errors(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Deliveries refused by the step's own table, queues or secret (EMF
        ``ConfigurationErrors``, Sum, default 5 minutes): an ``AccessDenied``, a missing
        resource or an unusable KMS key. The rows are left to be retried, never
        dead-lettered; the function's log names each action and resource once per
        container."""
        return self._runtime_metric("ConfigurationErrors", period)

    def metric_input_tokens(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Input tokens of billed answers (EMF ``InputTokens``, Sum, default 5 minutes)."""
        return self._runtime_metric("InputTokens", period)

    def metric_output_tokens(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Output tokens of billed answers (EMF ``OutputTokens``, Sum, default 5 minutes)."""
        return self._runtime_metric("OutputTokens", period)

    def metric_result_events_uncertain(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Result events that may or may not be on ``result_bus`` (EMF
        ``ResultEventsUncertain``, Sum, default 5 minutes): a delivery about to publish a
        key's event was killed (or timed out) before recording it, and the runtime does not
        publish it again, so the bus holds it at most once."""
        return self._runtime_metric("ResultEventsUncertain", period)

    def metric_buffer_depth(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Rows waiting in the buffer queue (``ApproximateNumberOfMessagesVisible``, Maximum,
        1 minute)."""
        return self.buffer_queue.metric_approximate_number_of_messages_visible(
            period=period or Duration.minutes(1), statistic="Maximum"
        )

    def _rule_metric(self, name: str, period: Duration | None) -> cloudwatch.Metric:
        # Only a step on a classic bus has a rule; a v2 step's metrics are its subscriber's.
        bus = None if isinstance(self.event_bus, EventBusV2Base) else self.event_bus
        return events_rule_metric(cast(events.IRule, self.rule), name, bus, period)

    def _v2_metric(self, name: str, period: Duration | None) -> cloudwatch.Metric:
        bus = cast(EventBusV2Base, self.event_bus)
        subscriber = cast(eventsv2.CfnSubscriber, self.subscriber)
        return events_v2_subscriber_metric(
            bus.event_bus_arn, subscriber.attr_subscriber_arn, name, period
        )

    def _runtime_metric(
        self, name: str, period: Duration | None, statistic: str = "Sum"
    ) -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace=METRICS_NAMESPACE,
            metric_name=name,
            dimensions_map={"service": self.node.path},
            statistic=statistic,
            period=period or Duration.minutes(5),
        )

    def _create_alarms(self, max_event_age: Duration) -> list[cloudwatch.Alarm]:
        access = "the subscriber role" if self.subscriber is not None else "the DLQ policy"
        specs = [
            (
                "SentToDlqAlarm",
                self.metric_invocations_sent_to_dlq(),
                "EventBridge gave up delivering events to the model step's buffer queue; "
                "they are in its DLQ.",
            ),
            (
                "FailedToBeSentToDlqAlarm",
                self.metric_invocations_failed_to_be_sent_to_dlq(),
                "EventBridge could not deliver events to the model step NOR to its DLQ; "
                f"those events are lost. Check {access} and the queues' encryption.",
            ),
            (
                "DeadLetterMessagesAlarm",
                self.metric_dead_letter_visible(),
                "Messages wait on the model step's DLQ (a non-retryable model error, "
                "exhausted attempts or receives, a rate limit past max_event_age, or a failed "
                "delivery). Read each message's ERROR_CODE attribute, fix the cause, then "
                "redrive the DLQ to the buffer queue (each key gets one new request) or "
                "delete what should not run again.",
            ),
            (
                "DeadLetterReceivedAlarm",
                self.metric_dead_letter_received(),
                "A message was received from the model step's DLQ: a dead letter arrived, "
                "even if a consumer (a failure recorder) took it before the depth alarm "
                "sampled the queue. Look for it where that consumer records failures, by "
                "its ERROR_CODE.",
            ),
            (
                "ConfigurationErrorsAlarm",
                self.metric_configuration_errors(),
                "The model step's deployment refused one of its own calls (AccessDenied, a "
                "missing table, queue or secret, or a KMS key it may not use). Find the line "
                "'configuration error: the step may not call <action> on <resource>' in the "
                "function's log (outcome configuration_error), fix the grant or resource; the "
                "rows retry by themselves. See docs/operations.md, 'Configuration errors'.",
            ),
            (
                "RedriveQueueAlarm",
                self.metric_redrive_received(),
                "A row was received maxReceiveCount times without an answer (crashes, "
                "timeouts or throttles); the step re-queued or dead-lettered it. Check the "
                "function's Errors, Throttles and Duration against its timeout; a row "
                "dead-lettered this way carries ERROR_CODE ReceivesExhausted.",
            ),
        ]
        alarms = [
            occurrence_alarm(self, alarm_id, metric, description)
            for alarm_id, metric, description in specs
        ]
        # Rows dead-letter as RateLimitExhausted once their age would pass
        # max_event_age; page when the oldest buffered row is half-way there. A
        # re-enqueued (rate-limited) copy restarts the queue's clock, so this sees
        # the backlog behind the cap; RateLimited counts the waits themselves.
        threshold = int(max_event_age.to_seconds() * defaults.BUFFER_AGE_ALARM_FRACTION)
        alarms.append(
            threshold_alarm(
                self,
                "BufferAgeAlarm",
                self.metric_buffer_age(),
                threshold,
                f"A row has waited {threshold} s or more in the model step's buffer queue "
                "(half of max_event_age): the concurrency cap or the provider's rate limit "
                "cannot keep up, and rows will be dead-lettered as RateLimitExhausted.",
            )
        )
        return alarms

    def _result_events_alarm(self) -> cloudwatch.Alarm:
        """With ``result_bus``: a result event the runtime could not tell was published."""
        return occurrence_alarm(
            self,
            "ResultEventsUncertainAlarm",
            self.metric_result_events_uncertain(),
            "A key's result event may or may not be on the result bus: the delivery "
            "publishing it was killed or timed out before recording it, and it is not "
            "published again (at most once). Look up the keys in the function's log "
            "(outcome result_event_uncertain) and check the downstream consumer; "
            "re-publish a missing one by hand or retry its row.",
        )

    # ------------------------------------------- Message Batches delivery (issue 19)
    @staticmethod
    def _with_delivery_timeout(props: _StepProps) -> _StepProps:
        """Under batch delivery the function runs at least ``BATCH_MIN_TIMEOUT``."""
        import dataclasses

        timeout = props.delivery.function_timeout(props.timeout)
        return props if timeout is props.timeout else dataclasses.replace(props, timeout=timeout)

    def _batch_delivery(self, props: _StepProps) -> None:
        """The schedule tick, the batch grant and the open-batch alarm (batch only)."""
        #: The delivery (``ModelDelivery.realtime()`` unless given).
        self.delivery = props.delivery
        #: Under batch delivery, the ``rate(1 minute)`` rule that ticks the function; else
        #: ``None``.
        self.batch_tick_rule: events.Rule | None = None
        if not props.delivery.is_batch:
            return
        consumer: lambda_.IFunction = self.alias or self.function
        self.batch_tick_rule = events.Rule(
            self,
            "BatchTickRule",
            description="Ticks the model step: submit, reconcile and collect Message Batches",
            schedule=events.Schedule.rate(Duration.minutes(1)),
            targets=[
                targets.LambdaFunction(
                    consumer,
                    event=events.RuleTargetInput.from_object({"model_step_batch": "tick"}),
                    # A missed tick is the next minute's; no retries pile up behind it.
                    retry_attempts=0,
                )
            ],
        )
        # The staged rows of a submission are read 100 at a time (batch_store.rows); a row
        # staged by a killed invocation is adopted in a transaction (batch_store.adopt_orphan:
        # a ConditionCheck on the missing submission beside the row's UpdateItem).
        self.grant_own_records(
            self.function, "dynamodb:BatchGetItem", "dynamodb:ConditionCheckItem"
        )
        alarm = threshold_alarm(
            self,
            "OldestOpenBatchAlarm",
            self.metric_oldest_open_batch_age(),
            BATCH_AGE_ALARM_SECONDS,
            "A Message Batch (or an uncertain create) of the model step has been open for "
            f"{BATCH_AGE_ALARM_SECONDS} s or more: the API ends every batch within 24 h, so "
            "the schedule tick is not collecting it. Check the BatchTickRule and the "
            "function's errors; the rows wait in the idempotency table.",
        )
        lost = threshold_alarm(
            self,
            "BatchLostAlarm",
            self.metric_batches_lost(),
            1,
            "A Message Batch of the model step was lost: the API did not know it for 6 h, or "
            "it was not collected 36 h after its creation. Its rows went back within their "
            "budget or were dead-lettered BatchLost; its billed answers are still stored if "
            "it comes back. Check who deletes batches or moved the API key's Workspace.",
        )
        for raised in (alarm, lost):
            if props.alarm_topic is not None:
                raised.add_alarm_action(cloudwatch_actions.SnsAction(props.alarm_topic))
            self.alarms.append(raised)

    def metric_batches_lost(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Message Batches the step declared lost (count, Sum, 5 minutes), emitted by every
        schedule tick (batch delivery only)."""
        return self._runtime_metric("BatchesLost", period)

    def metric_open_batches(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Batches open at a schedule tick: created and not yet collected, or an uncertain or
        refused create (count, Maximum, 5 minutes; batch delivery only)."""
        return self._runtime_metric("OpenBatches", period, "Maximum")

    def metric_oldest_open_batch_age(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Age of the step's oldest open Message Batch or uncertain create (seconds,
        Maximum, 5 minutes), emitted by every schedule tick (batch delivery only)."""
        return self._runtime_metric("OldestOpenBatchAgeSeconds", period, "Maximum")


#: Message Batches delivery (issue 19): the open-batch alarm's threshold, the API's 24 h.
BATCH_AGE_ALARM_SECONDS = 24 * 3600

#: ``events.EventPattern`` attribute -> event field, as CloudFormation spells it.
_PATTERN_FIELDS = {
    "version": "version",
    "id": "id",
    "detail_type": "detail-type",
    "source": "source",
    "account": "account",
    "time": "time",
    "region": "region",
    "resources": "resources",
    "detail": "detail",
}


def _is_event_bus(bus: object) -> bool:
    """True for any ``events.IEventBus`` (an ``EventBus`` or an imported one)."""
    return hasattr(bus, "event_bus_arn") and hasattr(bus, "event_bus_name")


def _render_pattern(pattern: events.EventPattern) -> dict[str, Any]:
    """The JSON a classic rule would carry for ``pattern``, for a v2 DATA filter."""
    return {
        field: getattr(pattern, attribute)
        for attribute, field in _PATTERN_FIELDS.items()
        if getattr(pattern, attribute) is not None
    }


__all__ = [
    "ALARMS_WITHOUT_ACTION_WARNING",
    "RESULT_COMPLETED",
    "RESULT_DEAD_LETTERED",
    "RESERVED_ENVIRONMENT",
    "RESERVED_ENVIRONMENT_PREFIXES",
    "IdempotentModelStep",
    "ModelProvider",
    "PromptCache",
]


def _grant_get_secret_value(role: iam.IRole, secret: secretsmanager.ISecret) -> None:
    """``secretsmanager:GetSecretValue`` on ``secret``, as ``grant_read`` would grant it but
    without ``DescribeSecret``, which the runtime never calls.

    A secret imported by name or partial ARN has no random suffix in ``secret_arn``, and
    real ARNs end in ``-XXXXXX``: ``-??????`` is appended, as ``grant_read`` does. A secret
    with a customer managed key also gets ``kms:Decrypt`` on it, through Secrets Manager
    only (``kms:ViaService``).
    """
    arn = secret.secret_full_arn or f"{secret.secret_arn}-??????"
    role.add_to_principal_policy(
        iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"], resources=[arn])
    )
    if secret.encryption_key is not None:
        # As grant_read does it: the key policy (or the role) allows Decrypt via Secrets
        # Manager only.
        region = Stack.of(role).region
        secret.encryption_key.grant_decrypt(
            kms.ViaServicePrincipal(f"secretsmanager.{region}.amazonaws.com", role)
        )
