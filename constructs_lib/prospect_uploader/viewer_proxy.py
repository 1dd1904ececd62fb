"""A local SigV4-signing proxy for the Prospect Viewer's IAM-authenticated Function URL.

The viewer's Function URL uses ``AWS_IAM`` auth, so nothing reaches it without a
signature, and a browser cannot sign. An operator runs this proxy on their own
machine with their own AWS credentials (any principal allowed
``lambda:InvokeFunctionUrl`` on the viewer)::

    prospect-uploader viewer https://abc123.lambda-url.eu-west-1.on.aws/

and opens the URL it prints, ``http://127.0.0.1:PORT/t/<token>/``. The token is new
on every start; without it the proxy answers 404 and forwards nothing, so another
user of the machine, or a web page probing local ports, cannot use the operator's
credentials. The proxy listens on loopback only and forwards a request only when its
Host is the proxy's own loopback address (DNS rebinding sends another name), its
target is a path, its route and method are the viewer's, its Origin (if any) is the
proxy's own and its Content-Length is sane: see ``prospect_viewer.loopback``. A
forwarded request carries only the headers the viewer reads (never the browser's
cookies or authorization), the Origin of the Function URL itself (so the viewer's
same-origin check on Retry passes), and a SigV4 signature for the ``lambda`` service.
"""

from __future__ import annotations

import re
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, BinaryIO, cast

from lambda_src.prospect_viewer.loopback import Refusal, check_request, new_token, read_body

_URL_REGION = re.compile(r"\.lambda-url\.([a-z0-9-]+)\.on\.aws$")
# The only request headers forwarded (all others, cookies included, are dropped).
_FORWARDED = ("accept", "content-type", "x-requested-with")
# Response headers that describe the upstream connection, not the answer.
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "upgrade"}
UPSTREAM_TIMEOUT_SECONDS = 35  # the viewer's Lambda timeout is 30 s
CLIENT_TIMEOUT_SECONDS = 30  # a browser that stops mid-request frees its thread


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
    """Serve ``127.0.0.1:port`` and forward allowed requests, SigV4-signed, to ``function_url``.

    :param function_url: the viewer's Function URL (the stack output ``ViewerUrl``); https only.
    :param credentials: botocore credentials. Default: the standard AWS credential chain.
    :param region: default: read from the URL's host.
    :param port: default 0 (any free port; see :attr:`url`).
    :param ssl_context: verifies the Function URL's certificate (default: the system's CAs).
    :param token: the URL secret; default a new random one per start.
    """

    def __init__(
        self,
        function_url: str,
        *,
        credentials: Any = None,
        region: str | None = None,
        port: int = 0,
        ssl_context: ssl.SSLContext | None = None,
        token: str | None = None,
    ) -> None:
        parts = urllib.parse.urlsplit(function_url)
        if parts.scheme != "https" or not parts.hostname:
            raise ViewerProxyError(
                f"function_url must be an https:// URL (the stack output ViewerUrl), "
                f"got {function_url!r}"
            )
        if parts.username or parts.password:
            raise ViewerProxyError("function_url must not carry a user name or password")
        self.target = f"https://{parts.netloc}"
        self.upstream_origin = self.target
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
        self._opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}),  # never via an environment proxy
            urllib.request.HTTPSHandler(context=ssl_context or ssl.create_default_context()),
        )
        self.token = token or new_token()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Where to point the browser: loopback, with this start's secret path prefix."""
        return f"http://127.0.0.1:{self.port}/t/{self.token}/"

    def start(self) -> SigningProxy:
        """Serve in a background thread."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )
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
        self, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> urllib.request.Request:
        """The upstream request for one accepted request, signed for the ``lambda`` service.

        ``target`` is the viewer's own path and query (token prefix already removed).
        Only ``_FORWARDED`` headers pass; a present Origin becomes the Function URL's.
        """
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        lowered = {k.lower(): v for k, v in headers.items()}
        kept = {name: lowered[name] for name in _FORWARDED if name in lowered}
        if "origin" in lowered:
            kept["origin"] = self.upstream_origin
        aws_request = AWSRequest(method=method, url=self.target + target, data=body, headers=kept)
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
            timeout = CLIENT_TIMEOUT_SECONDS

            def log_message(self, format: str, *args: object) -> None:
                """Quiet: the proxy would otherwise log every request to stderr."""

            def _refuse(self, refusal: Refusal) -> None:
                # The body (if any) is never read, so the connection cannot be reused.
                self.close_connection = True
                data = (refusal.reason + "\n").encode()
                self.send_response(refusal.status)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("X-Content-Type-Options", "nosniff")
                self.send_header("Cache-Control", "no-store")
                if refusal.allow:
                    self.send_header("Allow", refusal.allow)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)

            def _forward(self) -> None:
                decision = check_request(
                    self.command, self.path, self.headers, port=proxy.port, token=proxy.token
                )
                if isinstance(decision, Refusal):
                    self._refuse(decision)
                    return
                # rfile is a BufferedIOBase; read_body only calls read(n) on it.
                body = read_body(decision, cast(BinaryIO, self.rfile))
                if isinstance(body, Refusal):
                    self._refuse(body)
                    return
                request = proxy.signed_request(
                    self.command, decision.target, dict(self.headers.items()), body
                )
                try:
                    with proxy._opener.open(request, timeout=UPSTREAM_TIMEOUT_SECONDS) as response:
                        status, headers, payload = (
                            response.status,
                            response.headers,
                            response.read(),
                        )
                except urllib.error.HTTPError as error:
                    status, headers, payload = error.code, error.headers, error.read()
                except (urllib.error.URLError, OSError) as error:
                    reason = getattr(error, "reason", error)
                    self._refuse(Refusal(502, f"viewer unreachable: {reason}"))
                    return
                self.send_response(status)
                for name, value in headers.items():
                    if name.lower() not in _HOP_BY_HOP:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            # http.server dispatches on these names (others get its 501); a method the
            # route does not take is refused with 405 by check_request.
            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _forward

        return Handler
