"""The viewer page in headless Debian Chromium, served by the local server over moto."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.headless_chromium import CHROMIUM, launch

from .viewer_data import UPLOADS_TABLE, create_uploads_table, seed, seed_uploads

DOCS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "viewer.png"

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-proxy-server",
    # What a DNS-rebinding attacker arranges: their name resolves to 127.0.0.1.
    "--host-resolver-rules=MAP attacker.example 127.0.0.1",
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="Debian chromium not installed at /usr/bin/chromium (apt-get install chromium)",
    ),
]


# Waits use locators, not wait_for_function: the page's CSP forbids eval, which is
# what a string predicate needs.
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        browser = launch(playwright, CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(aws, browser, monkeypatch):
    from prospect_viewer.local_server import serve

    seed(aws.failures_table)
    seed_uploads(create_uploads_table())
    monkeypatch.setenv("UPLOADS_TABLE_NAME", UPLOADS_TABLE)
    context = browser.new_context()
    # Belt and braces: the page may only ever talk to the local server.
    context.route(
        "**/*",
        lambda route: (
            route.continue_()
            if route.request.url.startswith("http://127.0.0.1:")
            else route.abort()
        ),
    )
    page = context.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    with serve() as server:
        page.goto(server.url)
        page.wait_for_selector("body[data-loaded]")
        page.dialogs = dialogs
        page.server_url = server.url
        yield page
    context.close()


def _rows(page):
    return page.locator("#rows tr")


def test_row_data_renders_as_text_and_never_runs(page):
    assert _rows(page).count() == 6  # all non-summary failures of both uploads
    text = page.inner_text("#rows")
    assert "<script>window.__xss = 1</script>" in text
    assert '<img src=x onerror="window.__xss=2">' in text
    assert page.evaluate("window.__xss") is None
    assert page.locator("#rows script, #rows img").count() == 0
    assert page.dialogs == []


def test_filtering_by_upload_narrows_rows(page):
    page.fill("#upload-filter", "beta")
    page.click("#apply")
    expect(_rows(page)).to_have_count(3)
    assert set(_rows(page).evaluate_all("rs => rs.map(r => r.dataset.uploadId)")) == {"beta"}

    page.fill("#reason-filter", "FieldTooLong")
    page.click("#apply")
    expect(_rows(page)).to_have_count(1)


def test_export_from_the_page_is_neutralised(page):
    page.fill("#upload-filter", "beta")
    page.click("#apply")
    expect(_rows(page)).to_have_count(3)
    href = page.get_attribute("#export", "href")
    assert href == "export.csv?upload_id=beta"
    exported = page.evaluate("h => fetch(h).then(r => r.text())", href)
    assert "'=HYPERLINK" in exported and "'=1+2" in exported
    assert ",=" not in exported


def test_retry_button_republishes(page, aws):
    aws.drain_published()
    page.click("tr[data-failure-id='model#00000002'] button.retry")
    expect(page.locator("#status")).to_have_text("Retried model#00000002")
    assert [
        (e["detail"]["row_number"], e["detail"]["replay_generation"]) for e in aws.drain_published()
    ] == [(2, 1)]
    row = page.locator("tr[data-failure-id='model#00000002']")
    expect(row.locator(".generation")).to_have_text("gen 1")  # in the Retry column
    # The retry is on its way: its outcome says so until the row is answered or fails.
    expect(row.locator("td.outcome .badge")).to_have_text("pending")


def test_a_stale_retry_button_is_refused_and_publishes_nothing(page, aws, browser):
    # Two tabs show generation 0; the second tab's press comes after the first's.
    other = page.context.new_page()
    other.goto(page.server_url)
    other.wait_for_selector("body[data-loaded]")
    aws.drain_published()
    page.click("tr[data-failure-id='model#00000002'] button.retry")
    expect(page.locator("#status")).to_have_text("Retried model#00000002")
    other.click("tr[data-failure-id='model#00000002'] button.retry")
    expect(other.locator("#status")).to_contain_text("Retry refused: already retried")
    assert len(aws.drain_published()) == 1


def test_uploads_list_shows_status_counts_and_tokens(page):
    uploads = page.locator("#uploads tr")
    expect(uploads).to_have_count(4)
    assert uploads.evaluate_all("rs => rs.map(r => r.dataset.uploadId)") == [
        "delta", "gamma", "beta", "alpha",
    ]  # fmt: skip
    badges = page.locator("#uploads .badge").all_inner_texts()
    # Issue 36: a completed upload with failed and invalid rows is not a green "completed";
    # an open upload with nothing counted for 30 minutes is stalled, not in progress.
    assert badges == ["stalled", "in progress", "stalled", "complete with failures"]
    alpha = page.locator("#uploads tr[data-upload-id='alpha']")
    assert alpha.locator(".status-text").inner_text() == (
        "complete with failures: 2 labelled, 1 failed, 2 invalid"
    )
    assert "hot 1 · warm 1" in alpha.inner_text()
    assert alpha.locator("td.tokens").inner_text() == "1290 (1234 / 56 / 0 / 0)"
    assert alpha.locator("td.cost").inner_text() == "unknown"


def test_a_batch_upload_shows_its_rows_waiting_in_batch_and_its_batches(aws, page):
    """Issue 19: a Message Batches upload's row says how many of its valid rows are still
    waiting in batch (neither classified nor failed) and how many batches answered; once
    it completes, none wait. A realtime upload says only its delivery."""
    from .viewer_data import put_all, upload_item

    batch = dict(delivery="batch", batch_requests=1_490, batch_input_tokens=90_000)
    put_all(
        aws.session.resource("dynamodb").Table(UPLOADS_TABLE),
        [
            upload_item(
                "epsilon", "classifying", "2026-11-29T09:40:00.000Z", rows=2_600, valid=2_500,
                invalid=100, classified={"warm": 1_480}, failed={"BatchExpired": 10},
                classified_total=1_480, failed_total=10, model_requests=1_490,
                batch_ids={"msgbatch_01", "msgbatch_02"}, **batch,
            ),
            upload_item(
                "zeta", "completed", "2026-11-29T09:50:00.000Z", rows=2_000, valid=2_000,
                classified={"cold": 2_000}, classified_total=2_000, model_requests=2_000,
                batch_ids={"msgbatch_03"}, **batch,
            ),
            upload_item(
                "eta", "classifying", "2026-11-29T09:55:00.000Z", rows=10, valid=10,
                delivery="realtime",
            ),
        ],
    )  # fmt: skip
    page.reload()
    page.wait_for_selector("body[data-loaded]")
    expect(page.locator("#uploads tr")).to_have_count(7)
    header = page.locator("#uploads-table thead").inner_text()
    assert "Delivery (waiting in batch / batches)" in header

    def delivery(upload_id: str) -> str:
        return page.locator(f"#uploads tr[data-upload-id='{upload_id}'] td.delivery").inner_text()

    assert delivery("epsilon") == "batch (1010 waiting in batch / 2 batches)"
    assert delivery("zeta") == "batch (0 waiting in batch / 1 batches)"
    assert delivery("eta") == "realtime"


def test_clicking_an_upload_shows_its_failures_and_filters_by_kind_and_code(page):
    page.click("#uploads tr[data-upload-id='alpha'] button.open-upload")
    expect(_rows(page)).to_have_count(3)
    assert page.input_value("#upload-filter") == "alpha"
    assert page.get_attribute("#export", "href") == "export.csv?upload_id=alpha"
    assert page.is_enabled("#retry-all")
    expect(page.locator("#uploads tr.selected")).to_have_count(1)

    page.select_option("#kind-filter", "validation")  # a choice: the kinds are known
    page.click("#apply")
    expect(_rows(page)).to_have_count(2)
    page.fill("#code-filter", "MissingCompany")
    page.click("#apply")
    expect(_rows(page)).to_have_count(1)
    assert page.get_attribute("tr#rows tr, #rows tr", "data-failure-id") == "row#00000004"


def test_retry_all_retryable_is_safe_to_press_twice(page, aws):
    from .viewer_data import model_failure, put_all

    put_all(aws.failures_table, [model_failure("alpha", n) for n in (10, 11)])
    aws.drain_published()
    page.click("#uploads tr[data-upload-id='alpha'] button.open-upload")
    expect(_rows(page)).to_have_count(5)
    page.click("#retry-all")
    expect(page.locator("#status")).to_have_text("Retry all for alpha: 3 retried")
    page.click("#retry-all")
    expect(page.locator("#status")).to_have_text("Retry all for alpha: nothing left to retry")
    published = aws.drain_published()
    assert sorted(e["detail"]["row_number"] for e in published) == [2, 10, 11]
    assert {e["detail"]["replay_generation"] for e in published} == {1}


def test_screenshot(page, tmp_path):
    """The README's picture: uploads, one opened, its failures (UPDATE_SCREENSHOT=1 writes
    docs/viewer.png; otherwise the picture only goes to a temporary file)."""
    from PIL import Image

    page.set_viewport_size({"width": 1280, "height": 760})
    page.click("#uploads tr[data-upload-id='alpha'] button.open-upload")
    expect(_rows(page)).to_have_count(3)
    raw = tmp_path / "viewer.png"
    page.screenshot(path=str(raw))
    target = DOCS_SCREENSHOT if os.environ.get("UPDATE_SCREENSHOT") == "1" else tmp_path / "s.png"
    target.parent.mkdir(parents=True, exist_ok=True)
    # A 64-colour palette keeps the PNG small; text stays sharp.
    Image.open(raw).convert("RGB").quantize(colors=64).save(target, optimize=True)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert target.stat().st_size < 200_000


def test_pagination_with_small_pages(aws, browser, monkeypatch):
    from prospect_viewer.local_server import serve

    monkeypatch.setenv("PAGE_SIZE", "4")
    seed(aws.failures_table)
    context = browser.new_context()
    page = context.new_page()
    with serve() as server:
        page.goto(server.url)
        expect(_rows(page)).to_have_count(4)
        page.click("#next")
        expect(_rows(page)).to_have_count(2)
        assert page.inner_text("#page-label") == "Page 2"
        page.click("#prev")
        expect(_rows(page)).to_have_count(4)
        assert page.is_disabled("#prev")
    context.close()


@pytest.fixture
def through_proxy(aws, browser):
    """Chromium -> the signing proxy -> an HTTPS stand-in Function URL running the real
    handler (which checks Origin against Host as the Lambda does) over moto."""
    from botocore.credentials import Credentials
    from prospect_viewer.handler import handler
    from prospect_viewer.local_server import to_function_url_event

    from constructs_lib.prospect_uploader.viewer_proxy import SigningProxy
    from tests.proxy.tls import HttpsUpstream, client_context

    def function_url(method, target, headers, body):
        result = handler(to_function_url_event(method, target, headers, body, "127.0.0.1"), None)
        return result["statusCode"], result["headers"], result["body"].encode()

    seed(aws.failures_table)
    upstream = HttpsUpstream(function_url)
    context = browser.new_context()
    try:
        with SigningProxy(
            upstream.url,
            credentials=Credentials("AKIDEXAMPLE", "secret"),
            region="us-east-1",
            ssl_context=client_context(),
        ) as proxy:
            page = context.new_page()
            page.proxy = proxy
            page.upstream = upstream
            yield page
    finally:
        context.close()
        upstream.close()


def test_retry_works_in_the_browser_through_the_signing_proxy(through_proxy, aws):
    page = through_proxy
    page.goto(page.proxy.url)
    page.wait_for_selector("body[data-loaded]")
    expect(_rows(page)).to_have_count(6)
    aws.drain_published()
    page.click("tr[data-failure-id='model#00000002'] button.retry")
    expect(page.locator("#status")).to_have_text("Retried model#00000002")
    assert [e["detail"]["replay_generation"] for e in aws.drain_published()] == [1]
    # What reached the Function URL carried the Function URL's own Origin.
    posted = [r for r in page.upstream.requests if r[0] == "POST"]
    assert posted[0][2]["Origin"] == f"https://127.0.0.1:{page.upstream.port}"


def test_a_rebinding_page_gets_nothing_from_the_proxy(through_proxy):
    page = through_proxy
    # The attacker would also need the token; even with it, the Host gives them away.
    response = page.goto(f"http://attacker.example:{page.proxy.port}/t/{page.proxy.token}/")
    assert response.status == 421
    assert page.upstream.requests == []


def test_a_rebinding_page_gets_nothing_from_the_local_server(aws, browser):
    from prospect_viewer.local_server import serve

    seed(aws.failures_table)
    context = browser.new_context()
    page = context.new_page()
    with serve() as server:
        response = page.goto(f"http://attacker.example:{server.port}/t/{server.token}/")
        assert response.status == 421
        assert page.goto(server.url).status == 200  # the real address still works
    context.close()
