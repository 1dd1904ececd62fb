"""The viewer page in headless Debian Chromium, served by the local server over moto."""

from __future__ import annotations

from pathlib import Path

import pytest

from .viewer_data import seed

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-proxy-server",
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
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(aws, browser):
    from prospect_viewer.local_server import serve

    seed(aws.failures_table)
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
    assert [e["detail"]["row_number"] for e in aws.drain_published()] == [2]


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
