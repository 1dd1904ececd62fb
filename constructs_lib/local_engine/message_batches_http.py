"""The Message Batches endpoints over HTTP, for the fake Messages API and the local model.

Standard library only. :func:`route` answers a request of the SDK's
``messages.batches`` on a ``BaseHTTPRequestHandler`` from a
:class:`~.message_batches.MessageBatchStore` (see it for what each call does):

- ``POST /v1/messages/batches``: create;
- ``GET /v1/messages/batches?limit&after_id&before_id``: list, as the SDK's ``SyncPage``
  reads it;
- ``GET /v1/messages/batches/{id}``: retrieve;
- ``GET /v1/messages/batches/{id}/results``: the JSONL results, streamed (chunked);
- ``POST /v1/messages/batches/{id}/cancel``: cancel;
- ``DELETE /v1/messages/batches/{id}``: delete.

The API key is read from ``x-api-key`` or ``Authorization: Bearer`` (the SDK 2.x sends the
latter), and decides the Workspace the call sees.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from .message_batches import BATCHES_PATH, ApiError, MessageBatchStore, StoredBatch

#: The error ``type`` the API puts in the body for each status.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
#: Statuses answered with a ``retry-after`` (seconds) header.
RETRY_AFTER = {429: "1", 529: "1"}
DROP_AFTER = "drop_after:"


def error_body(status: int, message: str | None = None) -> dict[str, Any]:
    """An API error body for ``status``."""
    error_type = ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": error_type, "message": message or f"fake {status}"}}


def api_key_of(handler: Any) -> str | None:
    """The API key a request carries (``x-api-key``, else ``Authorization: Bearer``)."""
    key = handler.headers.get("x-api-key")
    if key:
        return str(key)
    authorization = str(handler.headers.get("authorization") or "")
    return authorization[len("Bearer ") :].strip() or None if authorization else None


def route(
    store: MessageBatchStore,
    handler: Any,
    method: str,
    raw: bytes,
    base_url: str,
    request_id: str,
) -> bool:
    """Answer a Message Batches request on ``handler`` (a ``BaseHTTPRequestHandler``);
    False when the path is not one of them. ``handler.send_json(status, body, request_id,
    headers)`` sends a JSON answer."""
    parts = urlsplit(handler.path)
    path = parts.path.rstrip("/")
    if not path.startswith(BATCHES_PATH):
        return False
    rest = path[len(BATCHES_PATH) :].strip("/").split("/") if path != BATCHES_PATH else []
    try:
        workspace = store.workspace_of(api_key_of(handler))
        if method == "POST" and not rest:
            _create(store, handler, raw, base_url, request_id, workspace)
        elif method == "GET" and not rest:
            _fault(store.fault("list"))
            handler.send_json(200, store.page(parts.query, base_url, workspace), request_id, {})
        else:
            _on_batch(store, handler, method, rest, base_url, request_id, workspace)
    except ApiError as error:
        if error.close:
            handler.close_connection = True
            return True
        headers = {"retry-after": RETRY_AFTER[error.status]} if error.status in RETRY_AFTER else {}
        handler.send_json(error.status, error_body(error.status, str(error)), request_id, headers)
    return True


def _fault(entry: int | str | None) -> None:
    """Raise the :class:`ApiError` a fault entry stands for (none for ``None``)."""
    if entry is None or (isinstance(entry, str) and entry.startswith(DROP_AFTER)):
        return
    if entry == "disconnect":
        raise ApiError(0, close=True)
    if isinstance(entry, int):
        raise ApiError(entry, f"injected {entry}")
    raise ValueError(f"unknown Message Batches fault {entry!r}")


def _create(
    store: MessageBatchStore,
    handler: Any,
    raw: bytes,
    base_url: str,
    request_id: str,
    workspace: str,
) -> None:
    status, body, fault = store.create(raw, workspace)
    if fault is not None and fault.close:
        raise ApiError(0, close=True)
    if fault is not None:
        raise ApiError(status)
    assert body is not None
    batch = store.find(body["batch"])
    assert batch is not None
    handler.send_json(200, store.body_of(batch, base_url), request_id, {})


def _on_batch(
    store: MessageBatchStore,
    handler: Any,
    method: str,
    rest: list[str],
    base_url: str,
    request_id: str,
    workspace: str,
) -> None:
    """retrieve, results, cancel and delete of one batch."""
    operation = {
        ("GET", 1): "retrieve",
        ("DELETE", 1): "delete",
        ("POST", 2): "cancel",
        ("GET", 2): "results",
    }.get((method, len(rest)))
    if operation is None or (len(rest) == 2 and rest[1] != operation):
        raise ApiError(404, "unknown path")
    entry = store.fault(operation, rest[0])
    _fault(entry)
    batch = store.visible(rest[0], workspace)
    if operation == "retrieve":
        handler.send_json(200, store.body_of(batch, base_url), request_id, {})
    elif operation == "delete":
        handler.send_json(200, store.delete(batch), request_id, {})
    elif operation == "cancel":
        store.cancel(batch.id)
        handler.send_json(200, store.body_of(batch, base_url), request_id, {})
    else:
        store.readable(batch)
        drop = int(entry[len(DROP_AFTER) :]) if isinstance(entry, str) else None
        stream_results(store, handler, batch, request_id, drop)


def stream_results(
    store: MessageBatchStore,
    handler: Any,
    batch: StoredBatch,
    request_id: str,
    drop_after: int | None = None,
) -> None:
    """Send the results as a chunked JSONL stream, broken after ``drop_after`` lines (or
    the store's one-shot ``results_drop_after``)."""
    handler.send_response(200)
    handler.send_header("content-type", "application/binary")
    handler.send_header("transfer-encoding", "chunked")
    handler.send_header("request-id", request_id)
    handler.end_headers()
    if drop_after is None:
        drop_after = store.results_drop_after
        store.results_drop_after = None
    try:
        pending: list[bytes] = []
        for count, line in enumerate(store.result_lines(batch, request_id), start=1):
            pending.append(line)
            if drop_after is not None and count >= drop_after:
                _chunk(handler, b"".join(pending))
                handler.close_connection = True
                return
            if len(pending) >= 64:
                _chunk(handler, b"".join(pending))
                pending = []
        if pending:
            _chunk(handler, b"".join(pending))
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()
    except (BrokenPipeError, ConnectionResetError):
        handler.close_connection = True


def _chunk(handler: Any, data: bytes) -> None:
    handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    handler.wfile.flush()
