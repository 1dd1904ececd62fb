"""A minimal app with one IdempotentModelStep: the fixture of the construct's template tests."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from constructs_lib import Effort, EventBusV2, IdempotentModelStep, RetryBudget, Thinking
from constructs_lib.checkov_acknowledgments import acknowledge_checkov

#: The demo's own secret, as a user's app would acknowledge it (the step's resources need not).
SECRET_CMK_REASON = (
    "The demo's one third-party API key is encrypted with the account's aws/secretsmanager "
    "key and read only by the step's role (grant_read); a customer managed key adds nothing."
)


class DemoStack(cdk.Stack):
    """A custom bus, an API key secret and one step that classifies its events."""

    def __init__(self, scope: Construct, id: str, **kwargs: object) -> None:
        super().__init__(scope, id, **kwargs)
        bus = events.EventBus(self, "Bus")
        secret = secretsmanager.Secret(
            self, "AnthropicApiKey", description="Anthropic API key for the demo model step"
        )
        cdk.Validations.of(secret).acknowledge(
            cdk.Acknowledgment(
                id="AwsSolutions-SMG4",
                reason="A third-party API key cannot be rotated by a Lambda rotation "
                "function; it is rotated in the Anthropic console and put here by hand.",
            )
        )
        acknowledge_checkov(secret, "CKV_AWS_149", SECRET_CMK_REASON)
        topic = sns.Topic(self, "Alarms", enforce_ssl=True)
        acknowledge_checkov(
            topic,
            "CKV_AWS_26",
            "Carries CloudWatch alarm state changes only (names, states, thresholds), over "
            "TLS only; with a KMS key, its key policy would have to admit CloudWatch.",
        )
        self.step = IdempotentModelStep(
            self,
            "Classify",
            event_bus=bus,
            event_pattern=events.EventPattern(
                source=["demo.uploads"], detail_type=["Row Validated"]
            ),
            idempotency_key="[upload_id, row_number]",
            prompt_version="v1",
            system_prompt="Classify the lead as hot, warm or cold. Answer with one word.",
            allowed_labels=["hot", "warm", "cold"],
            api_key_secret=secret,
            alarm_topic=topic,
            # Every optional runtime variable is set by the demo (test_runtime_environment).
            tracing=True,
            result_bus=bus,
            # A one-word answer at the lowest effort; adaptive thinking fits in the default
            # max_tokens (1,024), and both join the record key's fingerprint.
            thinking=Thinking.ADAPTIVE,
            effort=Effort.LOW,
        )


class DemoV2Stack(cdk.Stack):
    """The same step on an EventBridge v2 bus, with SnapStart and a producer role."""

    def __init__(self, scope: Construct, id: str, **kwargs: object) -> None:
        super().__init__(scope, id, **kwargs)
        bus = EventBusV2(self, "Bus", description="Demo rows, deduplicated on publish")
        producer = iam.Role(
            self, "Producer", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com")
        )
        bus.grant_put_events_to(producer, sources=["demo.uploads"], detail_types=["Row Validated"])
        secret = secretsmanager.Secret(
            self, "AnthropicApiKey", description="Anthropic API key for the demo model step"
        )
        cdk.Validations.of(secret).acknowledge(
            cdk.Acknowledgment(
                id="AwsSolutions-SMG4",
                reason="A third-party API key cannot be rotated by a Lambda rotation "
                "function; it is rotated in the Anthropic console and put here by hand.",
            )
        )
        acknowledge_checkov(secret, "CKV_AWS_149", SECRET_CMK_REASON)
        self.step = IdempotentModelStep(
            self,
            "Classify",
            event_bus=bus,
            event_pattern=events.EventPattern(
                source=["demo.uploads"], detail_type=["Row Validated"]
            ),
            idempotency_key="[upload_id, row_number]",
            prompt_version="v1",
            system_prompt="Classify the lead as hot, warm or cold. Answer with one word.",
            allowed_labels=["hot", "warm", "cold"],
            api_key_secret=secret,
            event_retry_attempts=10,
            max_event_age=cdk.Duration.hours(6),
            # The key's memory: 6 h + the queues' 14 days + 1 h (the derived minimum is
            # 1,234,800 s); spelled out to show an explicit value that synth accepts.
            expires_after=cdk.Duration.days(15),
            snap_start=True,
        )


def build_app(app: cdk.App | None = None) -> cdk.App:
    """Add the stacks, the retry budget and cdk-nag's AwsSolutions checks to ``app``."""
    app = app or cdk.App()
    DemoStack(app, "IdempotentModelStepDemo")
    DemoV2Stack(app, "IdempotentModelStepDemoV2")
    cdk.Aspects.of(app).add(RetryBudget(max_model_requests_per_delivery=3))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app
