"""checkov findings the library's own resources acknowledge, each with its reason.

Users scan synthesized templates with checkov in CI. Some of its checks fail on these
resources by design (a customer managed KMS key, a VPC, reserved concurrency), and some are
false positives (checkov 3.3 does not read SSE-SQS, event source mappings or on-failure
destinations). Each is acknowledged in the resource's ``Metadata`` in checkov's own format,
so a user's checkov gate passes and says why::

    "Metadata": {"checkov": {"skip": [{"id": "CKV_AWS_117", "comment": "<the reason>"}]}}

Every acknowledgment is in this module, in one table per construct, keyed by the resource's
construct path below that construct (construct ids are stable, so these are too). A
construct adds one line, ``acknowledge_checkov_findings(self, <its table>)``; an aspect
applies the table at synth to the CloudFormation resources at those paths under that
construct only. A resource a user passes in (a table, a queue, a secret) is not under it,
and one a user adds under it is at no path of the table: neither is ever touched.

For your own resources, :func:`acknowledge_checkov` writes the same metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import jsii
from aws_cdk import Aspects, CfnResource, IAspect
from aws_cdk import aws_lambda as lambda_
from constructs import Construct, IConstruct

__all__ = [
    "BEDROCK_BATCH_JOBS",
    "MODEL_STEP",
    "PROSPECT_UPLOADER",
    "CheckovSkip",
    "acknowledge_checkov",
    "acknowledge_checkov_findings",
]

#: The metadata key checkov reads (``Metadata.checkov.skip``).
METADATA_KEY = "checkov"


def _always(_resource: CfnResource) -> bool:
    return True


def _no_reserved_concurrency(resource: CfnResource) -> bool:
    return cast(lambda_.CfnFunction, resource).reserved_concurrent_executions is None


@dataclass(frozen=True)
class CheckovSkip:
    """One acknowledged checkov check.

    :param check_id: e.g. ``"CKV_AWS_117"``.
    :param reason: why the check does not apply here; it is the ``comment`` checkov reports.
    :param applies: acknowledge only while this holds for the resource, for a check that a
        prop can make pass. Default: always.
    """

    check_id: str
    reason: str
    applies: Callable[[CfnResource], bool] = _always


def acknowledge_checkov(scope: IConstruct, check_id: str, reason: str) -> None:
    """Add ``{"id": check_id, "comment": reason}`` to checkov's skips of a resource.

    :param scope: a CloudFormation resource, or an L2 construct whose default child is one.
    """
    resource = scope if isinstance(scope, CfnResource) else scope.node.default_child
    if not isinstance(resource, CfnResource):
        raise TypeError(f"{scope.node.path} has no CloudFormation resource to acknowledge on")
    if len(reason.strip()) < 20:
        raise ValueError(f"a checkov acknowledgment needs a specific reason, got {reason!r}")
    existing: dict[str, Any] = dict(resource.get_metadata(METADATA_KEY) or {})
    skips = [s for s in existing.get("skip", []) if s.get("id") != check_id]
    existing["skip"] = [*skips, {"id": check_id, "comment": reason}]
    resource.add_metadata(METADATA_KEY, existing)


@jsii.implements(IAspect)
class _CheckovAcknowledgments:
    """Applies a table of acknowledgments to the resources below one construct."""

    def __init__(self, owner: Construct, table: Mapping[str, Sequence[CheckovSkip]]) -> None:
        self._prefix = f"{owner.node.path}/" if owner.node.path else ""
        self._table = table

    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, CfnResource) or not node.node.path.startswith(self._prefix):
            return
        for skip in self._table.get(node.node.path[len(self._prefix) :], ()):
            if skip.applies(node):
                acknowledge_checkov(node, skip.check_id, skip.reason)


def acknowledge_checkov_findings(
    owner: Construct, table: Mapping[str, Sequence[CheckovSkip]]
) -> None:
    """Acknowledge ``table``'s checks on ``owner``'s own resources, at synth."""
    Aspects.of(owner).add(_CheckovAcknowledgments(owner, table))


# --------------------------------------------------------------------------- shared reasons
def _sse_sqs(role: str, senders: str) -> CheckovSkip:
    return CheckovSkip(
        "CKV_AWS_27",
        f"False positive: {role} is encrypted at rest with SSE-SQS (SqsManagedSseEnabled), "
        "which checkov's CKV_AWS_27 does not read (it looks for KmsMasterKeyId only). With a "
        f"KMS key instead, its key policy would have to admit {senders}.",
    )


def _aws_managed_table_key(contents: str) -> CheckovSkip:
    return CheckovSkip(
        "CKV_AWS_119",
        f"{contents} Encrypted at rest with the AWS managed KMS key (aws/dynamodb, "
        "SSEEnabled); IAM grants on this table decide who reads it. A customer managed key "
        "adds key-policy control and a cost per key and request that this stack leaves to "
        "deployers whose policy requires one.",
    )


def _service_encrypted_logs(function: str) -> CheckovSkip:
    return CheckovSkip(
        "CKV_AWS_158",
        f"{function}'s logs are encrypted at rest by CloudWatch Logs' own key. They hold "
        "outcome records (keys, error codes, request ids), not API keys; a KMS key would need "
        "a key policy for the logs service principal in every region deployed to.",
    )


def _no_vpc(reaches: str) -> CheckovSkip:
    return CheckovSkip(
        "CKV_AWS_117",
        f"By design: the function reaches {reaches} through their public endpoints and no "
        "private resource; in a VPC it would need a NAT gateway or interface endpoints to do "
        "the same, and gain no isolation.",
    )


def _configuration_only_environment(contents: str) -> CheckovSkip:
    return CheckovSkip(
        "CKV_AWS_173",
        f"The environment holds configuration only ({contents}), no secret; Lambda encrypts "
        "it at rest with its AWS managed key. A customer managed key would add a KMS decrypt "
        "to every cold start and a key policy to keep.",
    )


#: ``IdempotentModelStep``'s own resources (the table and DLQ only when it creates them).
MODEL_STEP: Mapping[str, Sequence[CheckovSkip]] = {
    "IdempotencyTable/Resource": [
        _aws_managed_table_key(
            "Holds the step's Powertools idempotency records: hashed key ids, status and "
            "the stored answers, which expire after expires_after."
        )
    ],
    "DeadLetterQueue/Resource": [
        _sse_sqs(
            "the step's dead-letter queue",
            "EventBridge (events.amazonaws.com), the runtime's role and the redrive",
        )
    ],
    "BufferQueue/Resource": [
        _sse_sqs("the step's buffer queue", "EventBridge (events.amazonaws.com), its target")
    ],
    "RedriveQueue/Resource": [
        _sse_sqs("the step's redrive queue", "SQS's redrive from the buffer queue")
    ],
    "FunctionLogGroup/Resource": [_service_encrypted_logs("The model step function")],
    "Function/Resource": [
        CheckovSkip(
            "CKV_AWS_116",
            "False positive: a function DLQ serves asynchronous invocations only, and this "
            "function is invoked by the event source mappings of its buffer and redrive "
            "queues. Failures reach the step's dead-letter queue by the runtime's own send "
            "and by the queues' redrive policies.",
        ),
        _no_vpc("the Anthropic API (or Bedrock), DynamoDB, SQS and Secrets Manager"),
        CheckovSkip(
            "CKV_AWS_115",
            "By design: concurrency is capped by the event source mapping's "
            "ScalingConfig.MaximumConcurrency (max_concurrency), which checkov does not "
            "read; reserved concurrency would also take that much from the account's pool. "
            "max_concurrency=1 does set reserved concurrency 1.",
            applies=_no_reserved_concurrency,
        ),
        _configuration_only_environment(
            "table and queue names, the key expression, prompt version, system prompt and "
            "the API key secret's ARN"
        ),
    ],
}

#: ``BedrockBatchJobs``'s bucket (issue 37), when it makes one.
BEDROCK_BATCH_JOBS: Mapping[str, Sequence[CheckovSkip]] = {
    "Bucket/Resource": [
        CheckovSkip(
            "CKV_AWS_18",
            "Holds only Bedrock batch job input and output while a job runs: the runtime "
            "deletes each job's objects once collected and a lifecycle rule expires the rest. "
            "Only the step's function and its job role reach it; CloudTrail data events audit "
            "access where needed (cdk-nag's AwsSolutions-S1 is acknowledged for the same "
            "reason).",
        ),
        CheckovSkip(
            "CKV_AWS_21",
            "By design: versioning would keep every deleted prompt (row values) as a "
            "noncurrent version; the objects are transient copies of rows the idempotency "
            "table already holds, deleted once their job is collected.",
        ),
    ],
}

_LEDGER_ENVIRONMENT = "table and bus names, deadlines and retention days"

#: ``ProspectUploaderStack``'s own resources (``Classify`` acknowledges its own).
PROSPECT_UPLOADER: Mapping[str, Sequence[CheckovSkip]] = {
    "AccessLogsBucket/Resource": [
        CheckovSkip(
            "CKV_AWS_18",
            "This is the server access log bucket of UploadBucket; logging a log bucket into "
            "itself would loop (cdk-nag's AwsSolutions-S1 is acknowledged for the same reason).",
        )
    ],
    "IdempotencyTable/Resource": [
        _aws_managed_table_key(
            "Holds Powertools idempotency records of the splitter and the classify step: "
            "hashed key ids, status and stored answers, each with a TTL."
        )
    ],
    "FailuresTable/Resource": [
        _aws_managed_table_key(
            "Holds each dead-lettered row with its error, for the Prospect Viewer, until "
            "failure_retention_days."
        )
    ],
    "RowsTable/Resource": [
        _aws_managed_table_key(
            "Holds each uploaded row's values keyed by upload and row number, written only by "
            "the splitter, until upload_retention_days."
        )
    ],
    "ProspectsTable/Resource": [
        _aws_managed_table_key(
            "Holds each classified row's label keyed by upload and row number, written only "
            "by Classify."
        )
    ],
    "UploadsTable/Resource": [
        _aws_managed_table_key(
            "Holds one accounting item per upload (counts, status, deadlines), with a TTL."
        )
    ],
    "UploadRowsTable/Resource": [
        _aws_managed_table_key(
            "Holds one marker per accounted row, so that a row counts once, with a TTL."
        )
    ],
    "FailureQueue/Resource": [
        _sse_sqs(
            "the pipeline's dead-letter queue, FailureQueue,",
            "EventBridge (events.amazonaws.com), Lambda's on-failure destinations and Classify",
        )
    ],
    "AnthropicApiKey/Resource": [
        CheckovSkip(
            "CKV_AWS_149",
            "The one third-party API key is encrypted with the account's aws/secretsmanager "
            "key and read only by Classify's role (grant_read); a customer managed key would "
            "add a key policy to keep for it. Pass anthropic_api_key_secret_arn to use a "
            "secret of your own.",
        )
    ],
    "SplitterLogGroup/Resource": [_service_encrypted_logs("The splitter")],
    "Splitter/Resource": [
        CheckovSkip(
            "CKV_AWS_116",
            "False positive: SplitterRule invokes it asynchronously, and an event that "
            "fails Lambda's two retries goes to FailureQueue through the EventInvokeConfig "
            "on-failure destination (the successor of a function DLQ, which also records "
            "the error), which checkov does not read.",
        ),
        _no_vpc("S3, DynamoDB and EventBridge"),
        CheckovSkip(
            "CKV_AWS_115",
            "By design: it runs once per uploaded CSV and never calls the model; reserved "
            "concurrency would set account capacity aside and throttle a burst of uploads. "
            "The model-facing cap is Classify's max_concurrency.",
        ),
        _configuration_only_environment(f"{_LEDGER_ENVIRONMENT}, row and size limits"),
    ],
    "FailureRecorderLogGroup/Resource": [_service_encrypted_logs("The failure recorder")],
    "FailureRecorder/Resource": [
        CheckovSkip(
            "CKV_AWS_116",
            "False positive: FailureQueue's event source mapping invokes it, where a "
            "function DLQ is never used; a record it cannot store stays on FailureQueue "
            "(ReportBatchItemFailures) for the queue's 14-day retention.",
        ),
        _no_vpc("DynamoDB and EventBridge"),
        CheckovSkip(
            "CKV_AWS_115",
            "By design: it drains FailureQueue, empty in normal operation, in batches of 10; "
            "reserved concurrency would set account capacity aside for it.",
        ),
        _configuration_only_environment(_LEDGER_ENVIRONMENT),
    ],
    "UploadSweeperLogGroup/Resource": [_service_encrypted_logs("The upload sweeper")],
    "UploadSweeper/Resource": [
        CheckovSkip(
            "CKV_AWS_116",
            "By design: UploadSweepRule runs it every 15 minutes with no Lambda retry, since "
            "a failed sweep is replaced by the next one; an event EventBridge cannot deliver "
            "goes to the rule target's DLQ, FailureQueue.",
        ),
        _no_vpc("DynamoDB and EventBridge"),
        CheckovSkip(
            "CKV_AWS_115",
            "By design: one invocation every 15 minutes; reserved concurrency would set "
            "account capacity aside for a function that does not run twice at once.",
        ),
        _configuration_only_environment(_LEDGER_ENVIRONMENT),
    ],
    "ViewerLogGroup/Resource": [_service_encrypted_logs("The Prospect Viewer")],
    "Viewer/Resource": [
        CheckovSkip(
            "CKV_AWS_116",
            "False positive: it is invoked only synchronously, through its IAM-authenticated "
            "Function URL, and Lambda uses a function DLQ for asynchronous invocations only.",
        ),
        _no_vpc("DynamoDB and EventBridge"),
        CheckovSkip(
            "CKV_AWS_115",
            "By design: it serves an operator page to the principals in viewer_principals; "
            "reserved concurrency would set account capacity aside for a handful of users.",
        ),
        _configuration_only_environment("table and bus names, the event source"),
    ],
}
