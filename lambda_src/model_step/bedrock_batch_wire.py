"""Bedrock batch inference's wire, as the batch core names things: ``recordId`` and the row's
``custom_id``, a ``.jsonl.out`` line as a :class:`~.batch_provider.BatchLine`, and a control
plane error as the core's :class:`~.batch_provider.BatchCallFailed`, :class:`~.batch_provider.
CreateRefused` or :class:`~.batch_provider.CreateUncertain`. Pure functions: the adapter,
:mod:`.bedrock_batches`, makes the calls."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from . import batch_limits
from .batch_provider import BatchCallFailed, BatchLine, CreateRefused, CreateUncertain

#: The code of a record a job ended without answering (Failed, or a line missing).
JOB_FAILED = "BatchJobFailed"
#: A record's ``errorCode`` as the realtime path names the same InvokeModel error.
RECORD_ERRORS = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}
#: Create errors that mean nothing was created and waiting helps: a quota (jobs in
#: progress), a rate limit, a permission or configuration problem an operator fixes.
REFUSED_WAIT = {
    "ServiceQuotaExceededException": batch_limits.BACKOFF_SECONDS,
    "ThrottlingException": batch_limits.BACKOFF_SECONDS,
    "TooManyRequestsException": batch_limits.BACKOFF_SECONDS,
    "AccessDeniedException": 60.0,
    "ValidationException": 60.0,
    "ResourceNotFoundException": 60.0,
    "ConflictException": 60.0,
}


def record_id_of(custom_id: str) -> str:
    """The alphanumeric ``recordId`` of a ``custom_id`` (``k`` + url-safe base64 of a
    digest): ``k`` + the digest in hex. Any other id is kept as it is."""
    body = custom_id[1:]
    try:
        digest = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError):
        return custom_id
    return "k" + digest.hex()


def custom_id_of_record(record_id: str) -> str:
    """The ``custom_id`` a ``recordId`` stands for (:func:`record_id_of` undone)."""
    try:
        digest = bytes.fromhex(record_id[1:])
    except ValueError:
        return record_id
    return "k" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def output_line(record_id: str, record: dict[str, Any]) -> BatchLine:
    custom_id = custom_id_of_record(record_id)
    error = record.get("error")
    output = record.get("modelOutput")
    if error is None and isinstance(output, dict):
        try:
            import anthropic

            message = anthropic.types.Message.model_validate(output)
        except Exception:
            return BatchLine(custom_id, "errored", error_type="InvalidModelOutput")
        return BatchLine(custom_id, "succeeded", message=message)
    code = _int((error or {}).get("errorCode"))
    name = RECORD_ERRORS.get(code or 500)
    if name is None:
        name = (
            "ValidationException"
            if code is not None and 400 <= code < 500
            else "InternalServerException"
        )
    return BatchLine(custom_id, "errored", error_type=name)


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code") or type(exc).__name__)


def http_status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None) or {}
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status else None


def call_failure(exc: BaseException) -> BatchCallFailed:
    code = error_code(exc)
    status = http_status(exc)
    gone = code in ("ResourceNotFoundException", "NoSuchKey") or status == 404
    retry = batch_limits.BACKOFF_SECONDS if code in ("ThrottlingException",) else None
    return BatchCallFailed(
        code if status is None else f"{code}:{status}", gone=gone, retry_after=retry
    )


def create_failure(exc: BaseException) -> Exception:
    """A refused create (nothing was created; the rows are never at fault: Bedrock reads
    them only once the job runs) or an uncertain one (a timeout, a dropped connection, a
    5xx): created again with the same token."""
    code = error_code(exc)
    status = http_status(exc)
    if code in REFUSED_WAIT or (status is not None and 400 <= status < 500 and status != 408):
        return CreateRefused(
            code,
            status=429
            if code in ("ThrottlingException", "ServiceQuotaExceededException")
            else status,
            rows_at_fault=False,
            retry_after=REFUSED_WAIT.get(code, 60.0),
            request_id=(getattr(exc, "response", None) or {})
            .get("ResponseMetadata", {})
            .get("RequestId"),
        )
    return CreateUncertain(code)
