"""Routing: one function from Request to Response, shared by Lambda and the local server."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from prospect_contract.rows import READ_BATCH, RowReader, display_text

from .export import MAX_RESPONSE_BYTES, render_csv, response_bytes
from .page import index_page
from .publish import Publisher
from .reasons import human_reason
from .retry import RetryRefused, is_retryable, retry_failure, retry_upload
from .routes import ROUTES
from .row_outcome import history, row_outcome
from .store import FailureFilter, FailureStore, InvalidPageToken, public_view
from .uploads import UploadStore, upload_view
from .web import Request, Response, error_response, json_response

CSRF_HEADER = "x-requested-with"
UPLOADS_LISTED = 200
EXPORT_HEADERS = {
    "content-disposition": 'attachment; filename="prospect-failures.csv"',
    "x-export-rows": "0",
}


@dataclass(frozen=True)
class ViewerApp:
    """The viewer's request handling, over the tables and an event publisher."""

    store: FailureStore
    publisher: Publisher
    event_source: str
    uploads: UploadStore | None = None
    #: RowsTable: a failed row's values (failure records hold ids only). None: not shown.
    rows: RowReader | None = None
    #: ProspectsTable: a row's label once a delivery or a retry answered it (labels, times
    #: and request ids only). None: a retry's success is not shown.
    prospects: RowReader | None = None

    def handle(self, request: Request) -> Response:
        """Route a request; unknown paths get 404, wrong methods 405."""
        allowed = ROUTES.get(request.path)
        if allowed is None:
            return error_response(404, "NotFound", f"no route for {request.path}")
        if request.method != allowed:
            response = error_response(405, "MethodNotAllowed", f"use {allowed}")
            response.headers["allow"] = allowed
            return response
        if request.path == "/":
            return index_page()
        if request.path == "/api/uploads":
            return self._uploads()
        if request.path == "/api/failures":
            return self._list(request)
        if request.path == "/export.csv":
            return self._export(request)
        if request.path == "/api/retry-upload":
            return self._retry_upload(request)
        return self._retry(request)

    def with_rows(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``items`` with ``raw_row`` (the row as CSV, from RowsTable) on each row failure
        whose row is still there (one BatchGetItem per 100 rows)."""
        if self.rows is None:
            return items
        keys = [row_key(item) for item in items]
        found = self.rows.get_many(key for key in keys if key is not None)
        return [
            {**item, "raw_row": display_text(found[key])} if key in found else item
            for item, key in zip(items, keys, strict=True)
        ]

    def _stream_with_rows(self, items: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        chunk: list[dict[str, Any]] = []
        for item in items:
            chunk.append(item)
            if len(chunk) == READ_BATCH:
                yield from self.with_rows(chunk)
                chunk = []
        yield from self.with_rows(chunk)

    def view(self, item: dict[str, Any], prospect: dict[str, Any] | None = None) -> dict[str, Any]:
        """What the page gets for one failure: public fields plus ``retryable``, the reason
        as a sentence (``reason_text``), the row's ``outcome`` (a kind ``model`` failure:
        succeeded, failed or pending, see :mod:`.row_outcome`) and its ``attempts``."""
        view = {**public_view(item), "retryable": is_retryable(item, self.event_source)}
        view["reason_text"] = human_reason(item)
        view["attempts"] = history(item)
        outcome = row_outcome(item, prospect)
        if outcome is not None:
            view["outcome"] = outcome
            # A row answered since, or a retry still on its way, is not offered again.
            view["retryable"] = view["retryable"] and outcome["state"] == "failed"
        return view

    def views(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``view`` of each item, with its row's label read from ProspectsTable (one
        BatchGetItem per 100 rows of kind ``model``)."""
        keys = [row_key(item) if item.get("kind") == "model" else None for item in items]
        found = (
            self.prospects.get_many(key for key in keys if key is not None)
            if self.prospects is not None
            else {}
        )
        return [
            self.view(item, found.get(key) if key is not None else None)
            for item, key in zip(items, keys, strict=True)
        ]

    def _uploads(self) -> Response:
        if self.uploads is None:
            return json_response(200, {"configured": False, "items": [], "truncated": False})
        items, truncated = self.uploads.newest(UPLOADS_LISTED)
        return json_response(
            200,
            {
                "configured": True,
                "items": [
                    upload_view(item, self.uploads.price, self.uploads.clock()) for item in items
                ],
                "truncated": truncated,
            },
        )

    def _list(self, request: Request) -> Response:
        flt = _filter(request)
        try:
            items, token = self.store.page(flt, request.query.get("page_token") or None)
        except InvalidPageToken as exc:
            return error_response(400, "InvalidPageToken", str(exc))
        return json_response(
            200,
            {
                "items": self.views(self.with_rows(items)),
                "next_page_token": token,
            },
        )

    def _export(self, request: Request) -> Response:
        # What the result weighs without a body, with the largest header values it can get.
        empty = Response(
            200,
            "",
            "text/csv; charset=utf-8",
            {**EXPORT_HEADERS, "x-export-rows": "9" * 12, "x-export-truncated": "true"},
        )
        overhead = response_bytes(empty.to_function_url_result())
        items = self._stream_with_rows(self.store.iter_all(_filter(request)))
        rendered = render_csv(items, MAX_RESPONSE_BYTES - overhead)
        headers = {**EXPORT_HEADERS, "x-export-rows": str(rendered.rows)}
        if rendered.truncated:
            headers["x-export-truncated"] = "true"
        return Response(
            200, rendered.body, "text/csv; charset=utf-8", headers, base64=rendered.base64
        )

    def _json_body(self, request: Request) -> dict[str, Any] | Response:
        refusal = _csrf_refusal(request)
        if refusal is not None:
            return refusal
        try:
            payload = json.loads(request.body or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError):
            return error_response(400, "InvalidJson", "body must be a JSON object")
        if not isinstance(payload, dict):
            return error_response(400, "InvalidJson", "body must be a JSON object")
        return payload

    def _retry(self, request: Request) -> Response:
        payload = self._json_body(request)
        if isinstance(payload, Response):
            return payload
        upload_id, failure_id = payload.get("upload_id"), payload.get("failure_id")
        if not all(isinstance(value, str) and value for value in (upload_id, failure_id)):
            return error_response(400, "MissingKey", "upload_id and failure_id are required")
        expected = payload.get("expected_generation")
        if isinstance(expected, bool) or not isinstance(expected, int) or expected < 0:
            return error_response(
                400,
                "MissingGeneration",
                "expected_generation (the replay_generation shown, 0 if none) is required",
            )
        try:
            result = retry_failure(
                self.store,
                self.publisher,
                self.event_source,
                upload_id,
                failure_id,
                expected,
                rows=self.rows,
            )
        except RetryRefused as exc:
            return error_response(exc.status, exc.code, exc.message)
        return json_response(200, result)

    def _retry_upload(self, request: Request) -> Response:
        payload = self._json_body(request)
        if isinstance(payload, Response):
            return payload
        upload_id = payload.get("upload_id")
        if not isinstance(upload_id, str) or not upload_id:
            return error_response(400, "MissingKey", "upload_id is required")
        return json_response(
            200,
            retry_upload(self.store, self.publisher, self.event_source, upload_id, rows=self.rows),
        )


def row_key(item: dict[str, Any]) -> tuple[str, int] | None:
    """(upload_id, row_number) of a row's failure record, else None."""
    number = item.get("row_number")
    if number is None or isinstance(number, bool):
        return None
    try:
        return str(item["upload_id"]), int(number)
    except (KeyError, TypeError, ValueError):
        return None


def _filter(request: Request) -> FailureFilter:
    return FailureFilter(
        upload_id=request.query.get("upload_id", "").strip(),
        reason=request.query.get("reason", "").strip(),
        kind=request.query.get("kind", "").strip(),
        error_code=request.query.get("error_code", "").strip(),
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
