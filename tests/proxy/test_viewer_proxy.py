"""The local SigV4 proxy in front of the viewer's IAM-authenticated Function URL.

Everything goes over real loopback HTTP: the browser side is urllib or a raw socket,
the Function URL is an HTTPS server on 127.0.0.1 with a throwaway certificate.
"""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from constructs_lib.prospect_uploader.viewer_proxy import SigningProxy, ViewerProxyError, region_of

from .tls import HttpsUpstream, client_context

CREDS = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
# No environment proxies: everything stays on 127.0.0.1.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture
def upstream():
    server = HttpsUpstream()
    yield server
    server.close()


@pytest.fixture
def proxy(upstream):
    with SigningProxy(
        upstream.url, credentials=CREDS, region="eu-west-1", ssl_context=client_context()
    ) as running:
        yield running


def raw_request(port: int, data: bytes, timeout: float = 5.0) -> tuple[int, bytes]:
    """Send ``data`` as is and read until the proxy closes; never waits past ``timeout``."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while True:
            chunk = sock.recv(65536)  # raises TimeoutError rather than hang
            if not chunk:
                break
            chunks.append(chunk)
    response = b"".join(chunks)
    status = int(response.split(b" ", 2)[1])
    return status, response


def test_region_is_read_from_the_function_url():
    assert region_of("https://abc123.lambda-url.eu-west-1.on.aws/") == "eu-west-1"


def test_a_url_without_a_region_is_refused_with_the_reason():
    with pytest.raises(ViewerProxyError, match="cannot tell the region"):
        region_of("https://example.com/")


@pytest.mark.parametrize(
    "url",
    [
        "http://abc123.lambda-url.eu-west-1.on.aws/",
        "ftp://abc123.lambda-url.eu-west-1.on.aws/",
        "abc123.lambda-url.eu-west-1.on.aws",
        "https://user:pw@abc123.lambda-url.eu-west-1.on.aws/",
    ],
)
def test_only_a_plain_https_function_url_is_accepted(url):
    with pytest.raises(ViewerProxyError, match="https://|user name"):
        SigningProxy(url, credentials=CREDS)


def test_cli_viewer_refuses_an_http_url(capsys):
    from constructs_lib.prospect_uploader.cli import main

    assert main(["viewer", "http://abc123.lambda-url.eu-west-1.on.aws/"]) == 2
    assert "must be an https:// URL" in capsys.readouterr().err


def test_cli_viewer_refuses_a_url_without_a_region(capsys):
    from constructs_lib.prospect_uploader.cli import main

    assert main(["viewer", "https://example.com/"]) == 2
    assert "cannot tell the region" in capsys.readouterr().err


def test_printed_url_is_loopback_with_a_fresh_secret(upstream):
    kwargs = {"credentials": CREDS, "region": "eu-west-1", "ssl_context": client_context()}
    with SigningProxy(upstream.url, **kwargs) as one, SigningProxy(upstream.url, **kwargs) as two:
        assert one.url.startswith(f"http://127.0.0.1:{one.port}/t/")
        assert one.url.endswith("/") and len(one.token) >= 32
        assert one.token != two.token


def test_requests_are_forwarded_signed_for_lambda(proxy, upstream):
    request = urllib.request.Request(
        proxy.url + "api/failures?upload_id=u1",
        headers={
            "Cookie": "session=stolen",
            "Authorization": "Bearer browser",
            "X-Forwarded-For": "10.0.0.1",
            "Accept": "application/json",
        },
    )
    with OPENER.open(request, timeout=10) as response:
        assert response.read() == b"ok"
    method, path, headers, _ = upstream.requests[0]
    assert (method, path) == ("GET", "/api/failures?upload_id=u1")  # token prefix removed
    assert (
        headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
        and "/eu-west-1/lambda/aws4_request" in headers["Authorization"]
    )
    assert headers["Host"] == f"127.0.0.1:{upstream.port}"
    assert headers["Accept"] == "application/json"
    assert "Cookie" not in headers and "X-Forwarded-For" not in headers


def test_localhost_is_the_same_proxy(proxy, upstream):
    url = proxy.url.replace("127.0.0.1", "localhost")
    with OPENER.open(url + "api/failures", timeout=10) as response:
        assert response.status == 200
    assert len(upstream.requests) == 1


def test_origin_is_rewritten_to_the_function_urls_own(proxy, upstream):
    body = b'{"upload_id": "u1", "failure_id": "model#00000001", "expected_generation": 0}'
    request = urllib.request.Request(
        proxy.url + "api/retry", data=body, method="POST",
        headers={"Content-Type": "application/json", "X-Requested-With": "prospect-viewer",
                 "Origin": f"http://127.0.0.1:{proxy.port}"},
    )  # fmt: skip
    OPENER.open(request, timeout=10).read()
    _, _, headers, received = upstream.requests[0]
    assert headers["Origin"] == f"https://127.0.0.1:{upstream.port}"
    assert headers["Origin"].split("://")[1] == headers["Host"]  # what the viewer compares
    assert received == body


def test_signature_verifies_for_the_forwarded_request(proxy, upstream):
    body = b'{"upload_id": "u1", "failure_id": "model#00000001"}'
    request = urllib.request.Request(
        proxy.url + "api/retry", data=body, method="POST",
        headers={"Content-Type": "application/json", "X-Requested-With": "viewer"},
    )  # fmt: skip
    OPENER.open(request, timeout=10).read()
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


def _refused_cases():
    # (id, request bytes with {port} and {token} placeholders, expected status)
    ok_headers = "Host: 127.0.0.1:{port}\r\n"
    post = (
        "POST /t/{token}/api/retry HTTP/1.1\r\n" + ok_headers
        + "Content-Type: application/json\r\nX-Requested-With: x\r\n"
    )  # fmt: skip
    return [
        ("dns-rebinding-host", "GET /t/{token}/api/failures HTTP/1.1\r\n"
         "Host: attacker.example:{port}\r\n\r\n", 421),
        ("rebinding-export", "GET /t/{token}/export.csv HTTP/1.1\r\n"
         "Host: attacker.example:{port}\r\n\r\n", 421),
        ("other-port-host", "GET /t/{token}/api/failures HTTP/1.1\r\n"
         "Host: 127.0.0.1:1\r\n\r\n", 421),
        ("no-host-http10", "GET /t/{token}/api/failures HTTP/1.0\r\n\r\n", 421),
        ("target-without-slash", "GET 1:43803/steal HTTP/1.1\r\n" + ok_headers + "\r\n", 400),
        ("absolute-form-target", "GET http://evil.example/t/{token}/ HTTP/1.1\r\n"
         + ok_headers + "\r\n", 400),
        # http.server itself collapses a leading "//" into "/": then there is no token.
        ("network-path-target", "GET //evil.example/api/failures HTTP/1.1\r\n"
         + ok_headers + "\r\n", 404),
        ("no-token", "GET /api/failures HTTP/1.1\r\n" + ok_headers + "\r\n", 404),
        ("wrong-token", "GET /t/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA/api/failures HTTP/1.1\r\n"
         + ok_headers + "\r\n", 404),
        ("unknown-route", "GET /t/{token}/admin HTTP/1.1\r\n" + ok_headers + "\r\n", 404),
        ("traversal", "GET /t/{token}/../api/failures HTTP/1.1\r\n" + ok_headers + "\r\n", 404),
        ("get-on-post-route", "GET /t/{token}/api/retry HTTP/1.1\r\n" + ok_headers + "\r\n", 405),
        ("put-method", "PUT /t/{token}/api/failures HTTP/1.1\r\n" + ok_headers
         + "Content-Length: 0\r\n\r\n", 405),
        ("foreign-origin", post + "Origin: https://evil.example\r\nContent-Length: 2\r\n\r\n{}",
         403),
        ("null-origin", post + "Origin: null\r\nContent-Length: 2\r\n\r\n{}", 403),
        ("negative-length", post + "Content-Length: -1\r\n\r\n", 400),
        ("non-numeric-length", post + "Content-Length: abc\r\n\r\n", 400),
        ("plus-signed-length", post + "Content-Length: +5\r\n\r\n", 400),
        ("repeated-length", post + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400),
        ("chunked-body", post + "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 400),
        ("oversized-length", post + "Content-Length: 1000000000\r\n\r\n", 413),
        ("5000-digit-length", post + "Content-Length: " + "9" * 5000 + "\r\n\r\n", 413),
    ]  # fmt: skip


@pytest.mark.parametrize(("data", "status"), [c[1:] for c in _refused_cases()],
                         ids=[c[0] for c in _refused_cases()])  # fmt: skip
def test_refused_requests_are_answered_at_once_and_never_forwarded(proxy, upstream, data, status):
    got, response = raw_request(
        proxy.port, data.replace("{port}", str(proxy.port)).replace("{token}", proxy.token).encode()
    )

    assert got == status, response
    assert b"Connection: close" in response
    assert upstream.requests == []


def test_a_body_shorter_than_its_length_times_out_without_forwarding(upstream, monkeypatch):
    from constructs_lib.prospect_uploader import viewer_proxy

    monkeypatch.setattr(viewer_proxy, "CLIENT_TIMEOUT_SECONDS", 1)
    with SigningProxy(
        upstream.url, credentials=CREDS, region="eu-west-1", ssl_context=client_context()
    ) as slow:
        data = (
            f"POST /t/{slow.token}/api/retry HTTP/1.1\r\nHost: 127.0.0.1:{slow.port}\r\n"
            "Content-Type: application/json\r\nContent-Length: 50\r\n\r\n{}"
        ).encode()
        with socket.create_connection(("127.0.0.1", slow.port), timeout=5) as sock:
            sock.sendall(data)
            assert sock.recv(65536) == b""  # closed by the proxy after its 1 s timeout
    assert upstream.requests == []


def test_an_unreachable_viewer_is_a_502(upstream):
    upstream.close()
    with SigningProxy(
        upstream.url, credentials=CREDS, region="eu-west-1", ssl_context=client_context()
    ) as proxy:
        with pytest.raises(urllib.error.HTTPError) as error:
            OPENER.open(proxy.url + "api/failures", timeout=10)
    assert error.value.code == 502


def test_an_untrusted_certificate_is_not_forwarded_to(upstream):
    # The system CAs do not trust the throwaway certificate: no request is sent.
    with SigningProxy(upstream.url, credentials=CREDS, region="eu-west-1") as proxy:
        with pytest.raises(urllib.error.HTTPError) as error:
            OPENER.open(proxy.url + "api/failures", timeout=10)
    assert error.value.code == 502
    assert upstream.requests == []
