"""Serve the viewer locally through the same Lambda handler.

Each http.server request becomes a Function URL payload 2.0 event, goes through
``handler.handler`` (or the function you pass) and the result is written back, so the
deployed page and the local page share one code path. The server answers only to its
own loopback Host and under the per-start secret path it prints (see ``loopback``).

    python -m prospect_viewer.local_server --port 8000
"""

from __future__ import annotations

import argparse
import base64
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from . import handler as lambda_handler
from .loopback import TOKEN_PREFIX, Refusal, check_request, new_token, read_body

LambdaHandler = Callable[[dict[str, Any], Any], dict[str, Any]]


def to_function_url_event(
    method: str, target: str, headers: dict[str, str], body: bytes, client_ip: str
) -> dict[str, Any]:
    """A payload 2.0 event as a Function URL would send it (body always base64)."""
    parts = urlsplit(target)
    lowered = {name.lower(): value for name, value in headers.items()}
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": parts.path or "/",
        "rawQueryString": parts.query,
        "headers": lowered,
        "requestContext": {
            "http": {"method": method, "path": parts.path or "/", "sourceIp": client_ip},
        },
        "body": base64.b64encode(body).decode() if body else None,
        "isBase64Encoded": bool(body),
    }


def _request_handler(app: LambdaHandler, guard: _Guard) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        timeout = 30  # a client that stops mid-request frees its thread

        def _refuse(self, refusal: Refusal) -> None:
            # The body (if any) is never read, so the connection cannot be reused.
            self.close_connection = True
            data = (refusal.reason + "\n").encode()
            self.send_response(refusal.status)
            self.send_header("content-type", "text/plain; charset=utf-8")
            self.send_header("x-content-type-options", "nosniff")
            self.send_header("cache-control", "no-store")
            if refusal.allow:
                self.send_header("allow", refusal.allow)
            self.send_header("content-length", str(len(data)))
            self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(data)

        def _dispatch(self) -> None:
            decision = check_request(
                self.command, self.path, self.headers, port=guard.port, token=guard.token
            )
            if isinstance(decision, Refusal):
                self._refuse(decision)
                return
            body = read_body(decision, self.rfile)
            if isinstance(body, Refusal):
                self._refuse(body)
                return
            event = to_function_url_event(
                self.command,
                decision.target,
                dict(self.headers.items()),
                body,
                self.client_address[0],
            )
            result = app(event, None)
            payload = result.get("body") or ""
            data = (
                base64.b64decode(payload)
                if result.get("isBase64Encoded")
                else str(payload).encode("utf-8")
            )
            self.send_response(int(result.get("statusCode", 200)))
            for name, value in (result.get("headers") or {}).items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _dispatch

        def log_message(self, *args: Any) -> None:
            pass  # Keep test and demo output quiet.

    return _Handler


class _Server(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` that lets a client hang up quietly.

    A browser drops a connection it no longer needs (a page navigated away, a prefetch, a
    second keep-alive socket), and writing the answer then raises ``BrokenPipeError`` or
    ``ConnectionResetError``; ``socketserver`` printed each as a traceback. Nothing is lost:
    the client is gone. Every other error is printed as before."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


@dataclass
class _Guard:
    port: int
    token: str


class LocalServer:
    """A running local viewer: ``port``, ``token``, ``url``, ``stop()``; a context manager."""

    def __init__(self, httpd: ThreadingHTTPServer, thread: threading.Thread, token: str) -> None:
        self._httpd = httpd
        self._thread = thread
        self.host, self.port = httpd.server_address[:2]
        self.token = token

    @property
    def url(self) -> str:
        """Where to point the browser: ``http://127.0.0.1:PORT/t/<token>/``."""
        return f"http://127.0.0.1:{self.port}{TOKEN_PREFIX}{self.token}/"

    def stop(self) -> None:
        """Stop serving and join the thread."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    app: LambdaHandler | None = None,
    token: str | None = None,
) -> LocalServer:
    """Start serving in a daemon thread and return at once.

    Defaults: 127.0.0.1 and an ephemeral port (0); the bound port is ``server.port``.
    ``app`` defaults to the Lambda handler, configured from the environment. ``token``
    defaults to a new random secret; only ``server.url`` (which contains it) works.
    Requests are checked by ``prospect_viewer.loopback`` (Host, target, token, route,
    Origin, Content-Length) before the handler sees them.
    """
    guard = _Guard(port=0, token=token or new_token())
    handler_class = _request_handler(app or lambda_handler.handler, guard)
    httpd = _Server((host, port), handler_class)
    guard.port = httpd.server_address[1]
    httpd.daemon_threads = True
    thread = threading.Thread(
        target=httpd.serve_forever,
        kwargs={"poll_interval": 0.1},
        name="prospect-viewer",
        daemon=True,
    )
    thread.start()
    return LocalServer(httpd, thread, guard.token)


def main() -> None:
    """Serve until interrupted (uses the AWS credentials and env vars of the shell)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    server = serve(args.host, args.port)
    print(f"Prospect Viewer on {server.url} (Ctrl-C to stop)")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
