"""Least-privilege SQS grants: exactly the actions the code (or Lambda's poller) calls.

CDK's ``queue.grant_send_messages`` adds ``sqs:GetQueueAttributes`` and
``sqs:GetQueueUrl``, and ``SqsEventSource`` adds ``grant_consume_messages``
(``ChangeMessageVisibility`` and ``GetQueueUrl`` beside what the poller needs). Nothing
here calls those: every sender is given its queue's URL, and Lambda's poller needs
``ReceiveMessage``, ``DeleteMessage`` and ``GetQueueAttributes`` (the actions of AWS's
``AWSLambdaSQSQueueExecutionRole``). The IAM-checked local run reports any grant no path
uses (tests/local_run/test_grants_used.py).
"""

from __future__ import annotations

from typing import Any

import jsii
from aws_cdk import Duration, Names
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

#: What Lambda's event source mapping calls with the function's role.
POLLER_ACTIONS = ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes")


def grant_send(queue: sqs.IQueue, grantee: iam.IGrantable) -> None:
    """``sqs:SendMessage`` on ``queue`` (and its KMS key's encrypt actions, as CDK grants
    them, when it has one)."""
    iam.Grant.add_to_principal_or_resource(
        grantee=grantee,
        actions=["sqs:SendMessage"],
        resource_arns=[queue.queue_arn],
        resource=queue,
    )
    if queue.encryption_master_key is not None:
        queue.encryption_master_key.grant_encrypt_decrypt(grantee)


def consume(
    function: lambda_.IFunction,
    queue: sqs.IQueue,
    *,
    batch_size: int,
    max_concurrency: int | None = None,
    change_visibility: bool = False,
    max_batching_window: Duration | None = None,
) -> lambda_.EventSourceMapping:
    """An event source mapping from ``queue`` to ``function`` with partial batch responses,
    as ``SqsEventSource`` makes it (same construct id, so the same logical id), granting
    only the poller's actions, plus ``sqs:ChangeMessageVisibility`` when the handler
    itself spaces retries (``change_visibility``, default False). ``max_batching_window``
    (default none) lets the mapping gather records before it invokes."""
    mapping = function.add_event_source_mapping(
        f"SqsEventSource:{Names.node_unique_id(queue.node)}",
        event_source_arn=queue.queue_arn,
        batch_size=batch_size,
        report_batch_item_failures=True,
        max_concurrency=max_concurrency,
        max_batching_window=max_batching_window,
    )
    actions = [*POLLER_ACTIONS]
    if change_visibility:
        actions.append("sqs:ChangeMessageVisibility")
    iam.Grant.add_to_principal_or_resource(
        grantee=function, actions=actions, resource_arns=[queue.queue_arn], resource=queue
    )
    if queue.encryption_master_key is not None:
        queue.encryption_master_key.grant_decrypt(function)
    return mapping


@jsii.implements(lambda_.IDestination)
class SendOnlyQueueDestination:
    """An async-invoke destination on ``queue`` whose grant is ``sqs:SendMessage`` alone
    (``SqsDestination`` uses ``grant_send_messages``). Lambda sends the record with the
    function's role."""

    def __init__(self, queue: sqs.IQueue) -> None:
        self._queue = queue

    def bind(
        self, _scope: Construct, fn: lambda_.IFunction, *, type: Any = None
    ) -> lambda_.DestinationConfig:
        grant_send(self._queue, fn)
        return lambda_.DestinationConfig(destination=self._queue.queue_arn)
