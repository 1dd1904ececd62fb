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

The fake answers as the model catalogue's model does (``models``, default the library's
catalogue): a request for a model it does not know is a 404 ``not_found_error``, and one the
model refuses (a non-default ``temperature``/``top_p``/``top_k``, a prefill, a thinking type
or effort it does not accept, ``max_tokens`` over its maximum) a 400
``invalid_request_error``, both recorded and answered before the script is consulted. A 200
of a model that thinks (``claude-haiku-5-5`` by default) starts with a ``thinking`` block,
whose tokens count toward ``max_tokens`` and ``output_tokens`` (``Reply(thinking_tokens=0)``
for none); a ``max_tokens`` they use up ends it with ``stop_reason: "max_tokens"``.

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

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from constructs_lib.local_engine import message_batches_http, model_behaviour
from constructs_lib.local_engine.message_batches import MessageBatchStore

from .scripted_model import Reply, Script, ScriptedHandler, ScriptedServer, ScriptEntry

__all__ = [
    "ERROR_TYPES",
    "FakeMessagesAPI",
    "RecordedRequest",
    "Reply",
    "Script",
    "ScriptEntry",
    "ScriptedHandler",
    "ScriptedServer",
]

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


class FakeMessagesAPI(ScriptedServer[RecordedRequest]):
    """A threaded HTTP server that imitates ``POST /v1/messages``.

    :param script: scripted entries or a callable, see the module docstring. Default None:
        always 200.
    :param text: answer text for 200 replies. Default ``"warm"``.
    :param delay: seconds to wait before every answer (for concurrency tests). Default 0.
    :param timeout_sleep: seconds a ``"timeout"`` entry holds the request; ``stop()``
        interrupts it. Default 5.
    :param model: ``model`` of a request that names none. Default ``"claude-haiku-5-5"``.
    :param batch_results: the result type of each batch request, ``{custom_id: type}`` (a
        custom_id not in it succeeds) or ``(custom_id, params) -> type``. Default None: all
        succeed.
    :param batch_delay: seconds (on ``batch_clock``) from a batch's creation to its end.
        Default 0.
    :param batch_clock: the batches' clock, seconds since the epoch. Default ``time.time``.
    :param models: the model catalogue the fake answers as. Default None: the library's.
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
        models: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(script, text=text, delay=delay, timeout_sleep=timeout_sleep, models=models)
        self.model = model
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

    # -- internals ---------------------------------------------------------------------------
    def _new_request(
        self, path: str, body: dict[str, Any], headers: dict[str, str]
    ) -> tuple[int, str]:
        request_id = f"req_fake_{next(self._ids):04d}"
        return self._record(RecordedRequest(path, body, headers, request_id)), request_id

    def _success_body(
        self, text: str, request_body: dict[str, Any], stop_reason: str = "end_turn"
    ) -> dict[str, Any]:
        model = str(request_body.get("model") or self.model)
        return self._message(model, request_body, Reply(text=text, stop_reason=stop_reason))

    def _message(self, model: str, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        return {
            "id": f"msg_fake_{index_hex(len(self.requests))}",
            "type": "message",
            "role": "assistant",
            "model": model,
            **self.answer(self.model_spec(model), body, reply),
            "stop_sequence": None,
        }

    def _refusal(self, body: dict[str, Any]) -> tuple[int, str] | None:
        """A 404 for a model the catalogue does not know, a 400 for a request it refuses."""
        model = str(body.get("model") or self.model)
        spec = self.model_spec(model)
        if spec is None:
            return 404, f"model: {model}"
        problem = model_behaviour.request_problem(body, spec)
        return None if problem is None else (400, problem)


def index_hex(value: int) -> str:
    """A short stable hex id, so message ids look like the real ones."""
    return f"{value:08x}"


def _error_body(status: int, message: str | None = None) -> dict[str, Any]:
    error_type = ERROR_TYPES.get(status, "api_error")
    text = message or f"fake {status} {error_type}"
    return {"type": "error", "error": {"type": error_type, "message": text}}


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
            raw = self.read_body()
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
            index, request_id = api._new_request(self.path, body, headers)
            refusal = api._refusal(body)
            if refusal is not None:
                self._send(refusal[0], _error_body(*refusal), request_id)
                return
            model = str(body.get("model") or api.model)

            def respond(reply: Reply) -> tuple[dict[str, Any], dict[str, str]]:
                if reply.body is not None:
                    payload = reply.body
                elif reply.status == 200:
                    payload = api._answered(api._message(model, body, reply))
                else:
                    payload = _error_body(reply.status)
                return payload, {"request-id": request_id, **reply.headers}

            self.play(api._entry_for(index, body), _as_reply, respond)

        def _send(
            self,
            status: int,
            payload: dict[str, Any],
            request_id: str,
            extra: dict[str, str] | None = None,
        ) -> None:
            headers = {"request-id": request_id, **(extra or {})}
            self.write_json(status, payload, headers)

    return Handler


def _as_reply(entry: ScriptEntry) -> Reply:
    return entry if isinstance(entry, Reply) else Reply(status=int(entry))
