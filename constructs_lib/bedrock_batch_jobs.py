"""``BedrockBatchJobs``: what a model step's Bedrock batch inference jobs need (issue 37).

- ``bucket``: the jobs' JSONL input and output, under ``prefix`` (``input/``, ``output/``).
  Made by default (:func:`.defaults.bedrock_batch_bucket_props`: S3-managed encryption, TLS
  only, no public access, objects expired after ``expire_after`` as the backstop of the
  runtime's own delete after collection), or a bucket of yours (``batch_bucket``), which
  keeps its own settings.
- ``job_role``: the service role each job runs as, assumed by ``bedrock.amazonaws.com``
  only for model invocation jobs of this account (``aws:SourceAccount``,
  ``aws:SourceArn``); it may read only the input prefix, write only the output prefix and
  invoke only the step's model or inference profile (the caller grants the last, as it
  grants its function).
- :meth:`grant_submit`: what the step's function needs: ``iam:PassRole`` on ``job_role``
  only (to ``bedrock.amazonaws.com``), ``bedrock:CreateModelInvocationJob`` on this
  account's jobs and the model, ``Get``/``Stop`` on this account's jobs,
  ``ListModelInvocationJobs`` (which IAM scopes to ``*`` only), and the bucket's two
  prefixes (put and delete the input, read and delete the output).
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Duration, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from . import defaults
from .checkov_acknowledgments import BEDROCK_BATCH_JOBS, acknowledge_checkov_findings

#: The key prefixes under ``prefix``, as the runtime writes them
#: (``lambda_src/model_step/bedrock_batches.py``).
INPUT = "input/"
OUTPUT = "output/"
#: The job actions that take a job ARN.
JOB_ACTIONS = ("bedrock:GetModelInvocationJob", "bedrock:StopModelInvocationJob")


class BedrockBatchJobs(Construct):
    """The bucket and service role of a step's Bedrock batch jobs (see the module docstring).

    :param bucket: the bucket to use; default None: one is made.
    :param prefix: the key prefix of the jobs' objects. Default ``bedrock-batch/``.
    :param expire_after: lifecycle expiry of every object of a bucket made here (a whole
        number of days). Required when ``bucket`` is None.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        bucket: s3.IBucket | None = None,
        prefix: str = defaults.BEDROCK_BATCH_PREFIX,
        expire_after: Duration | None = None,
    ) -> None:
        super().__init__(scope, id)
        acknowledge_checkov_findings(self, BEDROCK_BATCH_JOBS)
        self.prefix = prefix
        if bucket is None:
            if expire_after is None:
                raise ValueError("BedrockBatchJobs: expire_after is required without a bucket")
            made = s3.Bucket(
                self, "Bucket", **defaults.bedrock_batch_bucket_props(expire_after, prefix)
            )
            Validations.of(made).acknowledge(
                Acknowledgment(
                    id="AwsSolutions-S1",
                    reason="Holds only Bedrock batch job input and output for the hours a "
                    "job runs: the runtime deletes each job's objects once collected and a "
                    "lifecycle rule expires the rest. Only the step's function and its job "
                    "role reach it (IAM); CloudTrail data events audit access where needed.",
                )
            )
            bucket = made
        #: The bucket of the jobs' input and output.
        self.bucket: s3.IBucket = bucket
        stack = Stack.of(self)
        jobs = stack.format_arn(
            service="bedrock", resource="model-invocation-job", resource_name="*"
        )
        #: The role each job runs as.
        self.job_role = iam.Role(
            self,
            "JobRole",
            description="Bedrock batch inference jobs of one model step: reads their input, "
            "writes their output, invokes the step's model",
            assumed_by=iam.ServicePrincipal(
                "bedrock.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {"aws:SourceArn": jobs},
                },
            ),
        )
        self.job_role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject"],
                resources=[self.bucket.arn_for_objects(f"{prefix}{INPUT}*")],
            )
        )
        self.job_role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:PutObject"],
                resources=[self.bucket.arn_for_objects(f"{prefix}{OUTPUT}*")],
            )
        )
        self.job_role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[self.bucket.bucket_arn],
                conditions={
                    "StringLike": {"s3:prefix": [f"{prefix}{INPUT}*", f"{prefix}{OUTPUT}*"]}
                },
            )
        )
        self._jobs_arn = jobs
        self._acknowledge_prefixes(self.job_role)

    def grant_submit(self, grantee: iam.IRole, model_arns: list[str]) -> None:
        """What a function needs to run jobs as :attr:`job_role` on ``model_arns`` (see the
        module docstring)."""
        grantee.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=[self.job_role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": "bedrock.amazonaws.com"}},
            )
        )
        grantee.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["bedrock:CreateModelInvocationJob"],
                resources=[self._jobs_arn, *model_arns],
            )
        )
        grantee.add_to_principal_policy(
            iam.PolicyStatement(actions=list(JOB_ACTIONS), resources=[self._jobs_arn])
        )
        # ListModelInvocationJobs has no resource type: IAM accepts only "*" for it.
        grantee.add_to_principal_policy(
            iam.PolicyStatement(actions=["bedrock:ListModelInvocationJobs"], resources=["*"])
        )
        # The input is written, read back for the records a job left unanswered, and
        # deleted; the output read and deleted (listed under its prefix to find the job's
        # folder). Named actions only: the bucket's grant_read would add s3:List*, s3:GetBucket*.
        grantee.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:PutObject", "s3:GetObject", "s3:DeleteObject"],
                resources=[self.bucket.arn_for_objects(f"{self.prefix}{INPUT}*")],
            )
        )
        grantee.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject", "s3:DeleteObject"],
                resources=[self.bucket.arn_for_objects(f"{self.prefix}{OUTPUT}*")],
            )
        )
        grantee.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[self.bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{self.prefix}{OUTPUT}*"]}},
            )
        )
        self._acknowledge_prefixes(grantee)

    def _acknowledge_prefixes(self, role: iam.IRole) -> None:
        """cdk-nag's IAM5 findings on this role's wildcards, each with its reason."""
        stack = Stack.of(self)
        reasons = {
            _nag(stack, self.bucket.arn_for_objects(f"{self.prefix}{INPUT}*")): "Bedrock batch "
            "input: one JSONL object per submission, named by the runtime at run time, so the "
            "step's input prefix is granted, never the bucket.",
            _nag(stack, self.bucket.arn_for_objects(f"{self.prefix}{OUTPUT}*")): "Bedrock batch "
            "output: Bedrock names each job's output folder after the job id it picks, so the "
            "step's output prefix is granted, never the bucket.",
        }
        if role is not self.job_role:
            reasons[_nag(stack, self._jobs_arn)] = (
                "bedrock:Get/StopModelInvocationJob: a job's id is chosen by Bedrock at "
                "create time, so the account's model-invocation-job ARNs in this region are "
                "granted; CreateModelInvocationJob is also limited to the step's model."
            )
            reasons["*"] = (
                "bedrock:ListModelInvocationJobs has no resource type, so IAM accepts only "
                "Resource '*' for it (it lists job summaries, no records); with tracing=True "
                "X-Ray's two write actions need '*' too. Every other statement names resources."
            )
        for resource, reason in reasons.items():
            Validations.of(role).acknowledge(
                Acknowledgment(id=f"AwsSolutions-IAM5[Resource::{resource}]", reason=reason)
            )


def _nag(stack: Stack, value: str) -> str:
    """``value`` as cdk-nag names a resource in a finding: tokens as ``<Logical.Attr>``,
    ``<AWS::Partition>``."""
    resolved = stack.resolve(value)
    return _nag_text(resolved)


def _nag_text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        if "Ref" in value:
            return f"<{value['Ref']}>"
        if "Fn::GetAtt" in value:
            return "<" + ".".join(value["Fn::GetAtt"]) + ">"
        if "Fn::Join" in value:
            separator, parts = value["Fn::Join"]
            return str(separator).join(_nag_text(part) for part in parts)
    return str(value)
