"""Lambda entry point: ``prospect_splitter.handler.handler``.

Triggered by an EventBridge rule on S3 "Object Created" events. The handler only wires
AWS clients and idempotency around ``service.split_upload``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import boto3
from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.config import Config
from prospect_contract.put_events import Bus, ClassicBus, V2Bus
from prospect_contract.rows import RowWriter
from prospect_contract.settings import SPLIT_RECORD_PREFIX
from upload_accounting import LedgerSettings, UploadLedger

from .config import Settings
from .publisher import EventPublisher
from .s3_event import MalformedS3Event, UploadRef, parse_s3_event
from .service import (
    SplitHooks,
    SplitResult,
    SplitterPorts,
    record_malformed_event,
    split_upload,
)

logger = Logger(service="prospect-splitter")

# botocore's standard mode retries whole-call throttles; entry-level failures inside a
# 200 response are EventPublisher's job.
_BOTO_CONFIG = Config(retries={"mode": "standard", "max_attempts": 5})


def _event_bus(settings: Settings, session: boto3.session.Session) -> Bus:
    # One HTTP connection per publishing worker (botocore's pool holds 10 by default).
    config = _BOTO_CONFIG.merge(
        Config(max_pool_connections=max(10, settings.publish_concurrency + 2))
    )
    if settings.event_bus_kind == "v2":
        return V2Bus(
            session.client("eventbridgev2", config=config),
            settings.event_bus_arn,
            settings.event_source,
        )
    return ClassicBus(
        session.client("events", config=config), settings.event_bus_name, settings.event_source
    )


def _summary_bus(settings: Settings, session: boto3.session.Session, rows: Bus) -> Bus:
    """Where the upload summary goes: SUMMARY_EVENT_BUS_NAME (classic), else the row bus."""
    if not settings.summary_event_bus_name:
        return rows
    return ClassicBus(
        session.client("events", config=_BOTO_CONFIG),
        settings.summary_event_bus_name,
        settings.event_source,
    )


def _ledger_hooks(session: boto3.session.Session) -> SplitHooks:
    """Open and close each upload on the upload ledger, when the stack has one."""
    if not LedgerSettings.configured():
        return SplitHooks()
    ledger = UploadLedger(
        LedgerSettings.from_env(),
        dynamodb=session.client("dynamodb", config=_BOTO_CONFIG),
        events=session.client("events", config=_BOTO_CONFIG),
    )

    def started(ref: UploadRef) -> None:
        ledger.begin(ref.upload_id, bucket=ref.bucket, key=ref.key)

    def finished(ref: UploadRef, result: SplitResult) -> None:
        ledger.split_finished(
            ref.upload_id,
            rows=result.rows,
            valid=result.valid,
            invalid=result.invalid,
            deduplicated=result.deduplicated,
            rejected_reason=result.reason if result.status == "rejected" else None,
            bucket=ref.bucket,
            key=ref.key,
            delivery=result.delivery if result.status == "completed" else None,
        )

    return SplitHooks(started=started, finished=finished)


@dataclass(frozen=True)
class Splitter:
    """Ports plus the idempotent entry point built from them."""

    ports: SplitterPorts
    idempotency_config: IdempotencyConfig
    split_once: Callable[..., dict[str, Any]]

    def process(self, event: dict[str, Any], context: LambdaContext | None) -> dict[str, Any]:
        """Handle one EventBridge S3 event; see ``service.split_upload``."""
        if context is not None:
            # Without this a timed-out run leaves its record INPROGRESS and every retry
            # fails with IdempotencyAlreadyInProgressError until the record expires.
            self.idempotency_config.register_lambda_context(context)
        try:
            ref = parse_s3_event(event)
        except MalformedS3Event as exc:
            return record_malformed_event(self.ports, event, str(exc)).as_dict()
        return self.split_once(upload=ref.to_payload())


def build_splitter(
    settings: Settings,
    *,
    session: boto3.session.Session | None = None,
    sleep: Callable[[float], None] = time.sleep,
    hooks: SplitHooks | None = None,
) -> Splitter:
    """Create clients, the publisher factory and the idempotent split function.

    ``hooks`` (see ``service.SplitHooks``) are called at the start and end of each split.
    """
    session = session or boto3.session.Session()
    bus = _event_bus(settings, session)
    dynamodb = session.client("dynamodb", config=_BOTO_CONFIG)
    summary_bus = _summary_bus(settings, session, bus)
    ports = SplitterPorts(
        s3=session.client("s3", config=_BOTO_CONFIG),
        failures_table=session.resource("dynamodb", config=_BOTO_CONFIG).Table(
            settings.failures_table_name
        ),
        max_upload_bytes=settings.max_upload_bytes,
        new_row_writer=lambda: RowWriter(dynamodb, settings.rows_table_name),
        row_retention_days=settings.row_retention_days,
        max_rows=settings.max_rows,
        delivery=settings.delivery,
        batch_min_rows=settings.batch_min_rows,
        hooks=hooks or _ledger_hooks(session),
        new_publisher=lambda: EventPublisher(
            bus, concurrency=settings.publish_concurrency, sleep=sleep
        ),
        # The summary is one event: sent inline, without a worker pool.
        new_summary_publisher=lambda: EventPublisher(summary_bus, concurrency=1, sleep=sleep),
    )
    config = IdempotencyConfig(
        # The key is the object identity only: bucket, key and version-id-or-etag.
        event_key_jmespath="[bucket, key, object_version]",
        raise_on_no_idempotency_key=True,
        expires_after_seconds=settings.idempotency_expires_after_seconds,
    )
    persistence = DynamoDBPersistenceLayer(
        table_name=settings.idempotency_table_name,
        boto3_client=session.client("dynamodb", config=_BOTO_CONFIG),
    )

    @idempotent_function(
        data_keyword_argument="upload",
        config=config,
        persistence_store=persistence,
        key_prefix=SPLIT_RECORD_PREFIX,
    )
    def split_once(*, upload: dict[str, Any]) -> dict[str, Any]:
        return split_upload(ports, UploadRef.from_payload(upload)).as_dict()

    return Splitter(ports=ports, idempotency_config=config, split_once=split_once)


@functools.lru_cache(maxsize=4)
def _splitter_for(settings: Settings) -> Splitter:
    # Built once per execution environment (settings never change inside one).
    return build_splitter(settings)


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Split the uploaded CSV named by ``event`` into row events.

    Returns ``{"upload_id","rows","valid","invalid","deduplicated","status"}`` (plus
    ``reason`` when rejected). Raises only when the upload must be retried (PutEventsError,
    ObjectChangedDuringProcessing, AWS errors).
    """
    return _splitter_for(Settings.from_env()).process(event, context)
