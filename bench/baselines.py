"""The baselines each benchmark compares against: what teams commonly write instead.

- :class:`CheckThenActHandler`: GetItem; if missing, call the model (SDK default retries);
  PutItem. Not atomic: concurrent duplicates all see "missing" and all call the model.
- :class:`SdkRetriesHandler`: no idempotency at all; the SDK's default ``max_retries=2``
  inside each of Lambda's attempts.
- :func:`add_plain_l2_step`: the same AWS resources as one ``IdempotentModelStep`` written
  directly with aws-cdk-lib L2s (for the synth benchmark).
- :func:`naive_split`: the prospect CSV read whole into memory (for the splitter benchmark).
"""

from __future__ import annotations

import csv
import io
import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.harness import NAIVE_TABLE, PROMPT_VERSION, SYSTEM_PROMPT

MODEL_ID = "claude-haiku-5-5"
MAX_TOKENS = 1024


def user_message(detail: Mapping[str, Any]) -> str:
    """The same user message ``ModelStep`` sends by default, so the fake API sees the same
    request from every handler."""
    return json.dumps(detail, sort_keys=True, ensure_ascii=False, default=str)


class _ModelCaller:
    """An ``anthropic.Anthropic`` client with the SDK defaults (``max_retries=2``), created once
    per "container" on first use, as a module-level client would be."""

    def __init__(self) -> None:
        self._client: Any = None
        self._lock = threading.Lock()

    def ask(self, detail: Mapping[str, Any]) -> str:
        with self._lock:
            if self._client is None:
                import anthropic

                self._client = anthropic.Anthropic()  # default max_retries=2
        message = self._client.messages.create(
            model=MODEL_ID,
            max_tokens=MAX_TOKENS,
            system=SYSTEM_PROMPT,
            messages=[{"role": "user", "content": user_message(detail)}],
        )
        return "".join(getattr(block, "text", "") for block in message.content)


class SdkRetriesHandler:
    """Baseline (c): no idempotency; SDK retries nested inside Lambda's attempts, so one
    delivery can cost up to 3 SDK requests x 3 Lambda attempts = 9 model requests."""

    def __init__(self) -> None:
        self._model = _ModelCaller()

    def __call__(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        return {"status": "completed", "answer": self._model.ask(event["detail"])}


class CheckThenActHandler:
    """Baseline (b): the naive "have we done this already?" handler.

    ``get_item`` the business key; if absent call the model (SDK default retries) and
    ``put_item`` the answer. Sequential duplicates are served from the table, but nothing
    stops two concurrent deliveries from both missing and both calling the model.
    """

    def __init__(self, session: Any, table_name: str = NAIVE_TABLE) -> None:
        self._dynamodb = session.client("dynamodb")
        self._table = table_name
        self._model = _ModelCaller()

    def __call__(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        detail = event["detail"]
        key = {"id": {"S": f"{detail['upload_id']}#{detail['row_number']}#{PROMPT_VERSION}"}}
        found = self._dynamodb.get_item(TableName=self._table, Key=key).get("Item")
        if found:
            return {"status": "completed", "answer": found["answer"]["S"]}
        answer = self._model.ask(detail)
        self._dynamodb.put_item(TableName=self._table, Item={**key, "answer": {"S": answer}})
        return {"status": "completed", "answer": answer}


# --------------------------------------------------------------------------- CDK baseline
def add_plain_l2_step(stack: Any, id: str, *, secret: Any, code_dir: Path) -> None:
    """One step's resources written by hand with aws-cdk-lib L2s: rule + function (+ role,
    log group) + table + queue + event invoke config + the same three alarms, with the same
    grants. No validation, no retry arithmetic, no defaults module."""
    from aws_cdk import Duration
    from aws_cdk import aws_cloudwatch as cloudwatch
    from aws_cdk import aws_dynamodb as dynamodb
    from aws_cdk import aws_events as events
    from aws_cdk import aws_events_targets as targets
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk import aws_lambda_destinations as destinations
    from aws_cdk import aws_logs as logs
    from aws_cdk import aws_sqs as sqs
    from constructs import Construct

    scope = Construct(stack, id)
    table = dynamodb.Table(
        scope,
        "Table",
        partition_key=dynamodb.Attribute(name="id", type=dynamodb.AttributeType.STRING),
        time_to_live_attribute="expiration",
        billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
    )
    queue = sqs.Queue(scope, "DeadLetterQueue", encryption=sqs.QueueEncryption.SQS_MANAGED)
    log_group = logs.LogGroup(scope, "LogGroup", retention=logs.RetentionDays.ONE_MONTH)
    function = lambda_.Function(
        scope,
        "Function",
        runtime=lambda_.Runtime.PYTHON_3_13,
        handler="model_step.handler.handler",
        code=lambda_.Code.from_asset(str(code_dir)),
        timeout=Duration.seconds(90),
        memory_size=512,
        log_group=log_group,
        environment={
            "IDEMPOTENCY_TABLE_NAME": table.table_name,
            "DEAD_LETTER_QUEUE_URL": queue.queue_url,
            "ANTHROPIC_API_KEY_SECRET_ARN": secret.secret_arn,
        },
    )
    table.grant_read_write_data(function)
    queue.grant_send_messages(function)
    secret.grant_read(function)
    function.configure_async_invoke(
        retry_attempts=2,
        max_event_age=Duration.hours(6),
        on_failure=destinations.SqsDestination(queue),
    )
    rule = events.Rule(
        scope, "Rule", event_pattern=events.EventPattern(source=[f"bench.{id.lower()}"])
    )
    rule.add_target(targets.LambdaFunction(function, dead_letter_queue=queue, retry_attempts=185))
    dims = {"RuleName": rule.rule_name}
    for name, metric in (
        (
            "SentToDlq",
            cloudwatch.Metric(
                namespace="AWS/Events",
                metric_name="InvocationsSentToDlq",
                dimensions_map=dims,
                statistic="Sum",
            ),
        ),
        (
            "FailedToBeSentToDlq",
            cloudwatch.Metric(
                namespace="AWS/Events",
                metric_name="InvocationsFailedToBeSentToDlq",
                dimensions_map=dims,
                statistic="Sum",
            ),
        ),
        ("DeadLetters", queue.metric_number_of_messages_sent(statistic="Sum")),
    ):
        cloudwatch.Alarm(
            scope,
            f"{name}Alarm",
            metric=metric,
            threshold=1,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )


# --------------------------------------------------------------------------- splitter baseline
def naive_split(
    s3: Any,
    events: Any,
    *,
    bucket: str,
    key: str,
    bus_name: str,
    source: str,
    dynamodb: Any,
    rows_table: str,
) -> dict[str, int]:
    """The splitter as often first written: the whole object read into memory
    (``body.read().decode()``), every record parsed into a list, then each row validated and
    published with the SAME validation, RowsTable writes (25 rows, then their events) and
    PutEvents batching as the real splitter, so the only difference measured is how the
    object is read. No idempotency, no failure records."""
    from prospect_contract.put_events import ClassicBus
    from prospect_contract.rows import RowWriter, valid_row_item
    from prospect_splitter.publisher import EventPublisher, RowsThenEvents
    from prospect_splitter.validation import (
        header_matches,
        prospect_detail,
        prospect_values,
        validate_row,
    )

    text = s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode("utf-8-sig")
    records = [fields for fields in csv.reader(io.StringIO(text, newline="")) if fields]
    if not records or not header_matches(records[0]):
        raise ValueError("missing header")
    publisher = EventPublisher(ClassicBus(events, bus_name, source))  # serial, as it was
    ordered = RowsThenEvents(RowWriter(dynamodb, rows_table), publisher)
    valid = invalid = 0
    for row_number, fields in enumerate(records[1:], start=1):
        if validate_row(fields) is None:
            valid += 1
            item = valid_row_item(key, row_number, prospect_values(fields), 2_000_000_000)
            ordered.add(item, (prospect_detail(key, row_number), None))
        else:
            invalid += 1
    ordered.flush()
    publisher.flush()
    return {"rows": valid + invalid, "valid": valid, "invalid": invalid}
