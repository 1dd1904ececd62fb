"""The skeleton both scripted model fakes share (``FakeMessagesAPI``, ``FakeBedrockRuntime``).

A :class:`ScriptedServer` records every request and answers each from its *script*; a
:class:`ScriptedHandler` plays one script entry: ``"timeout"`` (hold, then close unanswered),
``"disconnect"`` (close at once), or a :class:`Reply` (wait its delay, then write the
provider's success or error body, whole or in chunks). Each fake adds only its wire shape:
the path, the authentication, the body check and the shape of its answers and errors.

Both answer as the model catalogue's model does (``constructs_lib.local_engine
.model_behaviour``): a request the model refuses is a 400 before the script is consulted, and
a 200 of a model that thinks carries a ``thinking`` block before the text, counted in
``max_tokens`` and ``output_tokens``. Standard library only.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, Generic, TypeVar

from constructs_lib.local_engine import model_behaviour
from constructs_lib.local_engine.loopback import LoopbackServer

ScriptEntry = Any  # int | str | Reply
Script = Sequence[ScriptEntry] | Callable[[int, dict[str, Any]], ScriptEntry]
#: What a fake records of one request.
R = TypeVar("R")
#: Output tokens of a scripted answer's text (the fakes' fixed usage: 12 in, 3 out).
TEXT_TOKENS = 3
INPUT_TOKENS = 12


@dataclass(frozen=True)
class Reply:
    """One scripted answer. ``body`` overrides the generated body; ``delay`` overrides the
    server-wide delay (seconds)."""

    #: The HTTP status. Default 200 (a success body); any other gives that status's error body.
    status: int = 200
    #: The answer of a 200. Default None: the server's ``text``.
    text: str | None = None
    #: The success body's ``stop_reason``. Default ``"end_turn"``; ``"refusal"`` answers as
    #: the model's safety classifiers do (no text, no thinking).
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
    #: Tokens the model thinks before the text. Default None: as the catalogue's model does
    #: (seeded by the request; none when it does not think); 0: no thinking block.
    thinking_tokens: int | None = None


class ScriptedServer(LoopbackServer, Generic[R]):
    """A loopback fake answering each request from ``script`` (entries in order, then 200;
    or a callable ``(index, body) -> entry``), holding on purpose on :attr:`stopping`.

    :param script: scripted entries or a callable. Default None: always 200.
    :param text: answer text for 200 replies. Default ``"warm"``.
    :param delay: seconds to wait before every answer. Default 0.
    :param timeout_sleep: seconds a ``"timeout"`` entry holds the request. Default 5.
    :param models: the model catalogue the fake answers as (``CATALOGUE`` of
        ``lambda_src/model_step/model_catalogue.py``, or a mapping of your own for a model it
        does not list yet). Default None: the library's catalogue.
    """

    def __init__(
        self,
        script: Script | None = None,
        *,
        text: str = "warm",
        delay: float = 0.0,
        timeout_sleep: float = 5.0,
        models: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        #: The script: change it between requests to answer differently.
        self.script: Script = script if script is not None else []
        #: Answer text of a 200 without its own.
        self.text = text
        #: Seconds before every answer.
        self.delay = delay
        #: Seconds a ``"timeout"`` entry holds its request.
        self.timeout_sleep = timeout_sleep
        #: The catalogue the fake answers as (None: the library's).
        self.models = models
        #: Every request received, in order.
        self.requests: list[R] = []
        #: The ``content``, ``stop_reason`` and ``usage`` of every generated 200 to a request
        #: (batch results are not kept: a batch may hold 100,000), in order.
        self.answered: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    @property
    def request_count(self) -> int:
        """Requests recorded so far."""
        with self._lock:
            return len(self.requests)

    @property
    def last_request(self) -> R:
        """The most recent recorded request; raises ``IndexError`` if none."""
        with self._lock:
            return self.requests[-1]

    def _record(self, request: R) -> int:
        with self._lock:
            self.requests.append(request)
            return len(self.requests) - 1

    def _entry_for(self, index: int, body: dict[str, Any]) -> ScriptEntry:
        if callable(self.script):
            return self.script(index, body)
        if index < len(self.script):
            return self.script[index]
        return 200

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self.stopping.wait(seconds)

    def model_spec(self, model: str) -> Any:
        """The catalogue row of ``model`` (None: a model the catalogue does not know)."""
        return model_behaviour.model_spec(model, self.models)

    def answer(self, spec: Any, body: Mapping[str, Any], reply: Reply) -> dict[str, Any]:
        """The ``content``, ``stop_reason`` and ``usage`` of a 200 to ``body``."""
        text = reply.text if reply.text is not None else self.text
        if spec is None:
            said = model_behaviour.Answer(
                [{"type": "text", "text": text}] if text else [], reply.stop_reason, TEXT_TOKENS
            )
        else:
            said = model_behaviour.answer(
                spec,
                body,
                text,
                text_tokens=TEXT_TOKENS if text else 0,
                thought_tokens=reply.thinking_tokens,
                stop_reason=reply.stop_reason,
            )
        return {
            "content": said.content,
            "stop_reason": said.stop_reason,
            "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": said.output_tokens},
        }

    def _answered(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Keep a generated 200 of a request in :attr:`answered`, and return it."""
        with self._lock:
            self.answered.append(
                {name: payload[name] for name in ("content", "stop_reason", "usage")}
            )
        return payload

    @property
    def last_usage(self) -> dict[str, int]:
        """The ``usage`` of the last generated 200 (thinking tokens in ``output_tokens``),
        with the cache counts the SDK reads as 0; raises ``IndexError`` if none."""
        with self._lock:
            usage = dict(self.answered[-1]["usage"])
        return {**usage, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


class ScriptedHandler(BaseHTTPRequestHandler):
    """A quiet HTTP/1.1 handler of a :class:`ScriptedServer` that writes JSON answers, whole
    or in chunks, and shrugs off a client that gave up."""

    protocol_version = "HTTP/1.1"
    server_state: ScriptedServer[Any]

    def log_message(self, format: str, *args: object) -> None:
        # Keep test output clean; the recorded requests are the log.
        return

    def handle(self) -> None:
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (its timeout or deadline) mid-request: nothing to do.
            self.close_connection = True

    def read_body(self) -> bytes:
        """The request's body, as ``content-length`` says."""
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def play(
        self,
        entry: ScriptEntry,
        as_reply: Callable[[ScriptEntry], Reply],
        respond: Callable[[Reply], tuple[dict[str, Any], dict[str, str]]],
    ) -> None:
        """Play one script entry: ``"timeout"`` and ``"disconnect"`` as their names say;
        anything else becomes a :class:`Reply` (``as_reply``), answered after its delay with
        the ``(payload, headers)`` of ``respond``."""
        state = self.server_state
        if entry == "timeout":
            state._wait(state.timeout_sleep)
            self.close_connection = True
            return
        if entry == "disconnect":
            self.close_connection = True
            return
        reply = as_reply(entry)
        state._wait(state.delay if reply.delay is None else reply.delay)
        payload, headers = respond(reply)
        self.write_json(reply.status, payload, headers, reply.chunks, reply.chunk_delay)

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
