"""One way to build every Python Lambda in the library: own role, own log group, local bundling."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from aws_cdk import Acknowledgment, Duration, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from . import defaults
from .bundling.local_pip import python_lambda_code


def python_function(
    scope: Construct,
    id: str,
    *,
    packages: Sequence[Path],
    handler: str,
    requirements: Sequence[Path] = (),
    description: str,
    environment: Mapping[str, str],
    architecture: lambda_.Architecture = lambda_.Architecture.X86_64,
    timeout: Duration = defaults.DEFAULT_TIMEOUT,
    memory_size: int = defaults.DEFAULT_MEMORY_SIZE,
    log_retention: logs.RetentionDays = defaults.DEFAULT_LOG_RETENTION,
    tracing: lambda_.Tracing | None = None,
) -> lambda_.Function:
    """A Python 3.13 function whose role can only write its own logs until granted more.

    Creates ``{id}LogGroup`` (retention set, so the role needs no CreateLogGroup),
    ``{id}ServiceRole`` (no managed policies: AWSLambdaBasicExecutionRole would
    allow writing to every log group) and the function ``{id}``, in ``scope``.
    Callers add their own grants to ``function.role``.

    :param packages: runtime package directories copied to the asset root.
    :param handler: e.g. ``"model_step.handler.handler"``.
    :param requirements: pinned requirements files. Default: none (copy only).
    :param timeout: default 90 seconds. :param memory_size: default 512 MB.
    :param log_retention: default one month.
    :param tracing: X-Ray tracing mode. Default: none (Lambda's PassThrough, no X-Ray grant).
    """
    log_group = logs.LogGroup(scope, f"{id}LogGroup", **defaults.log_group_props(log_retention))
    role = iam.Role(
        scope,
        f"{id}ServiceRole",
        assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        description=description[:1000],
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            actions=["logs:CreateLogStream", "logs:PutLogEvents"],
            resources=[log_group.log_group_arn],
        )
    )
    function = lambda_.Function(
        scope,
        id,
        runtime=defaults.LAMBDA_RUNTIME,
        architecture=architecture,
        handler=handler,
        code=python_lambda_code(scope, packages, architecture, requirements),
        timeout=timeout,
        memory_size=memory_size,
        role=role,
        log_group=log_group,
        description=description,
        environment=dict(environment),
        tracing=tracing,
    )
    Validations.of(function).acknowledge(
        Acknowledgment(
            id="AwsSolutions-L1",
            reason="Python 3.13 is pinned on purpose: the bundler fetches cp313 "
            "manylinux wheels (pydantic-core, jiter) that must match the runtime.",
        )
    )
    return function
