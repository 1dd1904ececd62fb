"""The splitter's business logic: validate, publish, record. Callable without Lambda."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from aws_lambda_powertools import Logger
from prospect_contract.events import (
    AUTO,
    BATCH,
    DEFAULT_BATCH_MIN_ROWS,
    REALTIME,
    ROW_DELIVERY_FIELD,
    UPLOAD_SUMMARIZED,
    RowValidatedDetail,
    SplitStatus,
    UploadSummarizedDetail,
    row_deduplication_id,
    summary_deduplication_id,
)
from prospect_contract.rows import (
    RowWriter,
    csv_text,
    invalid_row_item,
    valid_row_item,
)

from .config import DEFAULT_MAX_ROWS
from .csv_stream import UploadRejected, iter_records
from .failures import FailureWriter, put_summary, put_upload_failure
from .objects import ObjectChangedDuringProcessing, iter_object_chunks, object_size
from .publisher import EventPublisher, RowsThenEvents
from .s3_event import UploadRef, malformed_upload_id
from .validation import prospect_detail, prospect_values, validate_row

logger = Logger(service="prospect-splitter", child=True)


@dataclass(frozen=True)
class SplitResult:
    """Outcome of one upload; ``as_dict`` is the handler's return value."""

    upload_id: str
    rows: int
    valid: int
    invalid: int
    status: SplitStatus
    reason: str | None = None
    # Rows a v2 bus answered DEDUPLICATED (already published within its 300 s window);
    # they count in ``valid`` too. Always 0 on a classic bus.
    deduplicated: int = 0
    error_code: str | None = None  # why a rejected upload was rejected
    #: How the valid rows were sent: ``realtime`` or ``batch`` (issue 19).
    delivery: str = REALTIME

    def as_dict(self) -> dict[str, Any]:
        """``{"upload_id","rows","valid","invalid","deduplicated","status"}`` plus ``reason``
        when rejected."""
        result: dict[str, Any] = {
            "upload_id": self.upload_id,
            "rows": self.rows,
            "valid": self.valid,
            "invalid": self.invalid,
            "deduplicated": self.deduplicated,
            "status": self.status,
        }
        if self.reason is not None:
            result["reason"] = self.reason
        return result

    def summary_detail(self, bucket: str, key: str) -> UploadSummarizedDetail:
        """The ``Prospect Upload Summarized`` detail: ``as_dict`` plus the object."""
        return cast(UploadSummarizedDetail, {**self.as_dict(), "bucket": bucket, "key": key})


@dataclass(frozen=True)
class SplitHooks:
    """Extension points around one split; the defaults do nothing.

    - ``started(ref)``: the file passed the counting pass (size, encoding, header,
      shape and MAX_ROWS checks); called once before the first row is published.
    - ``finished(ref, result)``: called once the summary is recorded and published, for a
      completed upload (counts rows / valid / invalid / deduplicated) and for a rejected
      one (all zero, ``result.error_code`` says why). Not called for an event that names
      no object (``record_malformed_event``).
    An exception from a hook propagates, so the upload is retried as a whole.
    """

    started: Callable[[UploadRef], None] = lambda ref: None
    finished: Callable[[UploadRef, SplitResult], None] = lambda ref, result: None


@dataclass(frozen=True)
class SplitterPorts:
    """The AWS resources the splitter talks to, and its limits."""

    s3: Any
    failures_table: Any
    max_upload_bytes: int
    new_publisher: Callable[[], EventPublisher]  # a fresh buffer (and pool) per upload
    # RowsTable (prospect_contract.rows): each row's values, written before its event.
    new_row_writer: Callable[[], RowWriter]
    row_retention_days: int
    max_rows: int = DEFAULT_MAX_ROWS
    hooks: SplitHooks = field(default_factory=SplitHooks)
    # Where the "Prospect Upload Summarized" event goes; None: the row publisher's bus.
    new_summary_publisher: Callable[[], EventPublisher] | None = None
    # Message Batches delivery (issue 19): ``realtime``, ``batch`` or ``auto`` (batch from
    # ``batch_min_rows`` valid rows on).
    delivery: str = REALTIME
    batch_min_rows: int = DEFAULT_BATCH_MIN_ROWS

    def delivery_for(self, valid_rows: int) -> str:
        """How an upload with ``valid_rows`` valid rows is sent: ``realtime`` or ``batch``."""
        if self.delivery == AUTO:
            return BATCH if valid_rows >= self.batch_min_rows else REALTIME
        return self.delivery

    def summary_publisher(self) -> EventPublisher:
        return (self.new_summary_publisher or self.new_publisher)()


def _count_data_rows(ports: SplitterPorts, ref: UploadRef) -> tuple[int, int]:
    """Pass 1: decode and parse the whole file without publishing anything; ``(data rows,
    valid rows)``.

    Streaming the object twice costs a second GetObject but guarantees that an
    undecodable byte, an oversized line or a broken record near the end, or more than
    MAX_ROWS rows, rejects the upload before a single row event exists, so published +
    invalid = data rows always holds. It stops reading at row MAX_ROWS + 1. The valid rows
    are counted too, so the delivery (issue 19: batch from ``batch_min_rows`` valid rows
    under ``auto``) is known before the first row is published.
    """
    chunks = iter_object_chunks(ports.s3, ref)
    records = iter_records(chunks, ports.max_upload_bytes)
    count = valid = 0
    try:
        for record in records:
            count += 1
            if validate_row(record.fields) is None:
                valid += 1
            if count > ports.max_rows:
                raise UploadRejected(
                    "TooManyRows",
                    f"more than {ports.max_rows} data rows (limit MAX_ROWS={ports.max_rows})",
                )
    finally:
        records.close()  # closes the S3 body when we stop early
        chunks.close()
    return count, valid


def _publish_summary(ports: SplitterPorts, summary: UploadSummarizedDetail) -> None:
    with ports.summary_publisher() as publisher:
        publisher.add(UPLOAD_SUMMARIZED, summary, summary_deduplication_id(summary["upload_id"]))
        publisher.flush()


def _summarise(ports: SplitterPorts, ref: UploadRef, result: SplitResult) -> None:
    put_summary(ports.failures_table, ref, result.as_dict())
    _publish_summary(ports, result.summary_detail(ref.bucket, ref.key))


def _reject(ports: SplitterPorts, ref: UploadRef, rejection: UploadRejected) -> SplitResult:
    logger.warning(
        "upload rejected", extra={"upload_id": ref.upload_id, "error_code": rejection.error_code}
    )
    put_upload_failure(ports.failures_table, ref.upload_id, rejection.error_code, rejection.reason)
    result = SplitResult(
        ref.upload_id, 0, 0, 0, "rejected", rejection.reason, error_code=rejection.error_code
    )
    _summarise(ports, ref, result)
    ports.hooks.finished(ref, result)
    return result


def _publish_rows(ports: SplitterPorts, ref: UploadRef, delivery: str) -> SplitResult:
    """Pass 2: validate each row, write its values to RowsTable, record invalid ones, publish
    valid ones in parallel (each marked ``"delivery": "batch"`` when ``delivery`` is batch).

    Events carry ids only (issue 18). Rows are written 25 at a time, and a row's event is
    handed to the publisher only after the write that holds it returned, so the classifier
    never reads a row that is not there yet.
    """
    upload_id = ref.upload_id
    marker = {ROW_DELIVERY_FIELD: BATCH} if delivery == BATCH else {}
    expires_at = int(time.time()) + ports.row_retention_days * 86400
    rows = valid = invalid = 0
    with ports.new_publisher() as publisher, FailureWriter(ports.failures_table) as failures:
        ordered = RowsThenEvents(ports.new_row_writer(), publisher)
        chunks = iter_object_chunks(ports.s3, ref)
        try:
            for record in iter_records(chunks, ports.max_upload_bytes):
                rows += 1
                number = record.row_number
                error = validate_row(record.fields)
                if error is None:
                    valid += 1
                    values = prospect_values(record.fields)
                    detail = prospect_detail(upload_id, number)
                    ordered.add(
                        valid_row_item(upload_id, number, values, expires_at),
                        (
                            cast(RowValidatedDetail, {**detail, **marker}) if marker else detail,
                            row_deduplication_id(upload_id, number),
                        ),
                    )
                else:
                    invalid += 1
                    text = csv_text(record.fields)
                    ordered.add(
                        invalid_row_item(upload_id, number, text, error.error_code, expires_at),
                        None,
                    )
                    failures.row_failure(upload_id, number, error)
        finally:
            chunks.close()
        ordered.flush()
        publisher.flush()
        deduplicated = publisher.deduplicated
    return SplitResult(
        upload_id,
        rows,
        valid,
        invalid,
        "completed",
        deduplicated=deduplicated,
        delivery=delivery,
    )


def split_upload(ports: SplitterPorts, ref: UploadRef) -> SplitResult:
    """Split one upload into row events; record invalid rows; publish a summary.

    Returns normally for rejected uploads (status "rejected"). Raises ``PutEventsError``
    or ObjectChangedDuringProcessing when the upload must be retried as a whole.
    """
    try:
        size = object_size(ports.s3, ref)
        if size > ports.max_upload_bytes:
            raise UploadRejected(
                "FileTooLarge", f"object is {size} bytes (limit {ports.max_upload_bytes})"
            )
        expected_rows, valid_rows = _count_data_rows(ports, ref)
    except UploadRejected as rejection:
        return _reject(ports, ref, rejection)

    ports.hooks.started(ref)
    try:
        result = _publish_rows(ports, ref, ports.delivery_for(valid_rows))
    except UploadRejected as exc:
        # Pass 1 accepted these bytes, so they changed underneath us: start over.
        raise ObjectChangedDuringProcessing(str(exc)) from exc
    if result.rows != expected_rows:
        raise ObjectChangedDuringProcessing(
            f"pass 1 saw {expected_rows} rows, pass 2 {result.rows}"
        )
    _summarise(ports, ref, result)
    logger.info("upload split", extra=result.as_dict())
    ports.hooks.finished(ref, result)
    return result


def record_malformed_event(ports: SplitterPorts, event: object, problem: str) -> SplitResult:
    """Record an event we cannot attribute to an object, and return normally.

    Raising would make Lambda retry an event that can never succeed.
    """
    upload_id = malformed_upload_id(event)
    logger.error("malformed S3 event", extra={"upload_id": upload_id, "problem": problem})
    reason = f"malformed S3 event: {problem}"
    put_upload_failure(ports.failures_table, upload_id, "MalformedEvent", reason, event)
    result = SplitResult(upload_id, 0, 0, 0, "rejected", reason, error_code="MalformedEvent")
    put_summary(ports.failures_table, None, result.as_dict())
    _publish_summary(ports, result.summary_detail("", ""))
    return result
