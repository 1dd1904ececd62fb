#!/usr/bin/env python3
"""The CDK app: the Prospect Uploader reference pipeline, checked by cdk-nag.

Context: ``-c alert_email=ops@example.com`` subscribes an address to alerts;
``-c anthropic_api_key_secret_arn=arn:...`` uses an existing API key secret; ``max_rows``,
``failure_retention_days``, ``noncurrent_version_retention_days``,
``access_log_retention_days`` and ``viewer_principals`` are described on
``ProspectUploaderStack`` and in docs/reference-app.md ("Props and context").
Validated rows ride ``RowBus``, an EventBridge v2 bus with publish-side deduplication;
``-c event_bus=classic`` keeps them on the classic ``ProspectBus`` (the template from
before v2). Upload summaries and their alert rules are on ``ProspectBus`` either way.
``-c delivery=auto|realtime|batch`` (default ``auto``) and ``-c batch_min_rows=N`` (default
2,000) choose how uploads' rows reach the model: uploads of at least N valid rows go as
Message Batches (half price) under ``auto``.
"""

from __future__ import annotations

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from constructs_lib import RetryBudget
from constructs_lib.prospect_uploader import ProspectUploaderStack


def build_app(app: cdk.App | None = None) -> cdk.App:
    """Add the stack, a retry budget and cdk-nag's AwsSolutions checks to ``app``."""
    app = app or cdk.App()
    ProspectUploaderStack(
        app,
        "ProspectUploader",
        description="Prospect Uploader: CSV rows validated and classified once per row",
    )
    cdk.Aspects.of(app).add(RetryBudget(max_model_requests_per_delivery=3))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app


if __name__ == "__main__":
    build_app().synth()
