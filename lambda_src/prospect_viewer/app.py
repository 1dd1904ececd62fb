"""Routing: one function from Request to Response, shared by Lambda and the local server."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .export import render_csv
from .page import index_page
from .retry import RetryRefused, retry_failure
from .store import FailureFilter, FailureStore, InvalidPageToken, public_view
from .web import Request, Response, error_response, json_response

CSRF_HEADER = "x-requested-with"
_ROUTES = {
    "/": "GET",
    "/api/failures": "GET",
    "/export.csv": "GET",
    "/api/retry": "POST",
}


@dataclass(frozen=True)
class ViewerApp:
    """The viewer's request handling, over a FailureStore and an EventBridge client."""

    store: FailureStore
    events_client: Any
    event_bus_name: str
    event_source: str

    def handle(self, request: Request) -> Response:
        """Route a request; unknown paths get 404, wrong methods 405."""
        allowed = _ROUTES.get(request.path)
        if allowed is None:
            return error_response(404, "NotFound", f"no route for {request.path}")
        if request.method != allowed:
            response = error_response(405, "MethodNotAllowed", f"use {allowed}")
            response.headers["allow"] = allowed
            return response
        if request.path == "/":
            return index_page()
        if request.path == "/api/failures":
            return self._list(request)
        if request.path == "/export.csv":
            return self._export(request)
        return self._retry(request)

    def _list(self, request: Request) -> Response:
        flt = _filter(request)
        try:
            items, token = self.store.page(flt, request.query.get("page_token") or None)
        except InvalidPageToken as exc:
            return error_response(400, "InvalidPageToken", str(exc))
        return json_response(
            200, {"items": [public_view(item) for item in items], "next_page_token": token}
        )

    def _export(self, request: Request) -> Response:
        text, truncated = render_csv(self.store.iter_all(_filter(request)))
        headers = {"content-disposition": 'attachment; filename="prospect-failures.csv"'}
        if truncated:
            headers["x-export-truncated"] = "true"
        return Response(200, text, "text/csv; charset=utf-8", headers)

    def _retry(self, request: Request) -> Response:
        refusal = _csrf_refusal(request)
        if refusal is not None:
            return refusal
        try:
            payload = json.loads(request.body or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError):
            return error_response(400, "InvalidJson", "body must be a JSON object")
        if not isinstance(payload, dict):
            return error_response(400, "InvalidJson", "body must be a JSON object")
        upload_id, failure_id = payload.get("upload_id"), payload.get("failure_id")
        if not all(isinstance(value, str) and value for value in (upload_id, failure_id)):
            return error_response(400, "MissingKey", "upload_id and failure_id are required")
        try:
            result = retry_failure(
                self.store,
                self.events_client,
                self.event_bus_name,
                self.event_source,
                upload_id,
                failure_id,
            )
        except RetryRefused as exc:
            return error_response(exc.status, exc.code, exc.message)
        return json_response(200, result)


def _filter(request: Request) -> FailureFilter:
    return FailureFilter(
        upload_id=request.query.get("upload_id", "").strip(),
        reason=request.query.get("reason", "").strip(),
    )


def _csrf_refusal(request: Request) -> Response | None:
    """Refuse state-changing requests a cross-site page could forge.

    A custom header cannot be sent cross-origin without a CORS preflight, which the
    Function URL does not grant; a present Origin must also match Host.
    """
    if not request.headers.get(CSRF_HEADER, "").strip():
        return error_response(403, "CsrfHeaderMissing", f"the {CSRF_HEADER} header is required")
    origin = request.headers.get("origin")
    # "null" is what sandboxed frames and file: pages send; never our own page.
    if origin and (origin == "null" or urlsplit(origin).netloc != request.headers.get("host")):
        return error_response(403, "CrossOrigin", "cross-origin requests are refused")
    content_type = request.headers.get("content-type", "")
    if not content_type.split(";")[0].strip().lower() == "application/json":
        return error_response(415, "UnsupportedMediaType", "content-type must be application/json")
    return None
