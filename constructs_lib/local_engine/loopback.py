"""A threaded HTTP server on 127.0.0.1: the lifecycle every local stand-in shares."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


def send_json(
    handler: BaseHTTPRequestHandler,
    status: int,
    payload: Any,
    headers: Mapping[str, str] | None = None,
) -> None:
    """Answer ``payload`` as JSON with ``status`` and ``headers`` (an empty value is left
    out). A client that already gave up (its own timeout) is not an error."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(data)))
    for name, value in (headers or {}).items():
        if value:
            handler.send_header(name, value)
    handler.end_headers()
    try:
        handler.wfile.write(data)
    except (BrokenPipeError, ConnectionResetError):
        pass


class _QuietServer(ThreadingHTTPServer):
    """A client that went away (its deadline, or a killed invocation that closed the
    connection unread) is normal here, not a traceback on stderr."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class LoopbackServer:
    """Serve :meth:`handler_class` on 127.0.0.1, on a free port, in a daemon thread.

    Subclasses implement :meth:`handler_class`. Requests that hold on purpose (a
    simulated timeout) wait on :attr:`stopping`, so :meth:`stop` returns at once.
    Use it as a context manager or call :meth:`start` / :meth:`stop`.
    """

    thread_name = "loopback-server"

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        """The request handler class bound to this server's state."""
        raise NotImplementedError

    def start(self) -> Self:
        """Bind 127.0.0.1 on a free port and serve on a daemon thread."""
        self.stopping.clear()
        self._server = _QuietServer(("127.0.0.1", 0), self.handler_class())
        self._server.daemon_threads = True
        # A short poll interval makes stop() return quickly (the default is 0.5 s).
        threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=self.thread_name,
            daemon=True,
        ).start()
        return self

    def stop(self) -> None:
        """Stop serving; wakes requests held by a simulated timeout."""
        self.stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``: the value for ``ANTHROPIC_BASE_URL``."""
        if self._server is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return f"http://127.0.0.1:{self._server.server_port}"
