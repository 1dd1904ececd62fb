"""Runtime settings read from the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass

from prospect_contract.errors import ConfigurationError
from prospect_contract.events import (
    DEFAULT_BATCH_MIN_ROWS,
    DELIVERY_MODES,
    EVENT_SOURCE,
    REALTIME,
)
from prospect_contract.rows import (
    DEFAULT_ROW_RETENTION_DAYS,
    ROW_RETENTION_DAYS_ENV,
    ROWS_TABLE_ENV,
)
from prospect_contract.settings import positive_int, required

DEFAULT_EVENT_SOURCE = EVENT_SOURCE
DEFAULT_MAX_UPLOAD_BYTES = 50 * 1024 * 1024
# S3 redelivers within minutes and Lambda's async queue keeps an event for at most
# 6 hours, so a day comfortably covers every redelivery of the same object version.
DEFAULT_IDEMPOTENCY_EXPIRES_AFTER_SECONDS = 24 * 60 * 60
# The cost guard: an upload with more data rows is rejected before any row is published.
DEFAULT_MAX_ROWS = 100_000
# PutEvents calls in flight at once. At 25 ms a call, 4 workers send 160 calls/s: 1,600
# rows/s on a classic bus (10 entries a call), 1.6x the 1,000 rows/s target, so a 500k-row
# file takes about 5 minutes of Lambda's 15 and still fits if latency triples. More workers
# buy little on a 512 MB function (about 0.3 vCPU), where parsing, JSON and request signing
# become the bound; see bench/README.md for the throughput figures.
DEFAULT_PUBLISH_CONCURRENCY = 4
MAX_PUBLISH_CONCURRENCY = 64
BUS_KINDS = ("classic", "v2")


def _delivery() -> str:
    # Unset: realtime, so a splitter deployed without a batch step never marks a row for one.
    # The stack always sets it (context ``delivery``, default ``auto``).
    delivery = os.environ.get("DELIVERY", "").strip().lower() or REALTIME
    if delivery not in DELIVERY_MODES:
        raise ConfigurationError(
            f"DELIVERY must be one of {', '.join(DELIVERY_MODES)}, got {delivery!r}"
        )
    return delivery


def _bus_kind() -> str:
    kind = os.environ.get("EVENT_BUS_KIND", "").strip().lower() or "classic"
    if kind not in BUS_KINDS:
        raise ConfigurationError(
            f"EVENT_BUS_KIND must be one of {', '.join(BUS_KINDS)}, got {kind!r}"
        )
    return kind


@dataclass(frozen=True)
class Settings:
    """Splitter settings.

    Environment variables (defaults in brackets):
    - EVENT_BUS_KIND ["classic"]: "classic" (boto3 ``events``) or "v2" (``eventbridgev2``,
      each row carries ``SystemMetadata.DeduplicationId = "<upload_id>#<row_number>"``).
    - EVENT_BUS_NAME (required when classic): bus that receives row events (and summary
      events unless SUMMARY_EVENT_BUS_NAME names another).
    - EVENT_BUS_ARN (required when v2): ARN of the v2 bus (``...:event-busv2/NAME/ID``).
    - SUMMARY_EVENT_BUS_NAME [unset]: a classic bus for the ``UPLOAD_SUMMARIZED``
      event (boto3 ``events``, no deduplication id). Unset: the summary goes where the
      rows go. The Prospect stack sets it so rows ride a v2 bus while summaries reach
      the classic bus that carries the upload-level alert rules.
    - FAILURES_TABLE_NAME (required): table for invalid rows, upload failures and summaries
      (ids and codes only).
    - ROWS_TABLE_NAME (required): RowsTable (``prospect_contract.rows``), where every data
      row's values are written before its event (which carries ids only) is published.
    - ROW_RETENTION_DAYS [30; the stack sets ``upload_retention_days``]: a row item's TTL.
    - IDEMPOTENCY_TABLE_NAME (required): Powertools idempotency table (pk ``id``,
      TTL ``expiration``).
    - MAX_UPLOAD_BYTES [52428800 = 50 MiB]: larger objects are rejected unread.
    - MAX_ROWS [100000]: uploads with more data rows are rejected (TooManyRows) before
      any row is published.
    - PUBLISH_CONCURRENCY [4, at most 64]: PutEvents calls in flight at once; 1 = serial.
    - EVENT_SOURCE [``prospect_contract.events.EVENT_SOURCE``]: Source of every published
      event.
    - IDEMPOTENCY_EXPIRES_AFTER_SECONDS [86400]: how long a processed upload is remembered.
    - DELIVERY ["realtime"; the stack sets its context ``delivery``, default ``auto``]
      (issue 19): ``realtime`` (every row to the realtime step), ``batch``
      (every row marked ``"delivery": "batch"``, for the Message Batches step) or ``auto``
      (batch when the upload has at least BATCH_MIN_ROWS valid rows, else realtime).
    - BATCH_MIN_ROWS [2000]: the fewest valid rows an upload sent by batch under ``auto``.
    """

    failures_table_name: str
    idempotency_table_name: str
    rows_table_name: str = ""
    row_retention_days: int = DEFAULT_ROW_RETENTION_DAYS
    event_bus_name: str = ""
    event_bus_kind: str = "classic"
    event_bus_arn: str = ""
    summary_event_bus_name: str = ""
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    max_rows: int = DEFAULT_MAX_ROWS
    publish_concurrency: int = DEFAULT_PUBLISH_CONCURRENCY
    event_source: str = DEFAULT_EVENT_SOURCE
    idempotency_expires_after_seconds: int = DEFAULT_IDEMPOTENCY_EXPIRES_AFTER_SECONDS
    delivery: str = REALTIME
    batch_min_rows: int = DEFAULT_BATCH_MIN_ROWS

    @classmethod
    def from_env(cls) -> Settings:
        """Read settings from ``os.environ``; raises ConfigurationError when incomplete."""
        kind = _bus_kind()
        return cls(
            event_bus_kind=kind,
            event_bus_name=required("EVENT_BUS_NAME") if kind == "classic" else "",
            event_bus_arn=required("EVENT_BUS_ARN") if kind == "v2" else "",
            summary_event_bus_name=os.environ.get("SUMMARY_EVENT_BUS_NAME", "").strip(),
            failures_table_name=required("FAILURES_TABLE_NAME"),
            idempotency_table_name=required("IDEMPOTENCY_TABLE_NAME"),
            rows_table_name=required(ROWS_TABLE_ENV),
            row_retention_days=positive_int(ROW_RETENTION_DAYS_ENV, DEFAULT_ROW_RETENTION_DAYS),
            max_upload_bytes=positive_int("MAX_UPLOAD_BYTES", DEFAULT_MAX_UPLOAD_BYTES),
            max_rows=positive_int("MAX_ROWS", DEFAULT_MAX_ROWS),
            publish_concurrency=positive_int(
                "PUBLISH_CONCURRENCY", DEFAULT_PUBLISH_CONCURRENCY, MAX_PUBLISH_CONCURRENCY
            ),
            event_source=os.environ.get("EVENT_SOURCE", "").strip() or DEFAULT_EVENT_SOURCE,
            idempotency_expires_after_seconds=positive_int(
                "IDEMPOTENCY_EXPIRES_AFTER_SECONDS", DEFAULT_IDEMPOTENCY_EXPIRES_AFTER_SECONDS
            ),
            delivery=_delivery(),
            batch_min_rows=positive_int("BATCH_MIN_ROWS", DEFAULT_BATCH_MIN_ROWS),
        )
