"""Function URL (payload format 2.0) request and response shapes."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

# Sent on every response: no MIME sniffing, no framing, nothing cached or leaked.
BASE_HEADERS = {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}
API_CSP = "default-src 'none'; frame-ancestors 'none'"


@dataclass(frozen=True)
class Request:
    """The parts of a Function URL event the viewer uses (header names lower-cased)."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes = b""

    @classmethod
    def from_function_url_event(cls, event: dict[str, Any]) -> Request:
        """Build from a payload 2.0 event; repeated query parameters keep the first value."""
        http = (event.get("requestContext") or {}).get("http") or {}
        raw_query = event.get("rawQueryString")
        if raw_query is not None:
            parsed = parse_qs(raw_query, keep_blank_values=True)
            query = {name: values[0] for name, values in parsed.items()}
        else:
            query = dict(event.get("queryStringParameters") or {})
        body = event.get("body") or ""
        body_bytes = base64.b64decode(body) if event.get("isBase64Encoded") else body.encode()
        return cls(
            method=str(http.get("method", "GET")).upper(),
            path=event.get("rawPath") or http.get("path") or "/",
            query=query,
            headers={str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()},
            body=body_bytes,
        )


@dataclass(frozen=True)
class Response:
    """An HTTP response; ``to_function_url_result`` gives the Lambda return value."""

    status: int
    body: str
    content_type: str
    headers: dict[str, str] = field(default_factory=dict)
    base64: bool = False  # body is base64 text of the bytes to send

    def to_function_url_result(self) -> dict[str, Any]:
        """Payload 2.0 result: statusCode, headers, body, isBase64Encoded."""
        headers = {
            **BASE_HEADERS,
            "content-security-policy": API_CSP,
            "content-type": self.content_type,
            **self.headers,
        }
        return {
            "statusCode": self.status,
            "headers": headers,
            "body": self.body,
            "isBase64Encoded": self.base64,
        }


def json_response(status: int, payload: object, headers: dict[str, str] | None = None) -> Response:
    """A JSON response."""
    return Response(
        status,
        json.dumps(payload, ensure_ascii=False),
        "application/json; charset=utf-8",
        headers or {},
    )


def error_response(status: int, code: str, message: str) -> Response:
    """A JSON error: ``{"error": {"code", "message"}}``."""
    return json_response(status, {"error": {"code": code, "message": message}})
