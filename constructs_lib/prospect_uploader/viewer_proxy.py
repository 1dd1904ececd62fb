"""A local SigV4-signing proxy for the Prospect Viewer's IAM-authenticated Function URL.

The viewer's Function URL uses ``AWS_IAM`` auth, so nothing reaches it without a
signature, and a browser cannot sign. An operator runs this proxy on their own
machine with their own AWS credentials (any principal allowed
``lambda:InvokeFunctionUrl`` on the viewer) and opens ``http://127.0.0.1:PORT``::

    prospect-uploader viewer https://abc123.lambda-url.eu-west-1.on.aws/

It listens on loopback only, forwards every request to that one URL, signs it
with SigV4 for the ``lambda`` service, and drops the browser's own cookies and
authorization headers, so nothing but the operator's credentials authenticates.
"""

from __future__ import annotations

import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_URL_REGION = re.compile(r"\.lambda-url\.([a-z0-9-]+)\.on\.aws$")
# Hop-by-hop and identity headers never forwarded to the function.
_DROPPED = {"host", "connection", "authorization", "cookie", "content-length", "keep-alive",
            "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade"}  # fmt: skip
_MAX_BODY = 1024 * 1024


class ViewerProxyError(ValueError):
    """The target URL or region is unusable; the message says which and why."""


def region_of(function_url: str) -> str:
    """The region in a Function URL's host, e.g. ``eu-west-1``."""
    host = urllib.parse.urlsplit(function_url).hostname or ""
    match = _URL_REGION.search(host)
    if not match:
        raise ViewerProxyError(
            f"cannot tell the region from {function_url!r}; expected "
            "https://<id>.lambda-url.<region>.on.aws/ or pass region="
        )
    return match.group(1)


class SigningProxy:
    """Serve ``127.0.0.1:port`` and forward each request, SigV4-signed, to ``function_url``.

    :param function_url: the viewer's Function URL (the stack output ``ViewerUrl``).
    :param credentials: botocore credentials. Default: the standard AWS credential chain.
    :param region: default: read from the URL's host.
    :param port: default 0 (any free port; see :attr:`url`).
    """

    def __init__(
        self,
        function_url: str,
        *,
        credentials: Any = None,
        region: str | None = None,
        port: int = 0,
    ) -> None:
        parts = urllib.parse.urlsplit(function_url)
        if parts.scheme not in {"https", "http"} or not parts.hostname:
            raise ViewerProxyError(f"function_url must be an https URL, got {function_url!r}")
        self.target = f"{parts.scheme}://{parts.netloc}"
        self.region = region or region_of(function_url)
        if credentials is None:
            import botocore.session

            credentials = botocore.session.get_session().get_credentials()
            if credentials is None:
                raise ViewerProxyError(
                    "no AWS credentials found; configure a profile or environment credentials "
                    "allowed lambda:InvokeFunctionUrl on the viewer"
                )
        self._credentials = credentials
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Where to point the browser."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/"

    def start(self) -> SigningProxy:
        """Serve in a background thread."""
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted."""
        self._server.serve_forever()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> SigningProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def signed_request(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> urllib.request.Request:
        """The upstream request for one incoming request, signed for the ``lambda`` service."""
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        kept = {k: v for k, v in headers.items() if k.lower() not in _DROPPED}
        aws_request = AWSRequest(method=method, url=self.target + path, data=body, headers=kept)
        SigV4Auth(self._credentials, "lambda", self.region).add_auth(aws_request)
        return urllib.request.Request(
            aws_request.url,
            data=body or None,
            headers=dict(aws_request.headers.items()),
            method=method,
        )

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                """Quiet: the proxy would otherwise log every request to stderr."""

            def _forward(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                if length > _MAX_BODY:
                    self.send_error(413, "request body too large")
                    return
                body = self.rfile.read(length) if length else b""
                request = proxy.signed_request(self.command, self.path, dict(self.headers), body)
                try:
                    with urllib.request.urlopen(request, timeout=30) as response:
                        status, headers, payload = (
                            response.status,
                            response.headers,
                            response.read(),
                        )
                except urllib.error.HTTPError as error:
                    status, headers, payload = error.code, error.headers, error.read()
                except urllib.error.URLError as error:
                    self.send_error(502, f"viewer unreachable: {error.reason}")
                    return
                self.send_response(status)
                for name, value in headers.items():
                    if name.lower() not in {"connection", "transfer-encoding", "content-length"}:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _forward  # http.server dispatches on these names

        return Handler
