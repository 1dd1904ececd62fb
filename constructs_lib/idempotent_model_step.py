"""IdempotentModelStep: an EventBridge rule that calls a model once per business key."""

from __future__ import annotations

import enum
from collections.abc import Mapping

import jmespath
import jmespath.exceptions
from aws_cdk import Acknowledgment, Duration, Stack, Token, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from . import defaults
from ._validation import (
    PropValidationError,
    check_duration_range,
    check_int_range,
    check_non_empty,
)
from .alarms import events_rule_metric, occurrence_alarm
from .model_step_handler import ModelStepHandler
from .python_function import python_function

#: Environment names the runtime reads; a user's ``environment`` may not override them.
RESERVED_ENVIRONMENT = frozenset(
    {
        "IDEMPOTENCY_TABLE_NAME",
        "DEAD_LETTER_QUEUE_URL",
        "IDEMPOTENCY_KEY",
        "IDEMPOTENCY_EXPIRES_AFTER_SECONDS",
        "PROMPT_VERSION",
        "SYSTEM_PROMPT",
        "MODEL_ID",
        "MAX_TOKENS",
        "MODEL_PROVIDER",
        "MODEL_TIMEOUT_SECONDS",
        "ALLOWED_LABELS",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_API_KEY_SECRET_ARN",
        "POWERTOOLS_SERVICE_NAME",
        "POWERTOOLS_METRICS_NAMESPACE",
    }
)

#: Lambda caps all environment variables of a function at 4 KB together; the
#: step's own settings (names, ARNs, URL) take roughly the other kilobyte.
SYSTEM_PROMPT_MAX_BYTES = 3072

METRICS_NAMESPACE = "IdempotentModelStep"


class ModelProvider(enum.Enum):
    """Where the model runs."""

    #: The Anthropic API; the key is read from ``api_key_secret`` at run time.
    ANTHROPIC = "anthropic"
    #: Claude on Amazon Bedrock; IAM grants ``bedrock:InvokeModel`` on the model, no secret.
    BEDROCK = "bedrock"


class IdempotentModelStep(Construct):
    """An EventBridge rule -> Lambda that calls a model at most once per business key.

    What it creates, each a public attribute:

    - ``rule``: matches ``event_pattern`` on ``event_bus`` and targets the function,
      with a RetryPolicy (``event_retry_attempts``, ``max_event_age``) and a
      DeadLetterConfig to ``dead_letter_queue``;
    - ``function``: Python 3.13, the runtime in ``lambda_src/model_step``, its own
      log group, an EventInvokeConfig with ``lambda_retry_attempts`` and an
      on-failure destination on the same ``dead_letter_queue``;
    - ``table``: the Powertools idempotency table (``id`` / TTL ``expiration``);
    - ``dead_letter_queue``: a standard, encrypted, TLS-only queue;
    - ``alarms``: EventBridge InvocationsSentToDlq and InvocationsFailedToBeSentToDlq,
      and any message arriving on the DLQ; each notifies ``alarm_topic`` if given.

    Example::

        IdempotentModelStep(
            self, "Classify",
            event_pattern=events.EventPattern(detail_type=["Prospect Row Validated"]),
            idempotency_key="[upload_id, row_number]",
            prompt_version="2026-11-01",
            system_prompt="Answer hot, warm or cold.",
            api_key_secret=secret,
        )

    Retry arithmetic: the SDK makes one request per attempt (``max_retries=0``) and
    Lambda makes ``lambda_retry_attempts + 1`` attempts, so a delivery costs at most
    ``max_model_requests_per_delivery`` model requests (3 by default), and a
    duplicate delivery costs none.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        event_pattern: events.EventPattern,
        idempotency_key: str,
        prompt_version: str,
        system_prompt: str,
        api_key_secret: secretsmanager.ISecret | None = None,
        model_provider: ModelProvider = ModelProvider.ANTHROPIC,
        event_bus: events.IEventBus | None = None,
        model_id: str = defaults.DEFAULT_MODEL_ID,
        max_tokens: int = defaults.DEFAULT_MAX_TOKENS,
        allowed_labels: list[str] | None = None,
        table: dynamodb.ITable | None = None,
        dead_letter_queue: sqs.IQueue | None = None,
        alarm_topic: sns.ITopic | None = None,
        lambda_retry_attempts: int = defaults.DEFAULT_LAMBDA_RETRY_ATTEMPTS,
        event_retry_attempts: int = defaults.DEFAULT_EVENT_RETRY_ATTEMPTS,
        max_event_age: Duration = defaults.DEFAULT_MAX_EVENT_AGE,
        expires_after: Duration = defaults.DEFAULT_EXPIRES_AFTER,
        timeout: Duration = defaults.DEFAULT_TIMEOUT,
        memory_size: int = defaults.DEFAULT_MEMORY_SIZE,
        architecture: lambda_.Architecture = lambda_.Architecture.X86_64,
        log_retention: logs.RetentionDays = defaults.DEFAULT_LOG_RETENTION,
        handler: ModelStepHandler | None = None,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        """
        :param event_pattern: which events on ``event_bus`` the step handles. Required.
        :param idempotency_key: a JMESPath over the event's ``detail`` giving the
            business key, e.g. ``"[upload_id, row_number]"``. Never the event id:
            a redelivered or re-published event gets a new id. Required.
        :param prompt_version: joins the key, so a changed prompt gets a new answer. Required.
        :param system_prompt: the system prompt, at most 3,072 bytes (it travels in
            the function's environment). Required.
        :param api_key_secret: the Secrets Manager secret holding the Anthropic API
            key (the raw key, or JSON ``{"api_key": ...}``). Required with
            ``ModelProvider.ANTHROPIC``; refused with ``ModelProvider.BEDROCK``.
        :param model_provider: default ``ModelProvider.ANTHROPIC``.
        :param event_bus: default: the account's default bus.
        :param model_id: default ``"claude-haiku-5-5"``.
        :param max_tokens: 1-128,000, default 1,024.
        :param allowed_labels: if given, an answer must be one of these (case-insensitive)
            or the event is dead-lettered. Default: any answer.
        :param table: an idempotency table to share across steps (partition key ``id``,
            TTL ``expiration``). Default: a new one.
        :param dead_letter_queue: a STANDARD queue; FIFO is refused. Default: a new one.
        :param alarm_topic: every alarm notifies it. Default: alarms without actions.
        :param lambda_retry_attempts: Lambda async retries of a failed attempt, 0-2, default 2.
        :param event_retry_attempts: EventBridge delivery retries, 0-185, default 185.
        :param max_event_age: how long EventBridge keeps retrying delivery, 1 minute
            to 24 hours, default 24 hours. Lambda's async queue uses the smaller of
            this and 6 hours.
        :param expires_after: idempotency record lifetime, at least ``max_event_age``
            (a redelivery after expiry would call the model again), at most 30 days,
            default 24 hours.
        :param timeout: function timeout, 10 seconds to 15 minutes, default 90 seconds.
            The SDK's timeout is kept below the remaining time.
        :param memory_size: 128-10,240 MB, default 512.
        :param architecture: default ``X86_64``; wheels are bundled for it.
        :param log_retention: default one month.
        :param handler: default ``ModelStepHandler.default()``.
        :param environment: extra variables for a custom handler; the runtime's own
            names (see ``RESERVED_ENVIRONMENT``) are refused. Default: none.
        """
        super().__init__(scope, id)
        owner = f"IdempotentModelStep '{self.node.path}'"
        self._validate(
            owner,
            idempotency_key=idempotency_key,
            prompt_version=prompt_version,
            system_prompt=system_prompt,
            model_id=model_id,
            max_tokens=max_tokens,
            lambda_retry_attempts=lambda_retry_attempts,
            event_retry_attempts=event_retry_attempts,
            max_event_age=max_event_age,
            expires_after=expires_after,
            timeout=timeout,
            memory_size=memory_size,
        )
        if model_provider is ModelProvider.ANTHROPIC and api_key_secret is None:
            raise PropValidationError(
                f"{owner}: api_key_secret is required with ModelProvider.ANTHROPIC "
                "(or pass model_provider=ModelProvider.BEDROCK)"
            )
        if model_provider is ModelProvider.BEDROCK and api_key_secret is not None:
            raise PropValidationError(
                f"{owner}: api_key_secret must not be set with ModelProvider.BEDROCK, "
                "which authenticates with the function's IAM role"
            )
        if (
            model_provider is ModelProvider.BEDROCK
            and not Token.is_unresolved(model_id)
            and not model_id.startswith("anthropic.")
        ):
            raise PropValidationError(
                f"{owner}: model_id must be a Bedrock foundation-model id starting with "
                f"'anthropic.' with ModelProvider.BEDROCK (cross-region inference profiles "
                f"are not supported yet), got {model_id!r}"
            )
        if dead_letter_queue is not None and dead_letter_queue.fifo:
            raise PropValidationError(
                f"{owner}: dead_letter_queue must be a standard SQS queue, got the FIFO "
                f"queue {dead_letter_queue.node.path!r}. EventBridge dead-letter queues and "
                "Lambda on-failure destinations do not accept FIFO queues."
            )
        reserved = sorted(RESERVED_ENVIRONMENT & set(environment or {}))
        if reserved:
            raise PropValidationError(
                f"{owner}: environment may not set {', '.join(reserved)}; the step "
                "sets these from its own props"
            )
        if allowed_labels is not None:
            bad = [label for label in allowed_labels if not label.strip() or "," in label]
            if not allowed_labels or bad:
                raise PropValidationError(
                    f"{owner}: allowed_labels must be non-empty strings without commas, "
                    f"got {allowed_labels!r}"
                )

        handler = handler or ModelStepHandler.default()
        self.lambda_retry_attempts = lambda_retry_attempts
        self.event_retry_attempts = event_retry_attempts
        self.model_provider = model_provider
        self.event_bus = event_bus
        #: Model requests one delivery can cost: SDK attempts (1) x Lambda attempts.
        self.max_model_requests_per_delivery = defaults.SDK_ATTEMPTS_PER_INVOCATION * (
            lambda_retry_attempts + 1
        )

        self.table: dynamodb.ITable = table or dynamodb.Table(
            self, "IdempotencyTable", **defaults.idempotency_table_props()
        )
        self.dead_letter_queue: sqs.IQueue = dead_letter_queue or sqs.Queue(
            self, "DeadLetterQueue", **defaults.dead_letter_queue_props()
        )

        self.function = python_function(
            self,
            "Function",
            packages=handler.packages,
            handler=handler.handler,
            requirements=handler.requirements,
            architecture=architecture,
            timeout=timeout,
            memory_size=memory_size,
            log_retention=log_retention,
            description="Idempotent model step: one model request per business key",
            environment={
                "IDEMPOTENCY_TABLE_NAME": self.table.table_name,
                "DEAD_LETTER_QUEUE_URL": self.dead_letter_queue.queue_url,
                "IDEMPOTENCY_KEY": idempotency_key,
                "IDEMPOTENCY_EXPIRES_AFTER_SECONDS": str(int(expires_after.to_seconds())),
                "PROMPT_VERSION": prompt_version,
                "SYSTEM_PROMPT": system_prompt,
                "MODEL_ID": model_id,
                "MAX_TOKENS": str(max_tokens),
                "MODEL_PROVIDER": model_provider.value,
                "MODEL_TIMEOUT_SECONDS": str(
                    int(timeout.to_seconds() - defaults.MODEL_TIMEOUT_MARGIN.to_seconds())
                ),
                "POWERTOOLS_SERVICE_NAME": self.node.path,
                "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
                **({"ALLOWED_LABELS": ",".join(allowed_labels)} if allowed_labels else {}),
                **(
                    {"ANTHROPIC_API_KEY_SECRET_ARN": api_key_secret.secret_arn}
                    if api_key_secret is not None
                    else {}
                ),
                **dict(environment or {}),
            },
        )
        self._grant_runtime_permissions(self.function.role, api_key_secret, model_id)

        self.function.configure_async_invoke(
            retry_attempts=lambda_retry_attempts,
            max_event_age=_shorter(max_event_age, defaults.LAMBDA_ASYNC_MAX_EVENT_AGE),
            # Function errors never reach the rule's DLQ (EventBridge only sees the
            # hand-off), so exhausted Lambda retries would be lost without this.
            on_failure=destinations.SqsDestination(self.dead_letter_queue),
        )

        self.rule = events.Rule(
            self,
            "Rule",
            event_bus=event_bus,
            event_pattern=event_pattern,
            description=f"Routes events to the idempotent model step {self.node.path}",
        )
        self.rule.add_target(
            targets.LambdaFunction(
                self.function,
                dead_letter_queue=self.dead_letter_queue,
                retry_attempts=event_retry_attempts,
                max_event_age=max_event_age,
            )
        )

        self.alarms: list[cloudwatch.Alarm] = self._create_alarms()
        if alarm_topic is not None:
            for alarm in self.alarms:
                alarm.add_alarm_action(cloudwatch_actions.SnsAction(alarm_topic))
        if dead_letter_queue is None:
            Validations.of(self.dead_letter_queue).acknowledge(
                Acknowledgment(
                    id="AwsSolutions-SQS3",
                    reason="This queue is itself the dead-letter queue of the step's rule "
                    "target and of the function's on-failure destination; a DLQ of a DLQ "
                    "would only move the same messages one hop further.",
                )
            )

    # ------------------------------------------------------------------ checks
    @staticmethod
    def _validate(
        owner: str,
        *,
        idempotency_key: str,
        prompt_version: str,
        system_prompt: str,
        model_id: str,
        max_tokens: int,
        lambda_retry_attempts: int,
        event_retry_attempts: int,
        max_event_age: Duration,
        expires_after: Duration,
        timeout: Duration,
        memory_size: int,
    ) -> None:
        check_non_empty(owner, "idempotency_key", idempotency_key)
        check_non_empty(owner, "prompt_version", prompt_version)
        check_non_empty(owner, "system_prompt", system_prompt)
        check_non_empty(owner, "model_id", model_id)
        try:
            jmespath.compile(idempotency_key)
        except jmespath.exceptions.JMESPathError as error:
            raise PropValidationError(
                f"{owner}: idempotency_key must be a JMESPath expression over the event's "
                f"detail, e.g. '[upload_id, row_number]'; got {idempotency_key!r} ({error})"
            ) from error
        if "detail." in idempotency_key:
            raise PropValidationError(
                f"{owner}: idempotency_key is evaluated over the event's detail already; "
                f"write '[upload_id, row_number]', not 'detail.' paths; got "
                f"{idempotency_key!r}"
            )
        size = len(system_prompt.encode())
        if not Token.is_unresolved(system_prompt) and size > SYSTEM_PROMPT_MAX_BYTES:
            raise PropValidationError(
                f"{owner}: system_prompt must be at most {SYSTEM_PROMPT_MAX_BYTES} bytes "
                f"(Lambda allows 4 KB of environment variables in total), got {size} bytes"
            )
        check_int_range(owner, "max_tokens", max_tokens, 1, 128_000)
        check_int_range(owner, "lambda_retry_attempts", lambda_retry_attempts, 0, 2)
        check_int_range(owner, "event_retry_attempts", event_retry_attempts, 0, 185)
        check_int_range(owner, "memory_size", memory_size, 128, 10_240)
        check_duration_range(
            owner, "max_event_age", max_event_age, Duration.minutes(1), Duration.hours(24)
        )
        check_duration_range(owner, "timeout", timeout, Duration.seconds(10), Duration.minutes(15))
        check_duration_range(
            owner, "expires_after", expires_after, Duration.minutes(1), Duration.days(30)
        )
        if (
            not expires_after.is_unresolved()
            and not max_event_age.is_unresolved()
            and expires_after.to_seconds() < max_event_age.to_seconds()
        ):
            raise PropValidationError(
                f"{owner}: expires_after must be at least max_event_age "
                f"({max_event_age.to_human_string()}), got {expires_after.to_human_string()}: "
                "a retry delivered after the record expired would call the model again"
            )

    # -------------------------------------------------------------- permissions
    def _grant_runtime_permissions(
        self,
        role: iam.IRole,
        api_key_secret: secretsmanager.ISecret | None,
        model_id: str,
    ) -> None:
        # Exactly the four calls Powertools' DynamoDB persistence layer makes.
        self.table.grant(
            role,
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:DeleteItem",
        )
        # The handler dead-letters non-retryable failures itself. This is the same
        # grant (KMS included) the on-failure destination makes, so CDK keeps one.
        self.dead_letter_queue.grant_send_messages(role)
        if api_key_secret is not None:
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["secretsmanager:GetSecretValue"],
                    resources=[api_key_secret.secret_full_arn or api_key_secret.secret_arn],
                )
            )
            if api_key_secret.encryption_key is not None:
                api_key_secret.encryption_key.grant_decrypt(role)
        if self.model_provider is ModelProvider.BEDROCK:
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["bedrock:InvokeModel"],
                    resources=[
                        Stack.of(self).format_arn(
                            service="bedrock",
                            account="",
                            resource="foundation-model",
                            resource_name=model_id,
                        )
                    ],
                )
            )

    # ------------------------------------------------------------------ metrics
    def metric_invocations_sent_to_dlq(self, period: Duration | None = None) -> cloudwatch.Metric:
        """EventBridge deliveries that gave up and went to the DLQ (Sum, default 1 minute)."""
        return events_rule_metric(self.rule, "InvocationsSentToDlq", self.event_bus, period)

    def metric_invocations_failed_to_be_sent_to_dlq(
        self, period: Duration | None = None
    ) -> cloudwatch.Metric:
        """EventBridge deliveries that could not even reach the DLQ: lost events."""
        return events_rule_metric(
            self.rule, "InvocationsFailedToBeSentToDlq", self.event_bus, period
        )

    def metric_dead_letter_messages(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Messages arriving on the DLQ from any path (SQS NumberOfMessagesSent, Sum)."""
        return self.dead_letter_queue.metric_number_of_messages_sent(
            period=period or Duration.minutes(1), statistic="Sum"
        )

    def metric_model_requests(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Model requests the handler made (Powertools EMF metric ``ModelRequests``)."""
        return self._runtime_metric("ModelRequests", period)

    def metric_duplicates_suppressed(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Deliveries answered from the idempotency table without a model request."""
        return self._runtime_metric("DuplicatesSuppressed", period)

    def _runtime_metric(self, name: str, period: Duration | None) -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace=METRICS_NAMESPACE,
            metric_name=name,
            dimensions_map={"service": self.node.path},
            statistic="Sum",
            period=period or Duration.minutes(5),
        )

    def _create_alarms(self) -> list[cloudwatch.Alarm]:
        specs = [
            (
                "SentToDlqAlarm",
                self.metric_invocations_sent_to_dlq(),
                "EventBridge gave up delivering events to the model step; they are in its DLQ.",
            ),
            (
                "FailedToBeSentToDlqAlarm",
                self.metric_invocations_failed_to_be_sent_to_dlq(),
                "EventBridge could not deliver events to the model step NOR to its DLQ; "
                "those events are lost. Check the DLQ policy and encryption.",
            ),
            (
                "DeadLetterMessagesAlarm",
                self.metric_dead_letter_messages(),
                "A message arrived on the model step's DLQ (non-retryable model error, "
                "exhausted Lambda retries, or failed delivery).",
            ),
        ]
        return [
            occurrence_alarm(self, alarm_id, metric, description)
            for alarm_id, metric, description in specs
        ]


def _shorter(a: Duration, b: Duration) -> Duration:
    if a.is_unresolved():
        return b
    return a if a.to_seconds() <= b.to_seconds() else b


__all__ = ["RESERVED_ENVIRONMENT", "IdempotentModelStep", "ModelProvider"]
