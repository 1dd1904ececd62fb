"""Viewer API tests: the real handler, reached directly and through the local server."""

from __future__ import annotations

import base64
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

from constructs_lib.local_engine.moto_fixes import atomic_dynamodb_writes

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
RETRY_ALPHA = {"upload_id": "alpha", "failure_id": "model#00000002", "expected_generation": 0}


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


def test_export_quotes_every_field(seeded):
    # GIVEN failures whose values hold separators  WHEN exported
    _status, _headers, body = call("GET", "/export.csv?upload_id=beta")
    # THEN every field of every line is quoted, so no reader splits one (issue 34)
    for line in body.split("\r\n")[:-1]:
        fields = next(csv.reader(io.StringIO(line)))
        rendered = io.StringIO()
        csv.writer(rendered, quoting=csv.QUOTE_ALL, lineterminator="").writerow(fields)
        assert line == rendered.getvalue()


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
        (" =1+1", "' =1+1"),
        ("\u00a0=1+1", "'\u00a0=1+1"),
        # A line break can start a cell too: the quote goes first and after it (issue 34).
        ("\n=1+1", "'\n'=1+1"),
        ("\r\n+1", "'\r\n'+1"),
        ("  \t @cmd", "'  \t' @cmd"),
        ("\u3000=1", "'\u3000=1"),
        ("\u200b=1", "'\u200b=1"),
        ("\ufeff=1", "'\ufeff=1"),
        ("\uff1d1+1", "'\uff1d1+1"),  # ＝
        ("\uff0b1", "'\uff0b1"),  # ＋
        ("\uff0d1", "'\uff0d1"),  # －
        ("\uff20cmd", "'\uff20cmd"),  # ＠
        ("\ufe661", "'\ufe661"),  # small ﹦
        ("\u22121", "'\u22121"),  # minus sign
        (" \uff1d1", "' \uff1d1"),
        (" hello", " hello"),
        ("a=b", "a=b"),
        ("\uff11\uff12", "\uff11\uff12"),  # full-width digits are not formulas
        ("#tag", "#tag"),
        ("plain", "plain"),
        # Inside a cell, wherever another reader could start one (issue 34): after a
        # separator of any locale, a quote or a line break.
        ("x;=cmd|' /C calc'!A0", "x;'=cmd|' /C calc'!A0"),
        ("x,=1", "x,'=1"),
        ("x\t@SUM(A1)", "x\t'@SUM(A1)"),
        ("x|+1", "x|'+1"),
        ('x"=1', "x\"'=1"),
        ("x'-1", "x''-1"),
        ("x\n  \u200b=1", "x\n'  \u200b=1"),
        ("x; \uff1d1", "x;' \uff1d1"),
        ("a;b, c-d", "a;b, c-d"),
        ("=1;=2", "'=1;'=2"),
        ("", ""),
        (None, ""),
        (7, "7"),
    ],
)
def test_neutralise_cell(cell, expected):
    assert neutralise_cell(cell) == expected


def test_retry_republishes_model_failure(seeded):
    seeded.drain_published()
    status, _, body = call("POST", "/api/retry", RETRY_ALPHA, POST_HEADERS)

    assert status == 200, body
    assert json.loads(body)["retried"] is True
    assert json.loads(body)["replay_generation"] == 1
    published = seeded.drain_published()
    assert [(e["source"], e["detail-type"], e["detail"]) for e in published] == [
        (
            "prospect-uploader",
            "Prospect Row Validated",
            {
                "upload_id": "alpha",
                "row_number": 2,
                "replay_generation": 1,
            },
        )
    ]
    item = seeded.failures("alpha")["model#00000002"]
    assert item["retried_at"].endswith("Z") and int(item["retry_count"]) == 1
    assert int(item["replay_generation"]) == 1


@pytest.mark.parametrize(
    ("payload", "headers", "status", "code"),
    [
        (
            {"upload_id": "alpha", "failure_id": "row#00000001", "expected_generation": 0},
            POST_HEADERS,
            400,
            "NotRetryable",
        ),
        (
            {"upload_id": "alpha", "failure_id": "model#09999999", "expected_generation": 0},
            POST_HEADERS,
            400,
            "FailureNotFound",
        ),
        ({"upload_id": "alpha"}, POST_HEADERS, 400, "MissingKey"),
        (
            {"upload_id": "alpha", "failure_id": "model#00000002"},
            POST_HEADERS,
            400,
            "MissingGeneration",
        ),
        (
            {"upload_id": "alpha", "failure_id": "model#00000002", "expected_generation": -1},
            POST_HEADERS,
            400,
            "MissingGeneration",
        ),
        (
            RETRY_ALPHA,
            {"content-type": "application/json"},
            403,
            "CsrfHeaderMissing",
        ),
        (
            RETRY_ALPHA,
            {**POST_HEADERS, "origin": "https://evil.example"},
            403,
            "CrossOrigin",
        ),
        (
            RETRY_ALPHA,
            {**POST_HEADERS, "content-type": "text/plain"},
            415,
            "UnsupportedMediaType",
        ),
    ],
    ids=[
        "validation",
        "missing",
        "no-key",
        "no-generation",
        "negative-generation",
        "no-csrf-header",
        "cross-origin",
        "text-plain",
    ],
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
            data=json.dumps(
                {"upload_id": "beta", "failure_id": "row#00000002", "expected_generation": 0}
            ).encode(),
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


# -- operator retry: one publish per generation ------------------------------------------
@pytest.fixture
def atomic_updates():
    """DynamoDB applies a conditional UpdateItem atomically; moto 5 checks the condition
    and writes without a lock, so two threads can both pass it (see moto_fixes)."""
    with atomic_dynamodb_writes():
        yield


def test_a_second_press_on_the_same_generation_is_refused_and_publishes_nothing(seeded):
    seeded.drain_published()
    first = call("POST", "/api/retry", RETRY_ALPHA, POST_HEADERS)
    second = call("POST", "/api/retry", RETRY_ALPHA, POST_HEADERS)

    assert first[0] == 200
    assert (second[0], json.loads(second[2])["error"]["code"]) == (409, "AlreadyRetried")
    assert [e["detail"]["replay_generation"] for e in seeded.drain_published()] == [1]
    # A deliberate retry of what the page now shows is the next generation.
    third = call("POST", "/api/retry", {**RETRY_ALPHA, "expected_generation": 1}, POST_HEADERS)
    assert third[0] == 200 and json.loads(third[2])["replay_generation"] == 2
    assert [e["detail"]["replay_generation"] for e in seeded.drain_published()] == [2]
    assert int(seeded.failures("alpha")["model#00000002"]["retry_count"]) == 2


def test_concurrent_presses_publish_once(seeded, atomic_updates):
    import threading

    seeded.drain_published()
    barrier = threading.Barrier(4)
    statuses: list[int] = []

    def press():
        barrier.wait()
        statuses.append(call("POST", "/api/retry", RETRY_ALPHA, POST_HEADERS)[0])

    threads = [threading.Thread(target=press) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [200, 409, 409, 409]
    assert len(seeded.drain_published()) == 1


def test_the_generation_continues_from_a_re_filed_retry(seeded):
    from .viewer_data import model_event, model_failure, put_all

    event = model_event("alpha", 7)
    event["detail"]["replay_generation"] = 3  # the recorder filed generation 3's failure
    put_all(seeded.failures_table, [model_failure("alpha", 7, event=event, replay_generation=3)])
    seeded.drain_published()
    payload = {"upload_id": "alpha", "failure_id": "model#00000007", "expected_generation": 3}
    status, _, body = call("POST", "/api/retry", payload, POST_HEADERS)

    assert status == 200, body
    assert [e["detail"]["replay_generation"] for e in seeded.drain_published()] == [4]


@pytest.mark.parametrize(
    ("event_kwargs", "code"),
    [
        ({"detail_type": "Prospect Upload Completed"}, "DetailTypeNotAllowed"),
        ({"source": "someone-else"}, "SourceNotAllowed"),
        ({"detail_type": "Object Created", "source": "aws.s3"}, "SourceNotAllowed"),
    ],
    ids=["upload-summary", "foreign-source", "s3-event"],
)
def test_only_row_events_from_our_source_are_retryable(seeded, event_kwargs, code):
    from .viewer_data import model_event, model_failure, put_all

    item = model_failure("gamma", 1, event=model_event("gamma", 1, **event_kwargs))
    put_all(seeded.failures_table, [item])
    seeded.drain_published()

    _, listed = get_json("/api/failures?upload_id=gamma")
    payload = {"upload_id": "gamma", "failure_id": "model#00000001", "expected_generation": 0}
    status, _, body = call("POST", "/api/retry", payload, POST_HEADERS)

    assert [i["retryable"] for i in listed["items"]] == [False]
    assert (status, json.loads(body)["error"]["code"]) == (400, code)
    assert seeded.drain_published() == []
    assert "replay_generation" not in seeded.failures("gamma")["model#00000001"]


def test_a_failed_publish_gives_the_generation_back(seeded, monkeypatch):
    monkeypatch.setenv("EVENT_BUS_NAME", "no-such-bus")
    status, _, body = call("POST", "/api/retry", RETRY_ALPHA, POST_HEADERS)

    assert (status, json.loads(body)["error"]["code"]) == (502, "PublishFailed")
    item = seeded.failures("alpha")["model#00000002"]
    assert int(item["replay_generation"]) == 0 and "retried_at" not in item
    assert int(item["retry_count"]) == 0
    monkeypatch.setenv("EVENT_BUS_NAME", "prospect-bus")
    assert call("POST", "/api/retry", RETRY_ALPHA, POST_HEADERS)[0] == 200


# -- filters -----------------------------------------------------------------------------
def test_filter_by_kind_and_error_code(seeded):
    _, models = get_json("/api/failures?kind=model")
    _, by_code = get_json("/api/failures?error_code=invalidemail")
    _, both = get_json("/api/failures?kind=validation&error_code=MissingCompany&upload_id=beta")

    assert [(i["upload_id"], i["failure_id"]) for i in models["items"]] == [
        ("alpha", "model#00000002")
    ]
    assert {(i["upload_id"], i["failure_id"]) for i in by_code["items"]} == {
        ("alpha", "row#00000001"),
        ("beta", "row#00000001"),
    }
    assert [i["failure_id"] for i in both["items"]] == ["row#00000003"]


def test_a_page_token_is_bound_to_kind_and_error_code(seeded):
    token = encode_page_token(
        {"upload_id": "alpha", "failure_id": "row#00000001"}, FailureFilter(kind="model")
    )
    status, error = get_json(f"/api/failures?kind=validation&page_token={token}")
    assert (status, error["error"]["code"]) == (400, "InvalidPageToken")


# -- export: bytes of the encoded response, paged reads ----------------------------------
def _export_app(aws):
    """The real app over a session whose DynamoDB reads are counted."""
    import boto3
    from prospect_viewer.config import Settings
    from prospect_viewer.handler import build_app

    session = boto3.session.Session(region_name="us-east-1")
    reads: list[str] = []
    session.events.register("before-call.dynamodb.*", lambda model, **_: reads.append(model.name))
    return build_app(Settings.from_env(), session), reads


def test_export_of_1300_quote_heavy_rows_fits_lambdas_response_limit(aws, capsys):
    from prospect_viewer.export import MAX_RESPONSE_BYTES, response_bytes
    from prospect_viewer.web import Request

    from .viewer_data import put_all, quote_heavy_failures

    put_all(aws.failures_table, quote_heavy_failures("heavy", 1300))
    app, reads = _export_app(aws)
    response = app.handle(Request("GET", "/export.csv", {"upload_id": "heavy"}, {}))
    result = response.to_function_url_result()
    size = response_bytes(result)
    unicode_size = len(json.dumps(result, ensure_ascii=False).encode("utf-8"))

    uncapped_text = json.dumps(_full_csv(aws, "heavy"))
    with capsys.disabled():
        print(
            f"\nexport of 1,300 quote-heavy rows: {size:,} bytes encoded "
            f"({'base64' if result['isBase64Encoded'] else 'text'} body, "
            f"{result['headers']['x-export-rows']} rows, truncated="
            f"{result['headers'].get('x-export-truncated', 'false')}); "
            f"uncapped as JSON text: {len(uncapped_text):,} bytes"
        )
    assert size <= MAX_RESPONSE_BYTES < 6 * 1024 * 1024
    assert unicode_size <= size  # the cap holds for either runtime encoding
    assert result["headers"]["x-export-truncated"] == "true"
    body = (
        base64.b64decode(result["body"]).decode() if result["isBase64Encoded"] else result["body"]
    )
    rows = list(csv.reader(io.StringIO(body)))
    exported = int(result["headers"]["x-export-rows"])
    assert 0 < exported < 1300 and len(rows) == exported + 2  # header, rows, marker
    assert rows[-1][0].startswith("# export truncated after") and str(exported) in rows[-1][0]
    assert rows[1][6] == '"' * 2000  # raw_row survives CSV quoting intact
    # Paged reads that stopped at the cap, and not every page; each chunk of 100 failures
    # reads its rows' values from RowsTable with one BatchGetItem.
    queries = [r for r in reads if r == "Query"]
    assert set(reads) == {"Query", "BatchGetItem"} and 1 < len(queries) < 1300 // 200 + 1
    assert reads.count("BatchGetItem") <= exported // 100 + 1


def _full_csv(aws, upload_id):
    from prospect_viewer.export import render_csv
    from prospect_viewer.store import FailureFilter, FailureStore

    store = FailureStore(aws.failures_table, 50)
    rendered = render_csv(store.iter_all(FailureFilter(upload_id=upload_id)), 10**9)
    assert not rendered.truncated
    return base64.b64decode(rendered.body).decode() if rendered.base64 else rendered.body


def test_export_under_the_cap_is_complete_text_and_pages_through_every_read(aws):
    from prospect_viewer.web import Request

    from .viewer_data import model_failure, put_all

    put_all(aws.failures_table, [model_failure("many", n) for n in range(1, 451)])
    app, reads = _export_app(aws)
    result = app.handle(Request("GET", "/export.csv", {"upload_id": "many"}, {}))
    result = result.to_function_url_result()

    assert result["isBase64Encoded"] is False  # plain rows are smaller as text
    assert "x-export-truncated" not in result["headers"]
    assert result["headers"]["x-export-rows"] == "450"
    assert len(list(csv.reader(io.StringIO(result["body"])))) == 451
    # 200 + 200 + 50 failures; their rows' values 100 at a time.
    assert reads.count("Query") == 3 and reads.count("BatchGetItem") == 5


def test_a_base64_export_downloads_as_csv_through_the_local_server(aws):
    from .viewer_data import put_all, quote_heavy_failures

    put_all(aws.failures_table, quote_heavy_failures("heavy", 3))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with serve() as server:
        with opener.open(server.url + "export.csv?upload_id=heavy", timeout=10) as r:
            rows = list(csv.reader(io.StringIO(r.read().decode())))
    assert len(rows) == 4 and rows[3][6] == '"' * 2000


# -- Retry through the operator's signing proxy -------------------------------------------
def test_retry_works_end_to_end_through_the_signing_proxy(seeded):
    """Browser -> proxy (loopback, token) -> HTTPS "Function URL" running the real handler,
    which checks Origin against Host exactly as the Lambda does."""
    from botocore.credentials import Credentials

    from constructs_lib.prospect_uploader.viewer_proxy import SigningProxy
    from tests.proxy.tls import HttpsUpstream, client_context

    def function_url(method, target, headers, body):
        event = to_function_url_event(method, target, headers, body, "127.0.0.1")
        result = handler(event, None)
        return result["statusCode"], result["headers"], result["body"].encode()

    upstream = HttpsUpstream(function_url)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    seeded.drain_published()
    try:
        with SigningProxy(
            upstream.url,
            credentials=Credentials("AKIDEXAMPLE", "secret"),
            region="us-east-1",
            ssl_context=client_context(),
        ) as proxy:
            browser_origin = f"http://127.0.0.1:{proxy.port}"
            request = urllib.request.Request(
                proxy.url + "api/retry",
                data=json.dumps(RETRY_ALPHA).encode(),
                headers={**POST_HEADERS, "Origin": browser_origin},
                method="POST",
            )
            with opener.open(request, timeout=10) as response:
                answer = json.load(response)
            # The same request sent straight on with the browser's Origin: what the
            # old proxy did, and what the viewer refuses.
            direct = urllib.request.Request(
                upstream.url + "api/retry",
                data=json.dumps({**RETRY_ALPHA, "expected_generation": 1}).encode(),
                headers={**POST_HEADERS, "Origin": browser_origin},
                method="POST",
            )
            https = urllib.request.build_opener(
                urllib.request.ProxyHandler({}),
                urllib.request.HTTPSHandler(context=client_context()),
            )
            with pytest.raises(urllib.error.HTTPError) as refused:
                https.open(direct, timeout=10)
    finally:
        upstream.close()
    assert answer["retried"] is True and answer["replay_generation"] == 1
    assert [e["detail"]["row_number"] for e in seeded.drain_published()] == [2]
    assert refused.value.code == 403
    assert json.load(refused.value)["error"]["code"] == "CrossOrigin"


# -- a whole upload: list, retry all retryable ---------------------------------------------
@pytest.fixture
def with_uploads(seeded, monkeypatch):
    from .viewer_data import UPLOADS_TABLE, create_uploads_table, seed_uploads

    seed_uploads(create_uploads_table())
    monkeypatch.setenv("UPLOADS_TABLE_NAME", UPLOADS_TABLE)
    return seeded


def test_uploads_list_is_empty_and_says_so_without_the_table(seeded):
    status, data = get_json("/api/uploads")
    assert (status, data) == (200, {"configured": False, "items": [], "truncated": False})


def test_uploads_are_listed_newest_first_with_counts_and_tokens(with_uploads):
    status, data = get_json("/api/uploads")

    assert status == 200 and data["configured"] is True and data["truncated"] is False
    assert [(u["upload_id"], u["status"]) for u in data["items"]] == [
        ("delta", "splitting"),
        ("gamma", "classifying"),
        ("beta", "incomplete"),
        ("alpha", "completed"),
    ]
    alpha = data["items"][3]
    assert alpha["classified"] == {"hot": 1, "warm": 1}
    assert alpha["failed"] == {"ModelTimeoutError": 1}
    assert (alpha["input_tokens"], alpha["output_tokens"], alpha["tokens_billed"]) == (
        1234,
        56,
        1290,
    )
    assert "expires_at" not in alpha


def test_an_upload_without_a_model_price_has_tokens_and_an_unknown_cost(with_uploads):
    _, data = get_json("/api/uploads")

    gamma = data["items"][1]
    assert (gamma["cache_creation_input_tokens"], gamma["cache_read_input_tokens"]) == (6000, 66000)
    assert gamma["tokens_billed"] == 4800 + 96 + 6000 + 66000
    assert gamma["cost_usd"] is None and gamma["saved_by_cache_usd"] is None


def test_an_upload_with_a_model_price_shows_dollars_and_savings(with_uploads, monkeypatch):
    price = '{"input":1,"output":5,"cache_write":1.25,"cache_read":0.1,"batch_discount":0.5}'
    monkeypatch.setenv("MODEL_PRICE", price)
    _, data = get_json("/api/uploads")

    gamma = data["items"][1]
    # 4,800 in x $1 + 96 out x $5 + 6,000 written x $1.25 + 66,000 read x $0.10, per million.
    assert gamma["cost_usd"] == 0.01938
    # The 72,000 cached tokens at $1, less their write and reads.
    assert gamma["saved_by_cache_usd"] == 0.0579
    # One replayed duplicate's 6,000 cache-read tokens were not sent again.
    assert gamma["saved_by_replays_usd"] == 0.0006
    assert gamma["saved_by_batch_usd"] == 0.0


def _retry_all(upload_id):
    status, _, body = call("POST", "/api/retry-upload", {"upload_id": upload_id}, POST_HEADERS)
    assert status == 200, body
    return json.loads(body)


def _seed_retryable_upload(aws):
    from .viewer_data import model_event, model_failure, put_all

    put_all(
        aws.failures_table,
        [model_failure("omega", n) for n in (1, 2, 3)]
        + [
            model_failure(
                "omega", 4, event=model_event("omega", 4, detail_type="Prospect Upload Completed")
            ),
            {"upload_id": "omega", "failure_id": "row#00000005", "kind": "validation",
             "error_code": "InvalidEmail", "reason": "bad", "row_number": 5},
        ],
    )  # fmt: skip


def test_retry_all_publishes_one_new_request_per_row_and_is_safe_to_press_twice(seeded):
    _seed_retryable_upload(seeded)
    seeded.drain_published()

    first = _retry_all("omega")
    published = seeded.drain_published()
    second = _retry_all("omega")

    assert (first["retried"], first["already_retried"], first["failed"], first["more"]) == (
        3, 0, [], False,
    )  # fmt: skip
    assert sorted((e["detail"]["row_number"], e["detail"]["replay_generation"])
                  for e in published) == [(1, 1), (2, 1), (3, 1)]  # fmt: skip
    assert second["retried"] == 0 and seeded.drain_published() == []
    # Row 2's retry failed again: the recorder re-files it (newer recorded_at).
    seeded.failures_table.update_item(
        Key={"upload_id": "omega", "failure_id": "model#00000002"},
        UpdateExpression="SET recorded_at = :at",
        ExpressionAttributeValues={":at": "2099-01-01T00:00:00.000Z"},
    )
    third = _retry_all("omega")
    assert third["retried"] == 1
    assert [(e["detail"]["row_number"], e["detail"]["replay_generation"])
            for e in seeded.drain_published()] == [(2, 2)]  # fmt: skip


def test_two_concurrent_retry_all_presses_publish_each_row_once(seeded, atomic_updates):
    import threading

    _seed_retryable_upload(seeded)
    seeded.drain_published()
    barrier = threading.Barrier(2)
    answers: list[dict] = []
    refused: list[str] = []

    def press():
        barrier.wait()
        try:
            answers.append(_retry_all("omega"))
        except AssertionError as error:  # a press answered other than 200
            refused.append(str(error))

    threads = [threading.Thread(target=press) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Both presses are answered 200 (a press that failed in its thread used to leave only a
    # warning: moto's Query met the other press's write, fixed in moto_fixes).
    assert refused == [] and len(answers) == 2
    rows = sorted(e["detail"]["row_number"] for e in seeded.drain_published())
    assert rows == [1, 2, 3]
    assert sum(a["retried"] for a in answers) == 3


def test_retry_all_works_in_batches(seeded, monkeypatch):
    from prospect_viewer import retry

    from .viewer_data import model_failure, put_all

    monkeypatch.setattr(retry, "MAX_BULK_RETRY", 2)
    put_all(seeded.failures_table, [model_failure("batch", n) for n in range(1, 6)])
    seeded.drain_published()
    answers = [_retry_all("batch") for _ in range(4)]

    assert [(a["retried"], a["more"]) for a in answers] == [(2, True), (2, True), (1, False),
                                                            (0, False)]  # fmt: skip
    assert sorted(e["detail"]["row_number"] for e in seeded.drain_published()) == [1, 2, 3, 4, 5]


def test_retry_all_refuses_a_forged_request(seeded):
    _seed_retryable_upload(seeded)
    seeded.drain_published()
    status, _, body = call(
        "POST", "/api/retry-upload", {"upload_id": "omega"},
        {**POST_HEADERS, "origin": "https://evil.example"},
    )  # fmt: skip
    assert (status, json.loads(body)["error"]["code"]) == (403, "CrossOrigin")
    assert call("POST", "/api/retry-upload", {}, POST_HEADERS)[0] == 400
    assert seeded.drain_published() == []


# -- EventBridge v2 bus (optional) -----------------------------------------------------------
def test_v2_bus_publishes_with_a_deduplication_id_per_generation(seeded, monkeypatch):
    """moto has no eventbridgev2: botocore's Stubber checks the request against the
    service model and answers as the bus does; everything else is real."""
    import boto3
    from botocore.stub import Stubber
    from prospect_viewer.config import Settings
    from prospect_viewer.handler import build_app
    from prospect_viewer.retry import retry_failure

    arn = "arn:aws:events:us-east-1:123456789012:event-bus/prospect-v2"
    monkeypatch.setenv("EVENT_BUS_KIND", "v2")
    monkeypatch.setenv("EVENT_BUS_ARN", arn)
    monkeypatch.delenv("EVENT_BUS_NAME")
    app = build_app(Settings.from_env(), boto3.session.Session(region_name="us-east-1"))
    assert app.publisher.v2
    client = app.publisher.bus.client
    assert client.meta.service_model.service_name == "eventbridgev2"
    with Stubber(client) as stub:
        stub.add_response(
            "put_events",
            {"Entries": [{"EventId": "e-1", "SuccessCode": "SUCCESS"}]},
            {
                "EventBusArn": arn,
                "Entries": [
                    {
                        "Source": "prospect-uploader",
                        "DetailType": "Prospect Row Validated",
                        "Detail": json.dumps(
                            {"upload_id": "alpha", "row_number": 2, "replay_generation": 1},
                            separators=(",", ":"),
                        ),
                        "SystemMetadata": {"DeduplicationId": "alpha#2#r1"},
                    }
                ],
            },
        )  # fmt: skip
        result = retry_failure(
            app.store, app.publisher, app.event_source, "alpha", "model#00000002", 0
        )
        stub.assert_no_pending_responses()
    assert result["replay_generation"] == 1
    assert int(seeded.failures("alpha")["model#00000002"]["replay_generation"]) == 1


def test_v2_bus_needs_its_arn(monkeypatch, seeded):
    from prospect_contract.errors import ConfigurationError
    from prospect_viewer.config import Settings

    monkeypatch.setenv("EVENT_BUS_KIND", "v2")
    with pytest.raises(ConfigurationError, match="EVENT_BUS_ARN"):
        Settings.from_env()
    monkeypatch.setenv("EVENT_BUS_KIND", "v3")
    with pytest.raises(ConfigurationError, match="classic or v2"):
        Settings.from_env()


# ------------------------------------------------ row values from RowsTable (issue 18)
def _expire_row(aws, upload_id: str, row_number: int) -> None:
    """What DynamoDB's TTL does once upload_retention_days have passed."""
    aws.rows_table.delete_item(Key={"upload_id": upload_id, "row_number": row_number})


def test_failure_records_hold_ids_and_the_page_shows_the_row_from_rows_table(seeded):
    stored = seeded.failures("alpha")
    assert not [item for item in stored.values() if "raw_row" in item]
    _, data = get_json("/api/failures?upload_id=alpha")
    by_id = {item["failure_id"]: item for item in data["items"]}
    assert by_id["row#00000004"]["raw_row"] == "bo@example.com,Bo,Li,,CEO,US,"
    assert by_id["model#00000002"]["raw_row"] == "a@example.com,,,,,,"
    # Once the row's values expire, the failure is still listed, without them.
    _expire_row(seeded, "alpha", 4)
    _, data = get_json("/api/failures?upload_id=alpha")
    by_id = {item["failure_id"]: item for item in data["items"]}
    assert "raw_row" not in by_id["row#00000004"] and by_id["row#00000004"]["row_number"] == 4


def test_a_retry_of_a_row_whose_values_expired_is_refused_and_publishes_nothing(seeded):
    _expire_row(seeded, "alpha", 2)
    seeded.drain_published()
    status, _, body = call("POST", "/api/retry", RETRY_ALPHA, POST_HEADERS)

    assert status == 410, body
    assert json.loads(body)["error"]["code"] == "RowExpired"
    assert seeded.drain_published() == []
    assert "replay_generation" not in seeded.failures("alpha")["model#00000002"]


def test_retry_all_skips_and_counts_rows_whose_values_expired(seeded):
    _seed_retryable_upload(seeded)
    _expire_row(seeded, "omega", 2)
    seeded.drain_published()

    answer = _retry_all("omega")

    assert (answer["retried"], answer["expired"]) == (2, 1)
    assert sorted(e["detail"]["row_number"] for e in seeded.drain_published()) == [1, 3]


# -- issue 34: an item past its expires_at is absent, though DynamoDB has not swept it -------
EXPIRED = 1_000_000_000  # 2001: long past, still in the table (moto never sweeps)


def test_an_expired_failure_upload_or_row_is_absent_from_every_answer(with_uploads):
    from .viewer_data import UPLOADS_TABLE, model_failure, put_all, upload_item

    # GIVEN an upload, its retryable failure and its row, all past their expires_at
    put_all(
        with_uploads.failures_table,
        [model_failure("stale", 9, expires_at=EXPIRED, raw_row="gone@example.com,,,,,,")],
    )
    with_uploads.rows_table.update_item(
        Key={"upload_id": "stale", "row_number": 9},
        UpdateExpression="SET expires_at = :past",
        ExpressionAttributeValues={":past": EXPIRED},
    )
    uploads = with_uploads.session.resource("dynamodb").Table(UPLOADS_TABLE)
    uploads.put_item(Item=upload_item("stale", "completed", "2026-12-01T00:00:00.000Z"))
    uploads.update_item(
        Key={"upload_id": "stale"},
        UpdateExpression="SET expires_at = :past",
        ExpressionAttributeValues={":past": EXPIRED},
    )
    # WHEN the page, the export and a retry ask for them  THEN none is there
    _, listed = get_json("/api/failures?upload_id=stale")
    assert listed["items"] == []
    _, everything = get_json("/api/failures")
    assert "stale" not in {item["upload_id"] for item in everything["items"]}
    _, _, exported = call("GET", "/export.csv?upload_id=stale")
    assert len(list(csv.reader(io.StringIO(exported)))) == 1  # the header alone
    _, data = get_json("/api/uploads")
    assert "stale" not in [upload["upload_id"] for upload in data["items"]]
    status, _, body = call(
        "POST",
        "/api/retry",
        {"upload_id": "stale", "failure_id": "model#00000009", "expected_generation": 0},
        POST_HEADERS,
    )
    assert (status, json.loads(body)["error"]["code"]) == (400, "FailureNotFound")
    assert with_uploads.drain_published() == []
