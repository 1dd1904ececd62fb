"""A fake Anthropic Messages API on 127.0.0.1, standard library only.

It answers ``POST /v1/messages`` from a *script*, counts and records every request, and sets a
``request-id`` response header the way the real API does, so the real SDK can be driven over
real HTTP in tests and in the local-run CLI.

Script entries (one per request, in order; once the script is used up every request gets 200):

- ``200``: a success body whose text is the server's ``text`` (default ``"warm"``).
- any other ``int``: an error body with the matching Anthropic error ``type``.
- ``"timeout"``: hold the request for ``timeout_sleep`` seconds (longer than the client timeout),
  then close without answering.
- ``"disconnect"``: close the connection without any response (the SDK raises
  ``APIConnectionError``).
- ``Reply(...)``: full control of status, text, stop reason, body, headers and delay. Use
  ``headers`` for ``retry-after`` / ``retry-after-ms`` on a 429 or 529 and for
  ``x-should-retry``; ``stop_reason`` for ``max_tokens``, ``refusal`` and the others;
  ``chunks`` and ``chunk_delay`` for a slow answer: the headers at once, then the body in
  ``chunks`` pieces ``chunk_delay`` seconds apart (no single read waits long, the whole
  answer does).

``script`` may also be a callable ``(index, body) -> entry``.

Message Batches (``client.messages.batches.create / retrieve / list / results / cancel /
delete``) are served by :attr:`FakeMessagesAPI.batches`, a
:class:`~constructs_lib.local_engine.message_batches.MessageBatchStore` as strict as the
documented API (results in a new order on every read, ``canceling``, progressing
``request_counts``, archive, delete, Workspaces, list lag): script each request's result
type with ``batch_results`` (``{custom_id: type}`` or ``(custom_id, params) -> type``;
``succeeded``, ``expired``, ``canceled``, ``errored`` or one of the nine error types), the
processing delay with ``batch_delay``, faults with ``api.batches.faults`` (per operation:
``create``, ``retrieve``, ``list``, ``results``, ``cancel``, ``delete``) or
``api.batches.create_faults`` (413, 429, ``"disconnect"``, ``"disconnect_after_create"``,
``"error_after_create"``). ``api.batches.billed`` counts billed requests (succeeded
results), ``api.batches.billed_by_custom_id`` per custom_id. Batch calls are not in
:attr:`FakeMessagesAPI.requests`.

Usage::

    with FakeMessagesAPI([529, 200], delay=0.2) as api:
        os.environ["ANTHROPIC_BASE_URL"] = api.base_url
        ...
        assert api.request_count == 2
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from constructs_lib.local_engine import message_batches_http
from constructs_lib.local_engine.loopback import LoopbackServer
from constructs_lib.local_engine.message_batches import MessageBatchStore

ScriptEntry = Any  # int | str | Reply
Script = Sequence[ScriptEntry] | Callable[[int, dict[str, Any]], ScriptEntry]

# The error "type" the real API puts in the body for each status.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    409: "conflict_error",
    413: "request_too_large",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "api_error",
    504: "api_error",
    529: "overloaded_error",
}


@dataclass(frozen=True)
class Reply:
    """One scripted answer. ``body`` overrides the generated body; ``delay`` overrides the
    server-wide delay (seconds)."""

    #: The HTTP status. Default 200 (a success body); any other gives that status's error body.
    status: int = 200
    #: The answer of a 200. Default None: the server's ``text``.
    text: str | None = None
    #: The success body's ``stop_reason``. Default ``"end_turn"``.
    stop_reason: str = "end_turn"
    #: A body to send instead of the generated one. Default None.
    body: dict[str, Any] | None = None
    #: Extra response headers, e.g. ``retry-after``, ``x-should-retry``. Default none.
    headers: dict[str, str] = field(default_factory=dict)
    #: Seconds before answering. Default None: the server's ``delay``.
    delay: float | None = None
    #: The body in this many pieces, :attr:`chunk_delay` apart. Default 1 (all at once).
    chunks: int = 1
    #: Seconds between pieces: a slow answer whose every read is short. Default 0.
    chunk_delay: float = 0.0


@dataclass(frozen=True)
class RecordedRequest:
    """What the fake saw: the parsed JSON body, headers (lower-cased names), request id sent."""

    #: The request's path, ``/v1/messages``.
    path: str
    #: The request's JSON body, parsed.
    body: dict[str, Any]
    #: The request's headers, names lower-cased.
    headers: dict[str, str]
    #: The ``request-id`` the fake answered with.
    request_id: str


class ScriptedServer(LoopbackServer):
    """A loopback fake answering each request from ``script`` (entries in order, then 200;
    or a callable ``(index, body) -> entry``), holding on purpose on :attr:`stopping`."""

    script: Script

    def _entry_for(self, index: int, body: dict[str, Any]) -> ScriptEntry:
        if callable(self.script):
            return self.script(index, body)
        if index < len(self.script):
            return self.script[index]
        return 200

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self.stopping.wait(seconds)


class ScriptedHandler(BaseHTTPRequestHandler):
    """A quiet HTTP/1.1 handler of a :class:`ScriptedServer` that writes JSON answers, whole
    or in chunks, and shrugs off a client that gave up."""

    protocol_version = "HTTP/1.1"
    server_state: ScriptedServer

    def log_message(self, format: str, *args: object) -> None:
        # Keep test output clean; the recorded requests are the log.
        return

    def handle(self) -> None:
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (its timeout or deadline) mid-request: nothing to do.
            self.close_connection = True

    def write_json(
        self,
        status: int,
        payload: dict[str, Any],
        headers: Mapping[str, str],
        chunks: int = 1,
        chunk_delay: float = 0.0,
    ) -> None:
        """Answer ``payload`` with ``headers``, in ``chunks`` pieces ``chunk_delay`` apart."""
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        size = max(1, -(-len(data) // max(1, chunks)))
        try:
            for start in range(0, len(data), size):
                if start:
                    self.server_state._wait(chunk_delay)
                self.wfile.write(data[start : start + size])
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (its timeout or deadline); nothing left to do.
            self.close_connection = True


class FakeMessagesAPI(ScriptedServer):
    """A threaded HTTP server that imitates ``POST /v1/messages``.

    :param script: scripted entries or a callable, see the module docstring. Default None:
        always 200.
    :param text: answer text for 200 replies. Default ``"warm"``.
    :param delay: seconds to wait before every answer (for concurrency tests). Default 0.
    :param timeout_sleep: seconds a ``"timeout"`` entry holds the request; ``stop()``
        interrupts it. Default 5.
    :param model: ``model`` field of success bodies. Default ``"claude-haiku-5-5"``.
    :param batch_results: the result type of each batch request, ``{custom_id: type}`` (a
        custom_id not in it succeeds) or ``(custom_id, params) -> type``. Default None: all
        succeed.
    :param batch_delay: seconds (on ``batch_clock``) from a batch's creation to its end.
        Default 0.
    :param batch_clock: the batches' clock, seconds since the epoch. Default ``time.time``.
    """

    #: The name of the server's thread.
    thread_name = "fake-messages-api"

    def __init__(
        self,
        script: Script | None = None,
        *,
        text: str = "warm",
        delay: float = 0.0,
        timeout_sleep: float = 5.0,
        model: str = "claude-haiku-5-5",
        batch_results: dict[str, str] | Callable[[str, dict[str, Any]], str] | None = None,
        batch_delay: float = 0.0,
        batch_clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__()
        #: The script: change it between requests to answer differently.
        self.script = script if script is not None else []
        #: Answer text of a 200 without its own.
        self.text = text
        #: Seconds before every answer.
        self.delay = delay
        #: Seconds a ``"timeout"`` entry holds its request.
        self.timeout_sleep = timeout_sleep
        self.model = model
        #: Every request received, in order.
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        decide: Callable[[str, dict[str, Any]], str] | None
        if isinstance(batch_results, dict):
            table = dict(batch_results)
            decide = lambda custom_id, params: table.get(custom_id, "succeeded")  # noqa: E731
        else:
            decide = batch_results
        #: The Message Batches this server holds (see the module docstring).
        self.batches = MessageBatchStore(
            lambda params, request_id: self._success_body(self.text, params),
            decide=decide,
            processing_delay=batch_delay,
            clock=batch_clock or time.time,
        )

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        """Requests are answered by this server's state."""
        return _make_handler(self)

    @property
    def request_count(self) -> int:
        """Number of ``POST /v1/messages`` requests received so far."""
        with self._lock:
            return len(self.requests)

    @property
    def last_request(self) -> RecordedRequest:
        """The most recent request; raises ``IndexError`` if none."""
        with self._lock:
            return self.requests[-1]

    # -- internals ---------------------------------------------------------------------------
    def _record(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, str]:
        with self._lock:
            index = len(self.requests)
            request_id = f"req_fake_{next(self._ids):04d}"
            self.requests.append(RecordedRequest(path, body, headers, request_id))
            return index, request_id

    def _success_body(
        self, text: str, request_body: dict[str, Any], stop_reason: str = "end_turn"
    ) -> dict[str, Any]:
        return {
            "id": f"msg_fake_{index_hex(len(self.requests))}",
            "type": "message",
            "role": "assistant",
            "model": request_body.get("model", self.model),
            "content": [{"type": "text", "text": text}] if text else [],
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": 12, "output_tokens": 3},
        }


def index_hex(value: int) -> str:
    """A short stable hex id, so message ids look like the real ones."""
    return f"{value:08x}"


def _error_body(status: int) -> dict[str, Any]:
    error_type = ERROR_TYPES.get(status, "api_error")
    message = f"fake {status} {error_type}"
    return {"type": "error", "error": {"type": error_type, "message": message}}


def _make_handler(api: FakeMessagesAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(ScriptedHandler):
        server_state = api

        def send_json(
            self, status: int, payload: dict[str, Any], request_id: str, headers: dict[str, str]
        ) -> None:
            self._send(status, payload, request_id, headers)

        def _batches(self, method: str, raw: bytes) -> bool:
            request_id = f"req_fake_batch_{next(api._ids):04d}"
            return message_batches_http.route(
                api.batches, self, method, raw, api.base_url, request_id
            )

        def do_GET(self) -> None:  # http.server's naming
            if not self._batches("GET", b""):
                self._send(404, _error_body(404), "req_fake_unknown_path")

        def do_DELETE(self) -> None:  # http.server's naming
            if not self._batches("DELETE", b""):
                self._send(404, _error_body(404), "req_fake_unknown_path")

        def do_POST(self) -> None:  # http.server's naming
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self._batches("POST", raw):
                return
            if self.path.split("?")[0] != "/v1/messages":
                self._send(404, _error_body(404), "req_fake_unknown_path")
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {"_unparseable": raw.decode("utf-8", "replace")}
            headers = {name.lower(): value for name, value in self.headers.items()}
            index, request_id = api._record(self.path, body, headers)
            entry = api._entry_for(index, body)

            if entry == "timeout":
                api._wait(api.timeout_sleep)
                self.close_connection = True
                return
            if entry == "disconnect":
                self.close_connection = True
                return

            reply = entry if isinstance(entry, Reply) else Reply(status=int(entry))
            api._wait(api.delay if reply.delay is None else reply.delay)
            if reply.body is not None:
                payload = reply.body
            elif reply.status == 200:
                text = reply.text if reply.text is not None else api.text
                payload = api._success_body(text, body, reply.stop_reason)
            else:
                payload = _error_body(reply.status)
            self._send(
                reply.status, payload, request_id, reply.headers, reply.chunks, reply.chunk_delay
            )

        def _send(
            self,
            status: int,
            payload: dict[str, Any],
            request_id: str,
            extra: dict[str, str] | None = None,
            chunks: int = 1,
            chunk_delay: float = 0.0,
        ) -> None:
            headers = {"request-id": request_id, **(extra or {})}
            self.write_json(status, payload, headers, chunks, chunk_delay)

    return Handler
