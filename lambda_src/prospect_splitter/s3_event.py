"""Parsing of S3 "Object Created" events delivered by EventBridge."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

UPLOAD_ID_HEX_CHARS = 20


class MalformedS3Event(ValueError):
    """The event lacks a part of the upload identity (bucket, key, version-id or etag)."""


@dataclass(frozen=True)
class UploadRef:
    """One S3 object version, as named by the event.

    ``key`` is kept exactly as the event spells it; see ``objects.py`` for how a
    URL-encoded key is resolved.
    """

    bucket: str
    key: str
    etag: str | None
    version_id: str | None
    size: int | None

    @property
    def object_version(self) -> str:
        """The version part of the identity: the version-id when present, else the etag."""
        if self.version_id:
            return f"v:{self.version_id}"
        return f"e:{self.etag}"

    @property
    def upload_id(self) -> str:
        """Deterministic id: a redelivered event for the same object version maps to it too."""
        identity = json.dumps([self.bucket, self.key, self.object_version], ensure_ascii=False)
        return hashlib.sha256(identity.encode("utf-8")).hexdigest()[:UPLOAD_ID_HEX_CHARS]

    def to_payload(self) -> dict[str, Any]:
        """JSON-serialisable form used as the idempotency payload."""
        return {**asdict(self), "object_version": self.object_version, "upload_id": self.upload_id}

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> UploadRef:
        """Inverse of ``to_payload``."""
        return cls(
            bucket=payload["bucket"],
            key=payload["key"],
            etag=payload.get("etag"),
            version_id=payload.get("version_id"),
            size=payload.get("size"),
        )


def _non_blank_str(value: object) -> str | None:
    if isinstance(value, str) and value.strip():
        return value
    return None


def parse_s3_event(event: object) -> UploadRef:
    """Extract the upload identity from an EventBridge S3 event.

    Every identity part is checked here rather than left to Powertools: a missing
    part would otherwise hash as ``null`` and collapse unrelated events onto one key.
    """
    if not isinstance(event, dict):
        raise MalformedS3Event("event is not a JSON object")
    detail = event.get("detail")
    if not isinstance(detail, dict):
        raise MalformedS3Event("event has no detail object")
    bucket_info = detail.get("bucket") if isinstance(detail.get("bucket"), dict) else {}
    object_info = detail.get("object") if isinstance(detail.get("object"), dict) else {}
    bucket = _non_blank_str(bucket_info.get("name"))
    key = _non_blank_str(object_info.get("key"))
    etag = _non_blank_str(object_info.get("etag"))
    version_id = _non_blank_str(object_info.get("version-id"))
    missing = [
        name
        for name, value in (("detail.bucket.name", bucket), ("detail.object.key", key))
        if value is None
    ]
    if etag is None and version_id is None:
        missing.append("detail.object.etag or detail.object.version-id")
    if missing:
        raise MalformedS3Event("missing " + ", ".join(missing))
    size = object_info.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        size = None  # Unknown: the size is then taken from HeadObject.
    assert bucket is not None and key is not None  # narrowed by the check above
    return UploadRef(bucket=bucket, key=key, etag=etag, version_id=version_id, size=size)


def malformed_upload_id(event: object) -> str:
    """Stable id for an event we cannot attribute, so a redelivery upserts the same item."""
    canonical = json.dumps(event, sort_keys=True, default=str, ensure_ascii=False)
    return "unknown-" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]
