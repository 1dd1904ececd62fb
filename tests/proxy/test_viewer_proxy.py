"""The local SigV4 proxy in front of the viewer's IAM-authenticated Function URL."""

from __future__ import annotations

import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from constructs_lib.prospect_uploader.viewer_proxy import SigningProxy, ViewerProxyError, region_of

CREDS = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")


class Upstream:
    """A stand-in Function URL on 127.0.0.1 that records what reached it."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict, bytes]] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                upstream.requests.append((self.command, self.path, dict(self.headers), body))
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            do_GET = do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def upstream():
    server = Upstream()
    yield server
    server.close()


def test_region_is_read_from_the_function_url():
    assert region_of("https://abc123.lambda-url.eu-west-1.on.aws/") == "eu-west-1"


def test_a_url_without_a_region_is_refused_with_the_reason():
    with pytest.raises(ViewerProxyError, match="cannot tell the region"):
        region_of("https://example.com/")


def test_requests_are_forwarded_signed_for_lambda(upstream):
    with SigningProxy(upstream.url, credentials=CREDS, region="eu-west-1") as proxy:
        request = urllib.request.Request(
            proxy.url + "api/failures?upload_id=u1",
            headers={"Cookie": "session=stolen", "Authorization": "Bearer browser"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.read() == b"ok"
    method, path, headers, _ = upstream.requests[0]
    assert (method, path) == ("GET", "/api/failures?upload_id=u1")
    assert (
        headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
        and "/eu-west-1/lambda/aws4_request" in headers["Authorization"]
    )
    assert "Cookie" not in headers


def test_signature_verifies_for_the_forwarded_request(upstream):
    with SigningProxy(upstream.url, credentials=CREDS, region="eu-west-1") as proxy:
        body = b'{"upload_id": "u1", "failure_id": "model#00000001"}'
        request = urllib.request.Request(
            proxy.url + "api/retry", data=body, method="POST",
            headers={"Content-Type": "application/json", "X-Requested-With": "viewer"},
        )  # fmt: skip
        urllib.request.urlopen(request, timeout=10).read()
    method, path, headers, received = upstream.requests[0]
    # Re-sign what arrived, at the same timestamp: the signatures must match.
    signed_headers = headers["Authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")
    check = AWSRequest(
        method=method, url=upstream.url.rstrip("/") + path, data=received,
        headers={k: v for k, v in headers.items() if k.lower() in signed_headers},
    )  # fmt: skip
    # add_auth() would stamp the current time; sign at the proxy's timestamp instead.
    check.context["timestamp"] = headers["X-Amz-Date"]
    auth = SigV4Auth(CREDS, "lambda", "eu-west-1")
    signature = auth.signature(auth.string_to_sign(check, auth.canonical_request(check)), check)
    assert headers["Authorization"].endswith(f"Signature={signature}")
    assert received == body


def test_proxy_listens_on_loopback_only(upstream):
    with SigningProxy(upstream.url, credentials=CREDS, region="eu-west-1") as proxy:
        assert proxy.url.startswith("http://127.0.0.1:")


def test_cli_viewer_refuses_a_url_without_a_region(capsys):
    from constructs_lib.prospect_uploader.cli import main

    assert main(["viewer", "https://example.com/"]) == 2
    assert "cannot tell the region" in capsys.readouterr().err
