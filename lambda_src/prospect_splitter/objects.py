"""Reading the uploaded object from S3, pinned to the version the event names."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote_plus

from botocore.exceptions import ClientError

from .csv_stream import CHUNK_BYTES, UploadRejected
from .s3_event import UploadRef

_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound", "NoSuchVersion"})
_CHANGED_CODES = frozenset({"PreconditionFailed", "412"})


class ObjectChangedDuringProcessing(RuntimeError):
    """The object changed between the validation pass and the publishing pass; retry."""


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _pin(ref: UploadRef) -> dict[str, str]:
    # Both passes must read the bytes the event announced, not a later overwrite.
    if ref.version_id:
        return {"VersionId": ref.version_id}
    assert ref.etag is not None  # parse_s3_event guarantees one of the two
    # HTTP entity tags are quoted; S3 events carry the etag without quotes.
    return {"IfMatch": '"' + ref.etag.strip('"') + '"'}


def _key_candidates(key: str) -> list[str]:
    # S3 notification keys are URL-encoded ("a b.csv" arrives as "a+b.csv"); try the key
    # as delivered first, then the decoded form, so both spellings of the event work.
    decoded = unquote_plus(key)
    return [key] if decoded == key else [key, decoded]


def _call_with_key(ref: UploadRef, operation: Any, **params: Any) -> dict[str, Any]:
    last_error: ClientError | None = None
    for key in _key_candidates(ref.key):
        try:
            return operation(Bucket=ref.bucket, Key=key, **params)
        except ClientError as exc:
            code = _error_code(exc)
            if code in _CHANGED_CODES:
                raise UploadRejected(
                    "ObjectChanged", "the object was overwritten before it was processed"
                ) from exc
            if code not in _NOT_FOUND_CODES:
                raise
            last_error = exc
    raise UploadRejected(
        "ObjectNotFound", "the object was deleted before it was processed"
    ) from last_error


def object_size(s3: Any, ref: UploadRef) -> int:
    """Size from the event, else from HeadObject (pinned to the event's version)."""
    if ref.size is not None:
        return ref.size
    head = _call_with_key(ref, s3.head_object, **_pin(ref))
    return int(head["ContentLength"])


def iter_object_chunks(s3: Any, ref: UploadRef) -> Iterator[bytes]:
    """Stream the object in CHUNK_BYTES pieces; never holds the whole body."""
    response = _call_with_key(ref, s3.get_object, **_pin(ref))
    body = response["Body"]
    try:
        yield from body.iter_chunks(CHUNK_BYTES)
    finally:
        body.close()
