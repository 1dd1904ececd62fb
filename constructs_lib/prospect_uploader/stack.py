"""ProspectUploaderStack: the reference pipeline, built from the library's public constructs.

One upload, by resource:

S3 ``UploadBucket`` --Object Created *.csv--> default bus ``SplitterRule`` -->
``Splitter`` (validates every row) --"Prospect Row Validated"--> ``RowBus`` (EventBridge
v2, publish-side dedup; ``ProspectBus`` with ``-c event_bus=classic``) -->
``Classify`` (IdempotentModelStep, hot/warm/cold) --> ``ProspectsTable``.
Upload-level events ("Prospect Upload Summarized", "Prospect Upload Completed") and
their alert rules stay on the classic ``ProspectBus``: SNS targets need classic rules.
Invalid rows go to ``FailuresTable``; model failures land on ``FailureQueue`` and
``FailureRecorder`` normalises them into ``FailuresTable``. Every row's outcome is
counted once in ``UploadsTable`` (the ``upload_accounting`` ledger, bundled into the
splitter, the classifier, the recorder and ``UploadSweeper``); when the last valid row
is accounted for, one "Prospect Upload Completed" event is published, and
``UploadCompletedAlertRule`` mails it when anything was invalid, failed or missing.
``UploadAlertRule`` mails rejected uploads. ``Viewer`` shows uploads and
failures behind an IAM-authenticated Function URL.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import jsii
from aws_cdk import (
    Acknowledgment,
    Annotations,
    ArnFormat,
    CfnOutput,
    Duration,
    Stack,
    Validations,
)
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from aws_cdk.interfaces import aws_events as events_refs
from constructs import Construct

# The pipeline's names, from the package bundled beside its functions (stdlib only).
from lambda_src.prospect_contract import metrics as upload_metrics
from lambda_src.prospect_contract.events import (
    AUTO,
    BATCH,
    DEFAULT_BATCH_MIN_ROWS,
    EVENT_SOURCE,
    REALTIME,
    ROW_DELIVERY_FIELD,
    ROW_VALIDATED,
    UPLOAD_COMPLETED,
    UPLOAD_SUMMARIZED,
)
from lambda_src.prospect_contract.settings import SPLIT_RECORD_PREFIX

from .. import defaults
from .. import point_in_time_recovery as pitr
from .._paths import lambda_src_root
from .._runtime_modules import model_catalogue
from .._validation import PropValidationError, check_int_range
from ..alarms import events_rule_metric, occurrence_alarm
from ..checkov_acknowledgments import PROSPECT_UPLOADER, acknowledge_checkov_findings
from ..event_bus_v2 import EventBusV2
from ..idempotent_model_step import IdempotentModelStep, ModelProvider, PromptCache
from ..model_delivery import ModelDelivery
from ..model_fit import Thinking
from ..model_prices import ModelPrice, price_for, price_key, price_table
from ..model_step_dashboard import ModelStepDashboard
from ..model_step_handler import ModelStepHandler
from ..python_function import python_function
from ..queue_grants import SendOnlyQueueDestination, consume
from ..record_prefix_grants import grant_record_prefix

LABELS = ["hot", "warm", "cold"]
PROMPT_VERSION = "prospect-classifier-2026-12-01"
#: The classifier's system prompt: a rubric with worked examples, longer than the default
#: model's minimum cacheable length, so every row after an upload's first reads it from
#: the prompt cache. Kept beside the classifier; read at synth.
SYSTEM_PROMPT_FILE = lambda_src_root() / "prospect_classifier" / "system_prompt.md"
#: The classify step's prompt cache: rows of one upload arrive seconds apart.
PROMPT_CACHE = PromptCache.FIVE_MINUTES
#: The classifier answers one word: no thinking (the default model, Claude Haiku 5.5, would
#: think by default, and its thinking tokens would use up ``CLASSIFY_MAX_TOKENS``), and a
#: ``max_tokens`` that holds the longest label with room to spare.
CLASSIFY_THINKING = Thinking.DISABLED
CLASSIFY_MAX_TOKENS = 16
DEFAULT_MAX_UPLOAD_BYTES = 50 * 1024 * 1024

#: Context keys the stack reads, with (default, lowest, highest) for the integer ones.
CONTEXT_INTS: dict[str, tuple[int, int, int]] = {
    "max_rows": (100_000, 1, 10_000_000),
    "failure_retention_days": (90, 1, 3650),
    "upload_retention_days": (30, 1, 3650),
    "noncurrent_version_retention_days": (30, 1, 3650),
    "access_log_retention_days": (90, 1, 3650),
    # Message Batches delivery (issue 19): the fewest valid rows an upload goes by batch
    # with under ``-c delivery=auto``.
    "batch_min_rows": (DEFAULT_BATCH_MIN_ROWS, 1, 10_000_000),
}
#: Values of the ``delivery`` context key (issue 19); the first is the default.
DELIVERY_CHOICES = (AUTO, REALTIME, BATCH)
#: The batch step's delivery: Message Batches of at most 10,000 rows, sent at the latest 5
#: minutes after their first row waited (the issue's figures; 10 batches for 100,000 rows).
BATCH_DELIVERY_MAX_WAIT = Duration.minutes(5)
BATCH_DELIVERY_MAX_REQUESTS = 10_000
#: Values of the ``event_bus`` context key; the first is the default.
EVENT_BUS_KINDS = ("v2", "classic")
#: Values of the ``model_provider`` context key; the first is the default (issue 22).
MODEL_PROVIDERS = ("anthropic", "bedrock")
#: The classify model on Bedrock: the default model through the US inference profile, as the
#: model catalogue has its Bedrock id (``us.anthropic.claude-haiku-5-5``: no ``-v1:0``).
DEFAULT_BEDROCK_MODEL_ID = (
    f"us.{model_catalogue.CATALOGUE[defaults.DEFAULT_MODEL_ID].bedrock_model_id}"
)
#: The only attributes the viewer may change on a failure item (``dynamodb:Attributes``):
#: its retry stamp and count, and the replay generation it publishes under; exactly what
#: ``prospect_viewer.store`` writes. The item's key attributes are named in the request too.
VIEWER_UPDATABLE_ATTRIBUTES = ("retried_at", "retry_count", "replay_generation")
#: Rows wait for the classify step up to its max event age (the construct's default,
#: 24 h); an hour more covers the DLQ hand-off and the failure recorder.
UPLOAD_DEADLINE = defaults.DEFAULT_MAX_EVENT_AGE.plus(Duration.hours(1))
#: The splitter's async max event age (6 h) plus its 15-minute timeout, rounded up.
UPLOAD_SPLIT_DEADLINE = Duration.hours(7)
SWEEP_INTERVAL = Duration.minutes(15)
#: The ledger's calls per function (upload_accounting.ledger), as (UploadsTable actions,
#: UploadRowsTable actions): the splitter opens and closes the split (PutItem, then
#: UpdateItem, GetItem on completion); classify accounts rows (a marker Put, or GetItem +
#: Update of a known marker when an operator's retry of a failed row succeeds, in a
#: transaction with the upload's Update); the recorder accounts failed rows only (a marker
#: Put, or a GetItem of a known marker: it never moves a marker, so no Update of one); the
#: sweeper reads and closes uploads. Nothing else, so every grant has a path that uses it.
LEDGER_SPLIT = (("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"), ())
LEDGER_ROWS = (
    ("dynamodb:GetItem", "dynamodb:UpdateItem"),
    ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"),
)
LEDGER_FAILED_ROWS = (
    ("dynamodb:GetItem", "dynamodb:UpdateItem"),
    ("dynamodb:GetItem", "dynamodb:PutItem"),
)
LEDGER_SWEEP = (("dynamodb:GetItem", "dynamodb:UpdateItem"), ())
#: Days RowBus keeps events for replay: the minimum, as nothing replays rows from it.
ROW_BUS_RETENTION_DAYS = 1
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")


def _src(package: str) -> Path:
    """A runtime package directory of the library's ``lambda_src``."""
    return lambda_src_root() / package


@jsii.implements(events.IRuleTarget)
class AlertTopicTarget:
    """An SNS rule target whose publish grant names the rule.

    ``targets.SnsTopic`` lets ``events.amazonaws.com`` publish with no condition, so any
    rule in any account that learns the topic ARN could mail the operators. This target
    allows only the rule it is bound to (``aws:SourceArn``), and dead-letters to ``queue``
    under the same condition.
    """

    def __init__(
        self, topic: sns.ITopic, message: events.RuleTargetInput, dead_letter_queue: sqs.IQueue
    ) -> None:
        self.topic = topic
        self.message = message
        self.dead_letter_queue = dead_letter_queue

    def bind(self, rule: events_refs.IRuleRef, id: str | None = None) -> events.RuleTargetConfig:
        source = {"ArnEquals": {"aws:SourceArn": rule.rule_ref.rule_arn}}
        events_principal = iam.ServicePrincipal("events.amazonaws.com")
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                actions=["sns:Publish"],
                principals=[events_principal],
                resources=[self.topic.topic_arn],
                conditions=source,
            )
        )
        self.dead_letter_queue.add_to_resource_policy(
            iam.PolicyStatement(
                sid=f"AllowEventRule{cast(Construct, rule).node.addr}",
                actions=["sqs:SendMessage"],
                principals=[events_principal],
                resources=[self.dead_letter_queue.queue_arn],
                conditions=source,
            )
        )
        return events.RuleTargetConfig(
            arn=self.topic.topic_arn,
            input=self.message,
            dead_letter_config=events.CfnRule.DeadLetterConfigProperty(
                arn=self.dead_letter_queue.queue_arn
            ),
            retry_policy=events.CfnRule.RetryPolicyProperty(
                maximum_retry_attempts=defaults.DEFAULT_EVENT_RETRY_ATTEMPTS,
                maximum_event_age_in_seconds=int(defaults.DEFAULT_MAX_EVENT_AGE.to_seconds()),
            ),
        )


class ProspectUploaderStack(Stack):
    """CSV prospects in, validated rows, hot/warm/cold labels, email alerts, a viewer.

    Context read (``cdk synth -c key=value``):

    - ``alert_email``: address subscribed to the alert topic. Default: no
      subscription (the stack says so in a warning and an output).
    - ``anthropic_api_key_secret_arn``: an existing secret holding the API key.
      Default: the stack creates ``AnthropicApiKey``; put the key in it after deploy.
    - ``max_rows``: uploads with more data rows are rejected before any row is
      published, 1 to 10,000,000, default 100,000.
    - ``failure_retention_days``: TTL of FailuresTable items, ProspectsTable items,
      UploadsTable items and row markers, 1 to 3650, default 90.
    - ``upload_retention_days``: UploadBucket expires an uploaded CSV (its current
      version) this many days after upload, 1 to 3650, default 30. The expired version
      is then kept ``noncurrent_version_retention_days`` more before S3 deletes it.
      RowsTable's items (each row's values, written by the splitter) expire as many days
      after the split.
    - ``noncurrent_version_retention_days``: UploadBucket deletes overwritten or
      deleted versions after this many days, 1 to 3650, default 30.
    - ``access_log_retention_days``: AccessLogsBucket deletes logs after this many
      days, 1 to 3650, default 90.
    - ``viewer_principals``: comma-separated IAM role ARNs granted
      ``lambda:InvokeFunctionUrl`` on the viewer. Default: none (only identities whose
      own IAM policy allows it).
    - ``model_prices``: JSON overriding the model catalogue's prices per model id (see
      ``constructs_lib.model_prices``), e.g.
      ``-c model_prices='{"claude-haiku-5-5": {"input": 0.12, "output": 0.6}}'``; laid
      over the ``model_prices`` prop. Default: none, the catalogue's prices.
    - ``event_bus``: ``v2`` (default) or ``classic``. ``v2``: validated rows travel on
      ``RowBus``, an EventBridge v2 bus, each with a publish-side ``DeduplicationId``,
      and ``Classify`` subscribes to it; upload summaries and completion events stay on
      the classic ``ProspectBus`` with their alert rules. ``classic``: everything rides
      ``ProspectBus`` and ``Classify`` is a classic rule (the template before v2).
    - ``model_provider``: ``anthropic`` (default: the Claude API, with the
      ``AnthropicApiKey`` secret) or ``bedrock`` (Claude on Amazon Bedrock through the
      function's IAM role, no secret; ``prospect-uploader run --provider bedrock`` runs it
      locally).
    - ``bedrock_model_id``: with ``model_provider=bedrock``, the Bedrock model or
      inference-profile id; its price is the model catalogue's row of the model it names.
      Default: ``us.anthropic.claude-haiku-5-5``.
    - ``delivery`` (issue 19): ``auto`` (default), ``realtime`` or ``batch``. ``realtime``:
      every row goes to ``Classify``, one Messages request each (the template before
      batches). ``batch``: every upload's rows go to ``ClassifyBatch``, an
      ``IdempotentModelStep`` with ``ModelDelivery.batch(max_wait=5 minutes,
      max_requests=10,000)`` (Message Batches, half price, answered within 24 h). ``auto``:
      an upload with at least ``batch_min_rows`` valid rows goes by batch, a smaller one
      realtime. The splitter decides per upload (it counts valid rows in its first pass) and
      marks batch rows ``"delivery": "batch"``; ``Classify`` takes only unmarked rows.
      With ``model_provider=bedrock`` (issue 37), ``ClassifyBatch`` sends Bedrock batch
      inference jobs (half the on-demand price) the same way, and ``auto`` picks them for an
      upload of ``batch_min_rows`` or more (above Bedrock's minimum of 100 records a job).
    - ``batch_min_rows``: the fewest valid rows an upload goes by batch with under
      ``auto``, 1 to 10,000,000, default 2,000.
    - ``point_in_time_recovery`` (issue 34): continuous backups of ``IdempotencyTable`` and
      the five data tables, ``on`` (35 days), ``off`` (or ``0``) or a number of days from 1
      to 35. A deleted or expired item (row values, answers) stays restorable that long.
      Default 35.
    - ``mail_file_names`` (issue 34): ``true`` puts the upload's object key (its file name,
      which may be a person's name) in the summary mails; ``false`` (default) names the
      upload by its id and bucket only.

    :param max_upload_bytes: larger uploads are rejected whole with a recorded
        reason, 1 byte to 1 GiB, default 50 MiB.
    :param lambda_retry_attempts: the classify step's Lambda retries, default 2.
    :param model_prices: overrides of the catalogue's prices per model id, a ``ModelPrice``
        or a mapping of the fields that changed (``constructs_lib.model_prices.price_table``).
        The classify model's row (the model ``bedrock_model_id`` names, on Bedrock) prices
        each classify request (``MODEL_RATES``; its cost is stored with the row, so a later
        override never reprices an upload) and becomes ``MODEL_PRICE`` of the functions that
        report an upload's savings; a model without a row reports tokens and
        ``cost_usd: null``. Default: none, the catalogue's prices.
    :param kwargs: the ``Stack`` props (``env``, ``description``, ...), passed on as they are.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
        lambda_retry_attempts: int = defaults.DEFAULT_LAMBDA_RETRY_ATTEMPTS,
        model_prices: Mapping[str, Mapping[str, Any] | ModelPrice | None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, id, **kwargs)
        acknowledge_checkov_findings(self, PROSPECT_UPLOADER)
        # Grant log delivery through the bucket policy, not legacy ACLs (which
        # BUCKET_OWNER_ENFORCED disables). Set before any bucket is created.
        self.node.set_context("@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy", True)
        check_int_range("ProspectUploaderStack", "max_upload_bytes", max_upload_bytes, 1, 2**30)
        self.max_rows = self._context_int("max_rows")
        self.failure_retention_days = self._context_int("failure_retention_days")
        self.viewer_principals = self._context_role_arns("viewer_principals")
        self.event_bus_kind = self._context_choice("event_bus", EVENT_BUS_KINDS)
        # Bedrock (issue 22): where the classify step calls Claude.
        self.model_provider = self._context_choice("model_provider", MODEL_PROVIDERS)
        #: ``auto`` (default), ``realtime`` or ``batch``: how uploads' rows reach the model
        #: (issue 19), and ``batch_min_rows``, the fewest valid rows sent by batch under auto.
        self.delivery = self._context_choice("delivery", DELIVERY_CHOICES)
        self.batch_min_rows = self._context_int("batch_min_rows")
        backups = self.node.try_get_context("point_in_time_recovery")
        #: Issue 34: the tables' point-in-time recovery period in days (0: off), from the
        #: ``point_in_time_recovery`` context; default 35.
        self.recovery_period_days = (
            pitr.DEFAULT_PERIOD_DAYS
            if backups is None or (isinstance(backups, str) and not backups.strip())
            else pitr.period_from_context(
                "ProspectUploaderStack", "point_in_time_recovery", backups
            )
        )
        #: Issue 34: whether the summary mails name the uploaded file (``mail_file_names``
        #: context); default False, the upload id only.
        self.mail_file_names = self._context_flag("mail_file_names")
        #: The price table the stack reports costs with: the default, the prop, the context.
        self.model_prices = self._model_prices(model_prices)
        self._storage()
        self._alerts()
        self._splitter(max_upload_bytes)
        self._classify(lambda_retry_attempts)
        self._recorder()
        self._sweeper()
        self._viewer()
        self._upload_alerts()
        self._alarms()
        self._dashboard()

    # ------------------------------------------------------------------ parts
    def _storage(self) -> None:
        """The buckets, the tables, FailureQueue and the buses."""
        self._buckets()
        self._tables()
        self.failure_queue = sqs.Queue(self, "FailureQueue", **defaults.dead_letter_queue_props())
        Validations.of(self.failure_queue).acknowledge(
            Acknowledgment(
                id="AwsSolutions-SQS3",
                reason="This queue is the pipeline's dead-letter queue (rule targets and "
                "on-failure destinations); FailureRecorder drains it into FailuresTable and "
                "leaves unrecorded messages on it for 14 days.",
            )
        )
        # Upload-level events and their (classic, SNS-targeted) alert rules.
        self.bus = events.EventBus(self, "ProspectBus")
        #: The bus "Prospect Row Validated" travels on: the v2 ``RowBus`` (publish-side
        #: dedup) by default, ``ProspectBus`` itself with ``-c event_bus=classic``.
        self.row_bus: EventBusV2 | events.EventBus = (
            EventBusV2(
                self,
                "RowBus",
                description="Prospect Row Validated events, deduplicated on publish",
                # Rows are personal data, and nothing replays them from the bus (a failed
                # row is retried from FailuresTable): keep them the minimum, one day.
                retention_days=ROW_BUS_RETENTION_DAYS,
            )
            if self.event_bus_kind == "v2"
            else self.bus
        )

    def _buckets(self) -> None:
        """UploadBucket, which announces each upload on the default bus, and its log bucket."""
        access_logs = s3.Bucket(
            self,
            "AccessLogsBucket",
            **defaults.private_bucket_props(),
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="ExpireOldLogs",
                    expiration=Duration.days(self._context_int("access_log_retention_days")),
                    noncurrent_version_expiration=Duration.days(1),
                )
            ],
        )
        Validations.of(access_logs).acknowledge(
            Acknowledgment(
                id="AwsSolutions-S1",
                reason="This is the server access log bucket of UploadBucket; logging a "
                "log bucket into itself would loop.",
            )
        )
        self.upload_bucket = s3.Bucket(
            self,
            "UploadBucket",
            **defaults.private_bucket_props(),
            server_access_logs_bucket=access_logs,
            server_access_logs_prefix="upload-bucket/",
            lifecycle_rules=[
                # The raw CSV is the fullest copy of the personal data: it expires too.
                s3.LifecycleRule(
                    id="ExpireUploads",
                    expiration=Duration.days(self._context_int("upload_retention_days")),
                ),
                s3.LifecycleRule(
                    id="ExpireReplacedUploads",
                    noncurrent_version_expiration=Duration.days(
                        self._context_int("noncurrent_version_retention_days")
                    ),
                    abort_incomplete_multipart_upload_after=Duration.days(7),
                ),
            ],
        )
        # The native property, not `event_bridge_enabled=True`: that adds CDK's
        # notifications custom resource (a Lambda with a managed-policy role) to
        # set what CloudFormation can set itself on a bucket this stack owns.
        upload_cfn = cast(s3.CfnBucket, self.upload_bucket.node.default_child)
        upload_cfn.add_property_override(
            "NotificationConfiguration.EventBridgeConfiguration.EventBridgeEnabled", True
        )

    def _tables(self) -> None:
        """The classify step's idempotency table and the pipeline's five data tables, each
        with the ``point_in_time_recovery`` context's backups."""
        backups = pitr.specification(self.recovery_period_days)
        self.idempotency_table = dynamodb.Table(
            self, "IdempotencyTable", **defaults.idempotency_table_props(backups)
        )
        self.failures_table = dynamodb.Table(
            self,
            "FailuresTable",
            **defaults.data_table_props("upload_id", "failure_id", point_in_time_recovery=backups),
            time_to_live_attribute="expires_at",
        )
        self.prospects_table = dynamodb.Table(
            self,
            "ProspectsTable",
            **defaults.data_table_props(
                "upload_id", "row_number", "N", point_in_time_recovery=backups
            ),
            time_to_live_attribute="expires_at",
        )
        #: RowsTable: each data row's values, the only copy outside the upload bucket (issue
        #: 18); row events, dead letters and failure records carry ids only. The splitter
        #: writes, the classify steps and the viewer read; items expire with the upload.
        self.rows_table = dynamodb.Table(
            self,
            "RowsTable",
            **defaults.data_table_props(
                "upload_id", "row_number", "N", point_in_time_recovery=backups
            ),
            time_to_live_attribute="expires_at",
        )
        # One item per upload, keyed by upload_id alone (contract §5).
        upload_props = defaults.data_table_props(
            "upload_id", "unused", point_in_time_recovery=backups
        )
        del upload_props["sort_key"]
        self.uploads_table = dynamodb.Table(
            self, "UploadsTable", **upload_props, time_to_live_attribute="expires_at"
        )
        # Sparse: only uploads whose completion event is not yet published carry
        # sweep_shard, so the sweeper queries open uploads, never the whole table.
        self.uploads_table.add_global_secondary_index(
            index_name="OpenUploads",
            partition_key=dynamodb.Attribute(
                name="sweep_shard", type=dynamodb.AttributeType.STRING
            ),
            sort_key=dynamodb.Attribute(name="sweep_after", type=dynamodb.AttributeType.NUMBER),
            projection_type=dynamodb.ProjectionType.KEYS_ONLY,
        )
        # One marker per accounted row: the conditional Put that makes a row count once.
        self.upload_rows_table = dynamodb.Table(
            self,
            "UploadRowsTable",
            **defaults.data_table_props(
                "upload_id", "row_number", "N", point_in_time_recovery=backups
            ),
            time_to_live_attribute="expires_at",
        )
        for table in (
            self.idempotency_table,
            self.failures_table,
            self.prospects_table,
            self.rows_table,
            self.uploads_table,
            self.upload_rows_table,
        ):
            pitr.acknowledge_off(table, self.recovery_period_days)

    def _alerts(self) -> None:
        """The encrypted alert topic; only this stack's rules and alarms may use it.

        CloudWatch sends ``aws:SourceArn`` (the alarm) and ``aws:SourceAccount``.
        EventBridge-to-encrypted-topic KMS requests carry neither (the SNS guide says
        these keys are not supported there), so that key statement is bound to this
        stack's topics through SNS's encryption context instead; the topic policy
        statement of each rule names the rule (AlertTopicTarget). Names are matched as
        ``<stack name>-*``, CloudFormation's prefix for generated alarm and topic names:
        exact ARNs would make the key depend on the topic that depends on the key.
        """
        self.alert_key = kms.Key(
            self,
            "AlertKey",
            enable_key_rotation=True,
            description="Encrypts the prospect uploader's alert topic",
        )
        stack_topics = self.format_arn(service="sns", resource=f"{self.stack_name}-*")
        stack_alarms = self.format_arn(
            service="cloudwatch",
            resource="alarm",
            resource_name=f"{self.stack_name}-*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        # The encryption context key is a String key: StringLike, not ArnLike (an ARN
        # operator on a String key may never match, and alert emails would be lost).
        topic_context = {"kms:EncryptionContext:aws:sns:topicArn": stack_topics}
        self.alert_key.add_to_resource_policy(
            iam.PolicyStatement(
                actions=["kms:Decrypt", "kms:GenerateDataKey"],
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                resources=["*"],
                conditions={
                    "StringEquals": {"aws:SourceAccount": self.account},
                    "ArnLike": {"aws:SourceArn": stack_alarms},
                    "StringLike": topic_context,
                },
            )
        )
        self.alert_key.add_to_resource_policy(
            iam.PolicyStatement(
                actions=["kms:Decrypt", "kms:GenerateDataKey"],
                principals=[iam.ServicePrincipal("events.amazonaws.com")],
                resources=["*"],
                conditions={"StringLike": topic_context},
            )
        )
        self.alert_topic = sns.Topic(
            self, "AlertTopic", master_key=self.alert_key, enforce_ssl=True
        )
        self.alert_topic.add_to_resource_policy(
            iam.PolicyStatement(
                actions=["sns:Publish"],
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                resources=[self.alert_topic.topic_arn],
                conditions={
                    "StringEquals": {"aws:SourceAccount": self.account},
                    "ArnLike": {"aws:SourceArn": stack_alarms},
                },
            )
        )
        self._alert_subscription()

    def _alert_subscription(self) -> None:
        """Mail alerts to ``-c alert_email``, or warn that nobody receives them.

        One warning for one cause: every alarm of the stack, its classify steps' included
        (``alarm_topic``), has an action on the topic, so the steps' own
        ``idempotent-model-step:alarms-without-action`` never fires here; what is missing is
        someone on the topic."""
        alert_email = self.node.try_get_context("alert_email")
        if alert_email:
            if "@" not in str(alert_email):
                raise PropValidationError(
                    f"ProspectUploaderStack: context alert_email must be an email address, "
                    f"got {alert_email!r}"
                )
            self.alert_topic.add_subscription(subscriptions.EmailSubscription(str(alert_email)))
        else:
            Annotations.of(self).add_warning_v2(
                "prospect-uploader:no-alert-email",
                "No alert_email context: the alert topic has no subscription, so the stack's "
                "alarms (its classify steps' included) and upload mails reach nobody. "
                "Synthesize with `-c alert_email=ops@example.com` to receive them by email, "
                "or subscribe the topic another way.",
            )
        CfnOutput(
            self,
            "AlertSubscription",
            value=str(alert_email) if alert_email else "none (set -c alert_email=...)",
            description="Where alerts are mailed",
        )

    def _splitter(self, max_upload_bytes: int) -> None:
        """The splitter: reads an uploaded CSV, validates every row, publishes the valid ones."""
        self.splitter = python_function(
            self,
            "Splitter",
            packages=[
                _src("prospect_splitter"),
                _src("upload_accounting"),
                _src("prospect_contract"),
            ],
            handler="prospect_splitter.handler.handler",
            requirements=[_src("prospect_splitter") / "requirements.txt"],
            description="Streams an uploaded CSV, validates each row, publishes valid rows",
            timeout=Duration.minutes(15),
            memory_size=512,
            environment={
                **self._ledger_environment(),
                "FAILURES_TABLE_NAME": self.failures_table.table_name,
                "FAILURE_RETENTION_DAYS": str(self.failure_retention_days),
                "ROWS_TABLE_NAME": self.rows_table.table_name,
                "ROW_RETENTION_DAYS": str(self._context_int("upload_retention_days")),
                "IDEMPOTENCY_TABLE_NAME": self.idempotency_table.table_name,
                "MAX_UPLOAD_BYTES": str(max_upload_bytes),
                "MAX_ROWS": str(self.max_rows),
                "POWERTOOLS_SERVICE_NAME": "prospect-splitter",
                **self._row_bus_environment(summaries=True),
                # Message Batches delivery (issue 19): which rows the splitter marks batch.
                "DELIVERY": self.delivery,
                "BATCH_MIN_ROWS": str(self.batch_min_rows),
            },
        )
        self._grant_splitter()
        self.splitter.configure_async_invoke(
            retry_attempts=2,
            max_event_age=Duration.hours(6),
            on_failure=SendOnlyQueueDestination(self.failure_queue),
        )
        self.splitter_rule = events.Rule(
            self,
            "SplitterRule",
            description="Starts the splitter for each CSV uploaded to UploadBucket",
            event_pattern=events.EventPattern(
                source=["aws.s3"],
                detail_type=["Object Created"],
                detail={
                    "bucket": {"name": [self.upload_bucket.bucket_name]},
                    "object": {"key": [{"suffix": ".csv"}]},
                },
            ),
        )
        self.splitter_rule.add_target(
            targets.LambdaFunction(
                self.splitter,
                dead_letter_queue=self.failure_queue,
                retry_attempts=185,
                max_event_age=Duration.hours(24),
            )
        )

    def _grant_splitter(self) -> None:
        """Read uploads, publish rows and summaries, write failures, keys and the ledger."""
        # UploadBucket is versioned, so every S3 event names a version and the splitter
        # reads (GetObject and HeadObject) with VersionId: s3:GetObjectVersion. Plain
        # s3:GetObject would serve only an unversioned read, which never happens.
        self._allow(
            self.splitter, ["s3:GetObjectVersion"], [self.upload_bucket.arn_for_objects("*")]
        )
        # Without ListBucket S3 answers a deleted object with 403 (retried) instead
        # of 404 (recorded as ObjectNotFound, no retry).
        self._allow(self.splitter, ["s3:ListBucket"], [self.upload_bucket.bucket_arn])
        if isinstance(self.row_bus, EventBusV2):
            self.row_bus.grant_put_events_to(
                self.splitter, sources=[EVENT_SOURCE], detail_types=[ROW_VALIDATED]
            )
            # On ProspectBus: its summary, and the completion event its ledger publishes
            # when the split is the last thing an upload waited for.
            self._allow_put_events(self.splitter, self.bus, UPLOAD_SUMMARIZED, UPLOAD_COMPLETED)
        else:
            self.bus.grant_put_events_to(self.splitter)
        self.failures_table.grant(self.splitter, "dynamodb:PutItem", "dynamodb:BatchWriteItem")
        # Each row's values, 25 to a call, before its event is published.
        self.rows_table.grant(self.splitter, "dynamodb:BatchWriteItem")
        # Powertools' calls: the in-progress Put, the result Update, the Delete that releases
        # the record of a split that raised. No GetItem: a failed conditional Put returns the
        # existing record (ReturnValuesOnConditionCheckFailure=ALL_OLD with boto3 >= 1.26.164;
        # the bundle ships no boto3, and the python3.12+ runtimes' is newer), and Powertools
        # reads the record with GetItem only when that answer lacks it, which DynamoDB never
        # does. The grants test's duplicate split proves the path under the IAM check.
        # Its own records only (SPLIT_RECORD_PREFIX): the table holds the classify steps'
        # answers and staged prompts too (issue 34).
        grant_record_prefix(
            self.idempotency_table,
            self.splitter,
            SPLIT_RECORD_PREFIX,
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:DeleteItem",
        )
        # The splitter may publish the completion event already; no second PutEvents grant.
        self._grant_ledger(self.splitter, LEDGER_SPLIT, publish=False)
        upload_cfn = cast(s3.CfnBucket, self.upload_bucket.node.default_child)
        # python_function always creates the role.
        splitter_role = cast(iam.IRole, self.splitter.role)
        Validations.of(splitter_role).acknowledge(
            Acknowledgment(
                id=f"AwsSolutions-IAM5[Resource::<{self.resolve(upload_cfn.logical_id)}.Arn>/*]",
                reason="Uploads arrive under any object key; the splitter may only read "
                "objects (GetObject, GetObjectVersion) of this one bucket.",
            )
        )

    def _classify(self, lambda_retry_attempts: int) -> None:
        """The classify step: one model request per row, hot, warm or cold; and, unless
        ``-c delivery=realtime``, ``ClassifyBatch``, the same step sending the rows the
        splitter marked ``"delivery": "batch"`` as Message Batches (issue 19)."""
        bedrock = self.model_provider == "bedrock"
        #: The API key secret; None with ``-c model_provider=bedrock`` (the role is the key).
        self.api_key_secret = None if bedrock else self._api_key_secret()
        # Without a batch step every row is realtime, and the pattern is the one from before
        # batches; with one, Classify takes exactly the rows without the batch marker.
        realtime_rows = (
            None if self.delivery == REALTIME else {ROW_DELIVERY_FIELD: [{"exists": False}]}
        )
        self.classify = self._classify_step("Classify", lambda_retry_attempts, realtime_rows)
        #: The Message Batches step (issue 19); None with ``-c delivery=realtime``.
        self.classify_batch: IdempotentModelStep | None = None
        if self.delivery != REALTIME:
            self.classify_batch = self._classify_step(
                "ClassifyBatch",
                lambda_retry_attempts,
                {ROW_DELIVERY_FIELD: [BATCH]},
                ModelDelivery.batch(
                    max_wait=BATCH_DELIVERY_MAX_WAIT, max_requests=BATCH_DELIVERY_MAX_REQUESTS
                ),
            )

    @property
    def classify_steps(self) -> list[IdempotentModelStep]:
        """``Classify``, then ``ClassifyBatch`` when the stack has it."""
        return [self.classify, *([self.classify_batch] if self.classify_batch else [])]

    def _classify_step(
        self,
        id: str,
        lambda_retry_attempts: int,
        detail: dict[str, Any] | None,
        delivery: ModelDelivery | None = None,
    ) -> IdempotentModelStep:
        """One classify step on the row bus, keyed by row, labelled, upserting and accounting
        each row; ``detail`` narrows the rows it takes, ``delivery`` how it sends them."""
        bedrock = self.model_provider == "bedrock"
        classifier = ModelStepHandler.from_package(
            _src("prospect_classifier"),
            handler="prospect_classifier.handler.handler",
            # The ledger rides beside the classifier (its on_outcome hook accounts rows).
            extra_packages=[_src("upload_accounting"), _src("prospect_contract")],
        )
        pattern = events.EventPattern(
            source=[EVENT_SOURCE], detail_type=[ROW_VALIDATED], detail=detail
        )
        step = IdempotentModelStep(
            self,
            id,
            event_bus=self.row_bus,
            event_pattern=pattern,
            idempotency_key="[upload_id, row_number]",
            prompt_version=PROMPT_VERSION,
            system_prompt_file=SYSTEM_PROMPT_FILE,
            prompt_cache=PROMPT_CACHE,
            allowed_labels=LABELS,
            max_tokens=CLASSIFY_MAX_TOKENS,
            thinking=CLASSIFY_THINKING,
            api_key_secret=self.api_key_secret,
            model_provider=ModelProvider.BEDROCK if bedrock else ModelProvider.ANTHROPIC,
            model_id=self.classify_model_id,
            # The stack's price of the model (prop and context overrides included); None: none.
            model_prices={
                price_key(self.classify_model_id): price_for(
                    self.classify_model_id, self.model_prices
                )
            },
            table=self.idempotency_table,
            dead_letter_queue=self.failure_queue,
            alarm_topic=self.alert_topic,
            lambda_retry_attempts=lambda_retry_attempts,
            handler=classifier,
            environment={
                **self._ledger_environment(),
                "PROSPECTS_TABLE_NAME": self.prospects_table.table_name,
                "PROSPECT_RETENTION_DAYS": str(self.failure_retention_days),
                "ROWS_TABLE_NAME": self.rows_table.table_name,
            },
            delivery=delivery,
        )
        # The classifier upserts one item per row; nothing else on the table.
        self.prospects_table.grant(step.function, "dynamodb:UpdateItem")
        # The prompt reads the row's values (the event carries its ids only).
        self.rows_table.grant(step.function, "dynamodb:GetItem")
        self._grant_ledger(step.function, LEDGER_ROWS)
        return step

    def _api_key_secret(self) -> secretsmanager.ISecret:
        """The secret named by ``-c anthropic_api_key_secret_arn``, or a new, empty one."""
        secret_arn = self.node.try_get_context("anthropic_api_key_secret_arn")
        if secret_arn:
            return secretsmanager.Secret.from_secret_complete_arn(
                self, "AnthropicApiKey", secret_arn
            )
        secret = secretsmanager.Secret(
            self,
            "AnthropicApiKey",
            description="Anthropic API key for the prospect classifier: set its value "
            "after the first deploy",
        )
        Validations.of(secret).acknowledge(
            Acknowledgment(
                id="AwsSolutions-SMG4",
                reason="A third-party API key cannot be rotated by a Lambda rotation "
                "function; operators rotate it in the Anthropic console and store it here.",
            )
        )
        return secret

    def _recorder(self) -> None:
        """FailureRecorder: drains FailureQueue into FailuresTable."""
        self.recorder = python_function(
            self,
            "FailureRecorder",
            packages=[
                _src("failure_recorder"),
                _src("upload_accounting"),
                _src("prospect_contract"),
            ],
            handler="failure_recorder.handler.handler",
            description="Records every dead-lettered pipeline event in FailuresTable",
            timeout=Duration.seconds(30),
            memory_size=256,
            environment={
                **self._ledger_environment(),
                "FAILURES_TABLE_NAME": self.failures_table.table_name,
                "FAILURE_RETENTION_DAYS": str(self.failure_retention_days),
            },
        )
        self.failures_table.grant(self.recorder, "dynamodb:UpdateItem")
        self._grant_ledger(self.recorder, LEDGER_FAILED_ROWS)
        consume(self.recorder, self.failure_queue, batch_size=10)

    def _sweeper(self) -> None:
        """UploadSweeper: closes uploads whose rows were not all accounted for in time."""
        self.sweeper = python_function(
            self,
            "UploadSweeper",
            packages=[_src("upload_accounting"), _src("prospect_contract")],
            handler="upload_accounting.sweeper.handler",
            description="Closes uploads whose rows were not all accounted for in time",
            timeout=Duration.minutes(5),
            memory_size=256,
            environment=self._ledger_environment(),
        )
        self._grant_ledger(self.sweeper, LEDGER_SWEEP)
        self._allow(
            self.sweeper, ["dynamodb:Query"], [f"{self.uploads_table.table_arn}/index/OpenUploads"]
        )
        # A fixed-rate rule, not one EventBridge Scheduler schedule per upload: the
        # deadline is a day long, so 15 minutes late is close enough, and there are no
        # per-upload schedules to create, delete, pay for or leak.
        self.sweep_rule = events.Rule(
            self,
            "UploadSweepRule",
            description="Runs UploadSweeper every 15 minutes",
            schedule=events.Schedule.rate(SWEEP_INTERVAL),
        )
        self.sweep_rule.add_target(
            targets.LambdaFunction(
                self.sweeper,
                dead_letter_queue=self.failure_queue,
                # A missed sweep is replaced by the next one.
                retry_attempts=2,
                max_event_age=SWEEP_INTERVAL,
            )
        )
        self.sweeper.configure_async_invoke(retry_attempts=0, max_event_age=SWEEP_INTERVAL)

    def _viewer(self) -> None:
        """The viewer behind an IAM-authenticated Function URL."""
        self.viewer = python_function(
            self,
            "Viewer",
            packages=[_src("prospect_viewer"), _src("prospect_contract")],
            handler="prospect_viewer.handler.handler",
            description="Prospect Viewer: lists uploads, exports and retries recorded failures",
            timeout=Duration.seconds(30),
            memory_size=256,
            environment={
                "FAILURES_TABLE_NAME": self.failures_table.table_name,
                "UPLOADS_TABLE_NAME": self.uploads_table.table_name,
                "ROWS_TABLE_NAME": self.rows_table.table_name,
                "PROSPECTS_TABLE_NAME": self.prospects_table.table_name,
                "EVENT_SOURCE": EVENT_SOURCE,
                **self._row_bus_environment(),
                **self._price_environment(),
            },
        )
        self._grant_viewer()
        # AWS_IAM: only principals with lambda:InvokeFunctionUrl on this function
        # can load the page; nothing is public unless a policy says so.
        self.viewer_url = self.viewer.add_function_url(
            auth_type=lambda_.FunctionUrlAuthType.AWS_IAM
        )
        for role_arn in self.viewer_principals:
            self.viewer.grant_invoke_url(iam.ArnPrincipal(role_arn))
        CfnOutput(
            self,
            "ViewerUrl",
            value=self.viewer_url.url,
            description="Prospect Viewer (IAM-authenticated; sign requests with SigV4)",
        )

    def _grant_viewer(self) -> None:
        """Read failures and uploads, stamp a retried failure, re-publish its row."""
        self.failures_table.grant(
            self.viewer, "dynamodb:Query", "dynamodb:Scan", "dynamodb:GetItem"
        )
        # A failed row's values: a page's rows (BatchGetItem), a retry's check (GetItem).
        self.rows_table.grant(self.viewer, "dynamodb:BatchGetItem", "dynamodb:GetItem")
        # A retried row's label, once answered (labels, times and request ids: no row values).
        self.prospects_table.grant(self.viewer, "dynamodb:BatchGetItem")
        # The viewer only ever scans UploadsTable (its uploads page). The table, not its
        # index: table.grant would add index/* as well.
        self._allow(self.viewer, ["dynamodb:Scan"], [self.uploads_table.table_arn])
        self._allow(
            self.viewer,
            ["dynamodb:UpdateItem"],
            [self.failures_table.table_arn],
            {
                "ForAllValues:StringEquals": {
                    "dynamodb:Attributes": ["upload_id", "failure_id", *VIEWER_UPDATABLE_ATTRIBUTES]
                },
                # ALL_OLD/ALL_NEW would hand back attributes not listed; UPDATED_* return
                # only the listed ones it changed.
                "StringEqualsIfExists": {
                    "dynamodb:ReturnValues": ["NONE", "UPDATED_OLD", "UPDATED_NEW"]
                },
            },
        )
        # Retry re-publishes one kind of event only: a validated row, as the splitter sent it.
        if isinstance(self.row_bus, EventBusV2):
            self.row_bus.grant_put_events_to(
                self.viewer, sources=[EVENT_SOURCE], detail_types=[ROW_VALIDATED]
            )
        else:
            self._allow_put_events(self.viewer, self.bus, ROW_VALIDATED)

    def _upload_alerts(self) -> None:
        """The rules that mail upload summaries to the alert topic.

        Values enter the mail as JSON string values: EventBridge escapes them there, so a
        key with quotes or newlines cannot break or forge the message.
        """
        self._completed_alert()
        self._rejected_alert()

    def _completed_alert(self) -> None:
        """``UploadCompletedAlertRule``: a mail per upload with invalid, failed or missing rows."""
        self.completed_alert_rule = events.Rule(
            self,
            "UploadCompletedAlertRule",
            event_bus=self.bus,
            description="Mails one summary per upload with invalid, failed or missing rows",
            event_pattern=events.EventPattern(
                source=[EVENT_SOURCE],
                detail_type=[UPLOAD_COMPLETED],
                detail={
                    "$or": [
                        {"status": ["incomplete"]},
                        {"status": ["completed"], "invalid": [{"numeric": [">", 0]}]},
                        {"status": ["completed"], "failed_total": [{"numeric": [">", 0]}]},
                    ]
                },
            ),
        )
        field = events.EventField.from_path
        self.completed_alert_rule.add_target(
            AlertTopicTarget(
                self.alert_topic,
                events.RuleTargetInput.from_object(
                    {
                        "message": "A prospect upload finished with rows that were not "
                        "classified. Open the Prospect Viewer for the reasons.",
                        "upload_id": field("$.detail.upload_id"),
                        "bucket": field("$.detail.bucket"),
                        **self._mailed_file_name(),
                        "status": field("$.detail.status"),
                        # Issue 36: the one counting rule's state and words, as the viewer
                        # and the local run show them (prospect_contract.upload_status).
                        "state": field("$.detail.state"),
                        "summary": field("$.detail.status_text"),
                        "rows": field("$.detail.rows"),
                        "invalid": field("$.detail.invalid"),
                        "failed": field("$.detail.failed_total"),
                        "failed_by_error_code": field("$.detail.failed"),
                        "classified": field("$.detail.classified_total"),
                        "labelled": field("$.detail.labelled"),
                        "missing": field("$.detail.missing"),
                        "model_requests": field("$.detail.model_requests"),
                        # Message Batches (issue 19): how the rows went, and what it billed.
                        "delivery": field("$.detail.delivery"),
                        "batch_requests": field("$.detail.batch_requests"),
                        "batch_tokens": field("$.detail.batch_tokens"),
                        "batches": field("$.detail.batches"),
                    }
                ),
                self.failure_queue,
            )
        )

    def _mailed_file_name(self) -> dict[str, str]:
        """The mail's ``key`` (the object key: a file name, which may be a person's name),
        only with ``-c mail_file_names=true``; the upload id names the upload otherwise, and
        the viewer shows its file (issue 34)."""
        if not self.mail_file_names:
            return {}
        return {"key": events.EventField.from_path("$.detail.key")}

    def _rejected_alert(self) -> None:
        """``UploadAlertRule``: one mail per rejected upload, with its reason."""
        # Kept on the splitter's own summary: it is alerted even when the upload
        # could not be attributed to an object (a malformed S3 event). The id is the
        # old summary rule's, so deployed stacks update the rule in place.
        field = events.EventField.from_path
        self.alert_rule = events.Rule(
            self,
            "UploadAlertRule",
            event_bus=self.bus,
            description="Mails every rejected upload with its reason",
            event_pattern=events.EventPattern(
                source=[EVENT_SOURCE],
                detail_type=[UPLOAD_SUMMARIZED],
                detail={"status": ["rejected"]},
            ),
        )
        self.alert_rule.add_target(
            AlertTopicTarget(
                self.alert_topic,
                events.RuleTargetInput.from_object(
                    {
                        "message": "A prospect upload was rejected; no row was classified.",
                        "upload_id": field("$.detail.upload_id"),
                        "bucket": field("$.detail.bucket"),
                        **self._mailed_file_name(),
                        "reason": field("$.detail.reason"),
                    }
                ),
                self.failure_queue,
            )
        )

    def _alarms(self) -> None:
        """The step's alarms and the pipeline's, all notifying the alert topic."""
        step_alarms = [alarm for step in self.classify_steps for alarm in step.alarms]
        self._step_alarm_count = len(step_alarms)
        self.alarms: list[cloudwatch.Alarm] = [*step_alarms, *self._pipeline_alarms()]
        for alarm in self.alarms[len(step_alarms) :]:
            alarm.add_alarm_action(cloudwatch_actions.SnsAction(self.alert_topic))

    def _dashboard(self) -> None:
        """One dashboard: the classify step's row, then uploads closed and their rows (the
        ledger's own metrics) and the pipeline's alarms."""
        #: The stack's one dashboard: ``Classify``'s row, then the uploads' own metrics.
        self.dashboard = ModelStepDashboard(self, "Dashboard", steps=self.classify_steps)
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Uploads closed, by status (with failures: completed with failed or "
                "invalid rows)",
                left=[
                    self.metric_upload(name)
                    for name in (
                        *upload_metrics.STATUS_METRICS.values(),
                        *upload_metrics.STATE_METRICS.values(),
                    )
                ],
                width=8,
                height=6,
            ),
            cloudwatch.GraphWidget(
                title="Closed uploads: rows labelled, failed, invalid; billed model requests",
                left=[self.metric_upload(name) for name in upload_metrics.ROW_METRICS.values()],
                width=8,
                height=6,
            ),
            cloudwatch.AlarmStatusWidget(
                title="Pipeline alarms",
                alarms=self.alarms[self._step_alarm_count :],
                width=8,
                height=6,
            ),
        )

    def metric_upload(self, metric_name: str, period: Duration | None = None) -> cloudwatch.Metric:
        """One of the upload ledger's metrics (``prospect_contract.metrics``: e.g.
        ``UploadsCompleted``, ``RowsFailed``), counted once per closed upload (Sum, default
        5 minutes)."""
        if metric_name not in upload_metrics.METRIC_NAMES:
            raise PropValidationError(
                f"ProspectUploaderStack: metric_name must be one of "
                f"{', '.join(upload_metrics.METRIC_NAMES)}, got {metric_name!r}"
            )
        return cloudwatch.Metric(
            namespace=upload_metrics.NAMESPACE,
            metric_name=metric_name,
            dimensions_map={upload_metrics.DIMENSION: self.uploads_table.table_name},
            statistic="Sum",
            period=period or Duration.minutes(5),
        )

    # ----------------------------------------------------------------- helpers
    def _context_int(self, key: str) -> int:
        """An integer context value in its range (CONTEXT_INTS); strings from ``-c`` too."""
        default, low, high = CONTEXT_INTS[key]
        raw = self.node.try_get_context(key)
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            return default
        try:
            if isinstance(raw, bool) or not isinstance(raw, (int, str)):
                raise ValueError
            value = int(raw.strip()) if isinstance(raw, str) else raw
        except ValueError:
            raise PropValidationError(
                f"ProspectUploaderStack: context {key} must be an integer between {low} and "
                f"{high}, got {raw!r}"
            ) from None
        if not low <= value <= high:
            raise PropValidationError(
                f"ProspectUploaderStack: context {key} must be between {low} and {high}, "
                f"got {value}"
            )
        return value

    def _context_flag(self, key: str) -> bool:
        """A true/false context value, default false; strings from ``-c`` too."""
        raw = self.node.try_get_context(key)
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            return False
        text = str(raw).strip().lower()
        if text not in ("true", "false"):
            raise PropValidationError(
                f"ProspectUploaderStack: context {key} must be true or false, got {raw!r}"
            )
        return text == "true"

    def _context_choice(self, key: str, allowed: tuple[str, ...]) -> str:
        """One of ``allowed`` (the first is the default); strings from ``-c`` too."""
        raw = self.node.try_get_context(key)
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            return allowed[0]
        value = raw.strip() if isinstance(raw, str) else raw
        if value not in allowed:
            raise PropValidationError(
                f"ProspectUploaderStack: context {key} must be one of "
                f"{', '.join(allowed)}, got {raw!r}"
            )
        return cast(str, value)

    def _row_bus_environment(self, *, summaries: bool = False) -> dict[str, str]:
        """Where a row publisher (splitter, viewer retry) sends "Prospect Row Validated".

        Classic: nothing beyond ``EVENT_BUS_NAME`` (the ledger's, or the viewer's own).
        v2: ``EVENT_BUS_KIND=v2`` and ``EVENT_BUS_ARN``; with ``summaries`` (the
        splitter) also ``SUMMARY_EVENT_BUS_NAME``, so its upload summary reaches the
        classic bus that carries ``UploadAlertRule``.
        """
        if not isinstance(self.row_bus, EventBusV2):
            return {"EVENT_BUS_NAME": self.bus.event_bus_name}
        env = {"EVENT_BUS_KIND": "v2", "EVENT_BUS_ARN": self.row_bus.event_bus_arn}
        if summaries:
            env["SUMMARY_EVENT_BUS_NAME"] = self.bus.event_bus_name
        return env

    def _context_role_arns(self, key: str) -> list[str]:
        raw = self.node.try_get_context(key)
        if raw is None:
            return []
        values = raw if isinstance(raw, list) else str(raw).split(",")
        arns = [str(value).strip() for value in values if str(value).strip()]
        for arn in arns:
            if not _ROLE_ARN.match(arn):
                raise PropValidationError(
                    f"ProspectUploaderStack: context {key} must be comma-separated IAM role "
                    f"ARNs (arn:aws:iam::123456789012:role/name), got {arn!r}"
                )
        return arns

    def _ledger_environment(self) -> dict[str, str]:
        """What ``upload_accounting.LedgerSettings`` reads, for every function using it."""
        return {
            "UPLOADS_TABLE_NAME": self.uploads_table.table_name,
            "UPLOAD_ROWS_TABLE_NAME": self.upload_rows_table.table_name,
            "EVENT_BUS_NAME": self.bus.event_bus_name,
            "EVENT_SOURCE": EVENT_SOURCE,
            "UPLOAD_DEADLINE_SECONDS": str(int(UPLOAD_DEADLINE.to_seconds())),
            "UPLOAD_SPLIT_DEADLINE_SECONDS": str(int(UPLOAD_SPLIT_DEADLINE.to_seconds())),
            "UPLOAD_RETENTION_DAYS": str(self.failure_retention_days),
            **self._price_environment(),
        }

    @property
    def classify_model_id(self) -> str:
        """The classify steps' ``model_id``: the default model, or on Bedrock
        ``-c bedrock_model_id`` (default :data:`DEFAULT_BEDROCK_MODEL_ID`)."""
        if self.model_provider == "bedrock":
            return str(self.node.try_get_context("bedrock_model_id") or DEFAULT_BEDROCK_MODEL_ID)
        return defaults.DEFAULT_MODEL_ID

    def _price_environment(self) -> dict[str, str]:
        """``MODEL_PRICE`` of the classify model (the one it really calls, on Bedrock too) at
        its cache TTL; none for an unpriced model (its summaries say the cost is unknown)."""
        price = price_for(self.classify_model_id, self.model_prices)
        return {"MODEL_PRICE": price.for_runtime(PROMPT_CACHE.value)} if price else {}

    def _model_prices(
        self, overrides: Mapping[str, Mapping[str, Any] | ModelPrice | None] | None
    ) -> dict[str, ModelPrice]:
        """The catalogue's prices under the ``model_prices`` prop, under ``-c model_prices``."""
        table = price_table(overrides, source="ProspectUploaderStack: model_prices")
        raw = self.node.try_get_context("model_prices")
        if raw in (None, ""):
            return table
        try:
            document = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError as error:
            raise PropValidationError(
                f"ProspectUploaderStack: context model_prices must be JSON, got {raw!r} ({error})"
            ) from error
        if not isinstance(document, Mapping):
            raise PropValidationError(
                "ProspectUploaderStack: context model_prices must be a JSON object of model "
                f"id -> prices, got {raw!r}"
            )
        return price_table(
            document, source="ProspectUploaderStack: context model_prices", base=table
        )

    def _grant_ledger(
        self,
        function: lambda_.IFunction,
        access: tuple[tuple[str, ...], tuple[str, ...]],
        *,
        publish: bool = True,
    ) -> None:
        """The ledger calls ``function`` makes: ``access`` is (UploadsTable actions,
        UploadRowsTable actions), one of LEDGER_SPLIT / LEDGER_ROWS / LEDGER_FAILED_ROWS /
        LEDGER_SWEEP; and
        publishing the completion event."""
        uploads, rows = access
        # Table ARNs only: table.grant would add the sweeper's index (index/*) too.
        self._allow(function, uploads, [self.uploads_table.table_arn])
        if rows:
            self._allow(function, rows, [self.upload_rows_table.table_arn])
        if publish:
            self._allow_put_events(function, self.bus, UPLOAD_COMPLETED)

    @staticmethod
    def _allow(
        function: lambda_.IFunction,
        actions: Sequence[str],
        resources: Sequence[str],
        conditions: Mapping[str, Any] | None = None,
    ) -> None:
        """One statement in ``function``'s role: ``actions`` on exactly ``resources`` (no
        index or object wildcard a ``grant_*`` would add), under ``conditions`` (default
        none). Every grant of the stack's own functions that no L2 ``grant`` fits."""
        function.add_to_role_policy(
            iam.PolicyStatement(
                actions=list(actions), resources=list(resources), conditions=conditions
            )
        )

    @classmethod
    def _allow_put_events(
        cls, function: lambda_.IFunction, bus: events.IEventBus, *detail_types: str
    ) -> None:
        """PutEvents on classic ``bus`` of this pipeline's source and ``detail_types`` only
        (one is written as a string, several as a list)."""
        detail_type: str | list[str] = (
            detail_types[0] if len(detail_types) == 1 else list(detail_types)
        )
        cls._allow(
            function,
            ["events:PutEvents"],
            [bus.event_bus_arn],
            {"StringEquals": {"events:source": EVENT_SOURCE, "events:detail-type": detail_type}},
        )

    def _pipeline_alarms(self) -> list[cloudwatch.Alarm]:
        """Alarms on the parts outside the classify step; missing data is healthy."""
        splitter_rule = self.splitter_rule
        specs = [
            (
                "SplitterDeliveryFailedAlarm",
                events_rule_metric(splitter_rule, "FailedInvocations"),
                "EventBridge could not invoke the splitter for an upload.",
            ),
            (
                "SplitterSentToDlqAlarm",
                events_rule_metric(splitter_rule, "InvocationsSentToDlq"),
                "Upload events for the splitter went to FailureQueue.",
            ),
            (
                "SplitterFailedToBeSentToDlqAlarm",
                events_rule_metric(splitter_rule, "InvocationsFailedToBeSentToDlq"),
                "Upload events were lost: neither the splitter nor FailureQueue took them.",
            ),
            (
                "SplitterErrorsAlarm",
                self.splitter.metric_errors(period=Duration.minutes(1)),
                "The splitter raised; Lambda retries it, then sends the upload to FailureQueue.",
            ),
            (
                "RecorderErrorsAlarm",
                self.recorder.metric_errors(period=Duration.minutes(1)),
                "FailureRecorder raised; failures stay on FailureQueue until it recovers.",
            ),
            (
                "RejectedAlertDeliveryFailedAlarm",
                events_rule_metric(self.alert_rule, "FailedInvocations", self.bus),
                "A rejected upload's alert could not be published to the alert topic.",
            ),
            (
                "CompletedAlertDeliveryFailedAlarm",
                events_rule_metric(self.completed_alert_rule, "FailedInvocations", self.bus),
                "An upload summary could not be published to the alert topic.",
            ),
            (
                "SweeperErrorsAlarm",
                self.sweeper.metric_errors(period=Duration.minutes(15)),
                "UploadSweeper raised; overdue uploads stay open until a sweep succeeds.",
            ),
        ]
        return [
            occurrence_alarm(self, alarm_id, metric, description)
            for alarm_id, metric, description in specs
        ]
