"""The event S3 sends to EventBridge's default bus when an object is created."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any
from urllib.parse import quote_plus

from constructs_lib.local_engine.intrinsics import LOCAL_ACCOUNT, LOCAL_REGION


def s3_object_created_event(
    bucket: str, key: str, size: int, etag: str, version_id: str | None
) -> dict[str, Any]:
    """The event S3 sends to the default bus for a PutObject (key URL-encoded, as S3 does)."""
    detail_object: dict[str, Any] = {
        "key": quote_plus(key, safe="/"),
        "size": size,
        "etag": etag.strip('"'),
        "sequencer": uuid.uuid4().hex[:18].upper(),
    }
    if version_id and version_id != "null":
        detail_object["version-id"] = version_id
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Object Created",
        "source": "aws.s3",
        "account": LOCAL_ACCOUNT,
        "time": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": LOCAL_REGION,
        "resources": [f"arn:aws:s3:::{bucket}"],
        "detail": {
            "version": "0",
            "bucket": {"name": bucket},
            "object": detail_object,
            "request-id": uuid.uuid4().hex[:16].upper(),
            "requester": LOCAL_ACCOUNT,
            "source-ip-address": "127.0.0.1",
            "reason": "PutObject",
        },
    }
