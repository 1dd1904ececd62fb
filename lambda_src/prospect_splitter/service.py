"""The splitter's business logic: validate, publish, record. Callable without Lambda."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Logger

from .csv_stream import UploadRejected, iter_records
from .failures import FailureWriter, put_summary, put_upload_failure
from .objects import ObjectChangedDuringProcessing, iter_object_chunks, object_size
from .publisher import EventPublisher
from .s3_event import UploadRef, malformed_upload_id
from .validation import prospect_detail, raw_row_text, validate_row

ROW_DETAIL_TYPE = "Prospect Row Validated"
SUMMARY_DETAIL_TYPE = "Prospect Upload Summarized"

logger = Logger(service="prospect-splitter", child=True)


@dataclass(frozen=True)
class SplitResult:
    """Outcome of one upload; ``as_dict`` is the handler's return value."""

    upload_id: str
    rows: int
    valid: int
    invalid: int
    status: str  # "completed" or "rejected"
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """``{"upload_id","rows","valid","invalid","status"}`` plus ``reason`` when rejected."""
        result: dict[str, Any] = {
            "upload_id": self.upload_id,
            "rows": self.rows,
            "valid": self.valid,
            "invalid": self.invalid,
            "status": self.status,
        }
        if self.reason is not None:
            result["reason"] = self.reason
        return result


@dataclass(frozen=True)
class SplitterPorts:
    """The AWS resources the splitter talks to."""

    s3: Any
    failures_table: Any
    max_upload_bytes: int
    new_publisher: Callable[[], EventPublisher]  # a fresh buffer per upload
    ledger: Any = None  # upload_accounting.UploadLedger, when the stack has one


def _count_data_rows(ports: SplitterPorts, ref: UploadRef) -> int:
    """Pass 1: decode and parse the whole file without publishing anything.

    Streaming the object twice costs a second GetObject but guarantees that an
    undecodable byte or a broken record near the end rejects the upload before a
    single row event exists, so published + invalid = data rows always holds.
    """
    chunks = iter_object_chunks(ports.s3, ref)
    return sum(1 for _ in iter_records(chunks, ports.max_upload_bytes))


def _summarise(
    ports: SplitterPorts, publisher: EventPublisher, ref: UploadRef, result: SplitResult
) -> None:
    summary = {**result.as_dict(), "bucket": ref.bucket, "key": ref.key}
    put_summary(ports.failures_table, ref, result.as_dict())
    publisher.add(SUMMARY_DETAIL_TYPE, summary)
    publisher.flush()


def _reject(ports: SplitterPorts, ref: UploadRef, rejection: UploadRejected) -> SplitResult:
    logger.warning(
        "upload rejected", extra={"upload_id": ref.upload_id, "error_code": rejection.error_code}
    )
    put_upload_failure(ports.failures_table, ref.upload_id, rejection.error_code, rejection.reason)
    result = SplitResult(ref.upload_id, 0, 0, 0, "rejected", rejection.reason)
    _summarise(ports, ports.new_publisher(), ref, result)
    if ports.ledger is not None:
        ports.ledger.split_finished(ref.upload_id, rows=0, valid=0, invalid=0,
                                    rejected_reason=rejection.reason)  # fmt: skip
    return result


def split_upload(ports: SplitterPorts, ref: UploadRef) -> SplitResult:
    """Split one upload into row events; record invalid rows; publish a summary.

    Returns normally for rejected uploads (status "rejected"). Raises EventPublishError
    or ObjectChangedDuringProcessing when the upload must be retried as a whole.
    """
    upload_id = ref.upload_id
    if ports.ledger is not None:
        ports.ledger.begin(upload_id, bucket=ref.bucket, key=ref.key)
    try:
        size = object_size(ports.s3, ref)
        if size > ports.max_upload_bytes:
            raise UploadRejected(
                "FileTooLarge", f"object is {size} bytes (limit {ports.max_upload_bytes})"
            )
        expected_rows = _count_data_rows(ports, ref)
    except UploadRejected as rejection:
        return _reject(ports, ref, rejection)

    publisher = ports.new_publisher()
    rows = valid = invalid = 0
    try:
        with FailureWriter(ports.failures_table) as failures:
            chunks = iter_object_chunks(ports.s3, ref)
            for record in iter_records(chunks, ports.max_upload_bytes):
                rows += 1
                error = validate_row(record.fields)
                if error is None:
                    valid += 1
                    publisher.add(
                        ROW_DETAIL_TYPE,
                        prospect_detail(upload_id, record.row_number, record.fields),
                    )
                else:
                    invalid += 1
                    failures.row_failure(
                        upload_id, record.row_number, error, raw_row_text(record.fields)
                    )
            publisher.flush()
    except UploadRejected as exc:
        # Pass 1 accepted these bytes, so they changed underneath us: start over.
        raise ObjectChangedDuringProcessing(str(exc)) from exc
    if rows != expected_rows:
        raise ObjectChangedDuringProcessing(f"pass 1 saw {expected_rows} rows, pass 2 {rows}")
    result = SplitResult(upload_id, rows, valid, invalid, "completed")
    _summarise(ports, publisher, ref, result)
    if ports.ledger is not None:
        ports.ledger.split_finished(upload_id, rows=rows, valid=valid, invalid=invalid)
    logger.info("upload split", extra=result.as_dict())
    return result


def record_malformed_event(ports: SplitterPorts, event: object, problem: str) -> SplitResult:
    """Record an event we cannot attribute to an object, and return normally.

    Raising would make Lambda retry an event that can never succeed.
    """
    upload_id = malformed_upload_id(event)
    logger.error("malformed S3 event", extra={"upload_id": upload_id, "problem": problem})
    reason = f"malformed S3 event: {problem}"
    put_upload_failure(ports.failures_table, upload_id, "MalformedEvent", reason, event)
    result = SplitResult(upload_id, 0, 0, 0, "rejected", reason)
    put_summary(ports.failures_table, None, result.as_dict())
    publisher = ports.new_publisher()
    publisher.add(SUMMARY_DETAIL_TYPE, {**result.as_dict(), "bucket": "", "key": ""})
    publisher.flush()
    if ports.ledger is not None:
        ports.ledger.split_finished(upload_id, rows=0, valid=0, invalid=0, rejected_reason=reason)
    return result
