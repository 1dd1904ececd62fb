"""Serve the viewer locally through the same Lambda handler.

Each http.server request becomes a Function URL payload 2.0 event, goes through
``handler.handler`` (or the function you pass) and the result is written back, so the
deployed page and the local page share one code path.

    python -m prospect_viewer.local_server --port 8000
"""

from __future__ import annotations

import argparse
import base64
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from . import handler as lambda_handler

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


def _request_handler(app: LambdaHandler) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        def _dispatch(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            event = to_function_url_event(
                self.command, self.path, dict(self.headers.items()), body, self.client_address[0]
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

        do_GET = do_POST = do_PUT = do_DELETE = _dispatch

        def log_message(self, *args: Any) -> None:
            pass  # Keep test and demo output quiet.

    return _Handler


class LocalServer:
    """A running local viewer: ``port``, ``url``, ``stop()``; also a context manager."""

    def __init__(self, httpd: ThreadingHTTPServer, thread: threading.Thread) -> None:
        self._httpd = httpd
        self._thread = thread
        self.host, self.port = httpd.server_address[:2]

    @property
    def url(self) -> str:
        """Base URL with a trailing slash, e.g. ``http://127.0.0.1:54321/``."""
        return f"http://{self.host}:{self.port}/"

    def stop(self) -> None:
        """Stop serving and join the thread."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def serve(host: str = "127.0.0.1", port: int = 0, app: LambdaHandler | None = None) -> LocalServer:
    """Start serving in a daemon thread and return at once.

    Defaults: 127.0.0.1 and an ephemeral port (0); the bound port is ``server.port``.
    ``app`` defaults to the Lambda handler, configured from the environment.
    """
    httpd = ThreadingHTTPServer((host, port), _request_handler(app or lambda_handler.handler))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, name="prospect-viewer", daemon=True)
    thread.start()
    return LocalServer(httpd, thread)


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
