"""Viewer API tests: the real handler, reached directly and through the local server."""

from __future__ import annotations

import csv
import io
import json
import urllib.error
import urllib.request

import pytest
from prospect_viewer.export import neutralise_cell
from prospect_viewer.handler import handler
from prospect_viewer.local_server import serve, to_function_url_event
from prospect_viewer.store import FailureFilter, encode_page_token

from .viewer_data import seed


def call(method, target, body=None, headers=None):
    raw = json.dumps(body).encode() if isinstance(body, dict) else (body or b"")
    event = to_function_url_event(
        method, target, {"host": "viewer.example", **(headers or {})}, raw, "127.0.0.1"
    )
    result = handler(event, None)
    return result["statusCode"], result["headers"], result["body"]


def get_json(target):
    status, _, body = call("GET", target)
    return status, json.loads(body)


POST_HEADERS = {"x-requested-with": "prospect-viewer", "content-type": "application/json"}


@pytest.fixture
def seeded(aws):
    seed(aws.failures_table)
    return aws


def test_page_is_self_contained_with_strict_headers(seeded):
    status, headers, body = call("GET", "/")

    assert status == 200
    assert headers["content-type"].startswith("text/html")
    assert headers["x-content-type-options"] == "nosniff"
    csp = headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'nonce-" in csp
    assert "unsafe-inline" not in csp
    assert "http://" not in body and "https://" not in body  # no external assets


def test_list_by_upload_skips_summaries(seeded):
    status, data = get_json("/api/failures?upload_id=alpha")

    assert status == 200
    assert [i["failure_id"] for i in data["items"]] == [
        "model#00000002",
        "row#00000001",
        "row#00000004",
    ]
    assert data["next_page_token"] is None
    assert [i["retryable"] for i in data["items"]] == [True, False, False]
    assert "original_event" not in data["items"][0]


def test_reason_filter_matches_code_or_reason_substring(seeded):
    _, by_code = get_json("/api/failures?reason=missingcompany")
    _, by_text = get_json("/api/failures?reason=TIMED%20OUT")

    assert {(i["upload_id"], i["failure_id"]) for i in by_code["items"]} == {
        ("alpha", "row#00000004"),
        ("beta", "row#00000003"),
    }
    assert [i["failure_id"] for i in by_text["items"]] == ["model#00000002"]


@pytest.mark.parametrize("upload", ["", "beta"])
def test_pagination_visits_every_failure_once(seeded, monkeypatch, upload):
    monkeypatch.setenv("PAGE_SIZE", "2")
    seen, token, pages = [], None, 0
    while True:
        query = f"/api/failures?upload_id={upload}" + (f"&page_token={token}" if token else "")
        status, data = get_json(query)
        assert status == 200 and len(data["items"]) <= 2
        seen += [(i["upload_id"], i["failure_id"]) for i in data["items"]]
        pages += 1
        token = data["next_page_token"]
        if not token:
            break
    expected = 3 if upload else 6
    assert len(seen) == len(set(seen)) == expected
    assert pages >= 2


def test_bad_page_tokens_are_refused(seeded):
    status, error = get_json("/api/failures?page_token=not-a-token")
    assert (status, error["error"]["code"]) == (400, "InvalidPageToken")

    alpha_token = encode_page_token(
        {"upload_id": "alpha", "failure_id": "row#00000001"}, FailureFilter("alpha", "")
    )
    status, error = get_json(f"/api/failures?upload_id=beta&page_token={alpha_token}")
    assert status == 400  # a token is bound to the filters it was issued for


def test_export_neutralises_formula_cells(seeded):
    status, headers, body = call("GET", "/export.csv?upload_id=beta")

    assert status == 200
    assert headers["content-disposition"].startswith("attachment;")
    rows = list(csv.reader(io.StringIO(body)))
    assert rows[0][:3] == ["upload_id", "failure_id", "kind"]
    first = dict(zip(rows[0], rows[1], strict=True))
    assert first["reason"] == '\'=HYPERLINK("http://evil.example")'
    assert first["raw_row"].startswith("'=1+2")
    assert len(rows) == 4  # header + three beta failures, no summary


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("=1+1", "'=1+1"),
        ("+1", "'+1"),
        ("-1", "'-1"),
        ("@x", "'@x"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        ("plain", "plain"),
        ("", ""),
        (None, ""),
        (7, "7"),
    ],
)
def test_neutralise_cell(cell, expected):
    assert neutralise_cell(cell) == expected


def test_retry_republishes_model_failure(seeded):
    seeded.drain_published()
    status, _, body = call(
        "POST", "/api/retry", {"upload_id": "alpha", "failure_id": "model#00000002"}, POST_HEADERS
    )

    assert status == 200, body
    assert json.loads(body)["retried"] is True
    published = seeded.drain_published()
    assert [(e["source"], e["detail-type"], e["detail"]) for e in published] == [
        (
            "prospect-uploader",
            "Prospect Row Validated",
            {"upload_id": "alpha", "row_number": 2, "email": "a@example.com"},
        )
    ]
    item = seeded.failures("alpha")["model#00000002"]
    assert item["retried_at"].endswith("Z") and int(item["retry_count"]) == 1


@pytest.mark.parametrize(
    ("payload", "headers", "status", "code"),
    [
        ({"upload_id": "alpha", "failure_id": "row#00000001"}, POST_HEADERS, 400, "NotRetryable"),
        (
            {"upload_id": "alpha", "failure_id": "model#09999999"},
            POST_HEADERS,
            400,
            "FailureNotFound",
        ),
        ({"upload_id": "alpha"}, POST_HEADERS, 400, "MissingKey"),
        (
            {"upload_id": "alpha", "failure_id": "model#00000002"},
            {"content-type": "application/json"},
            403,
            "CsrfHeaderMissing",
        ),
        (
            {"upload_id": "alpha", "failure_id": "model#00000002"},
            {**POST_HEADERS, "origin": "https://evil.example"},
            403,
            "CrossOrigin",
        ),
        (
            {"upload_id": "alpha", "failure_id": "model#00000002"},
            {**POST_HEADERS, "content-type": "text/plain"},
            415,
            "UnsupportedMediaType",
        ),
    ],
    ids=["validation", "missing", "no-key", "no-csrf-header", "cross-origin", "text-plain"],
)
def test_retry_refusals(seeded, payload, headers, status, code):
    got_status, _, body = call("POST", "/api/retry", payload, headers)

    assert (got_status, json.loads(body)["error"]["code"]) == (status, code)
    assert seeded.drain_published() == []


def test_unknown_route_and_wrong_method(seeded):
    assert call("GET", "/nope")[0] == 404
    status, headers, _ = call("GET", "/api/retry")
    assert (status, headers["allow"]) == (405, "POST")


def test_local_server_uses_the_same_handler(seeded):
    # No proxies: the local server is on 127.0.0.1 and nothing may leave the machine.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with serve() as server:
        with opener.open(server.url + "api/failures?upload_id=beta", timeout=5) as r:
            data = json.load(r)
            assert r.headers["x-content-type-options"] == "nosniff"
        request = urllib.request.Request(
            server.url + "api/retry",
            data=json.dumps({"upload_id": "beta", "failure_id": "row#00000002"}).encode(),
            headers=POST_HEADERS,
            method="POST",
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            opener.open(request, timeout=5)
    assert len(data["items"]) == 3
    assert refused.value.code == 400


def _raw(port, data, timeout=5.0):
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data.encode())
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    response = b"".join(chunks)
    return int(response.split(b" ", 2)[1]), response


@pytest.mark.parametrize(
    ("request_text", "status"),
    [
        # A DNS-rebinding page reaches 127.0.0.1 under its own name.
        ("GET /t/{token}/api/failures HTTP/1.1\r\nHost: attacker.example:{port}\r\n\r\n", 421),
        (
            "POST /t/{token}/api/retry HTTP/1.1\r\nHost: attacker.example:{port}\r\n"
            "Content-Type: application/json\r\nX-Requested-With: x\r\nContent-Length: 55\r\n\r\n"
            '{"upload_id": "alpha", "failure_id": "model#00000002"}',
            421,
        ),
        ("GET /api/failures HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n", 404),
        ("GET 1:80/x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n", 400),
        (
            "POST /t/{token}/api/retry HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Content-Length: -5\r\n\r\n",
            400,
        ),
        (
            "POST /t/{token}/api/retry HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Origin: https://evil.example\r\nContent-Length: 0\r\n\r\n",
            403,
        ),
    ],
    ids=["rebinding-get", "rebinding-retry", "no-token", "no-slash", "negative-length", "origin"],
)
def test_local_server_refuses_what_the_proxy_refuses(seeded, request_text, status):
    seeded.drain_published()
    with serve() as server:
        text = request_text.replace("{port}", str(server.port)).replace("{token}", server.token)
        got, response = _raw(server.port, text)
    assert got == status, response
    assert seeded.drain_published() == []


def test_local_server_answers_on_localhost_too(seeded):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with serve() as server:
        url = server.url.replace("127.0.0.1", "localhost")
        with opener.open(url + "api/failures?upload_id=beta", timeout=5) as r:
            assert len(json.load(r)["items"]) == 3
