"""Issue 36 on a real faulted local run, in headless Debian Chromium: what the operator sees.

One local run (30 % model faults, seed 7, each event twice) of the sample plus long rows
(900-character notes that go to the model, 1,200-character ones the splitter refuses), then
the Prospect Viewer the run serves:

- the upload's counts agree in the CLI's ``--json`` and text, the viewer's API and its
  rendered page, and the summary mail: one counting rule (item 2);
- at 1,280 and 1,920 px no column is clipped, the raw-row column is wide and long rows are
  clamped until clicked, reasons are sentences, filters are choices, the cost has a legend
  (item 3);
- Retry on the row that ran out of time bills one request and the row shows that retry's
  own outcome and its history (item 1).

``UPDATE_SCREENSHOT=1`` writes the pictures to docs/images/ (otherwise to a temporary
directory).
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from constructs_lib.prospect_uploader.local_run import RunOptions
from constructs_lib.prospect_uploader.local_run.invariants import check_invariants
from constructs_lib.prospect_uploader.local_run.pipeline import LocalPipeline
from constructs_lib.prospect_uploader.local_run.report import render_table, to_json
from tests.headless_chromium import CHROMIUM, launch

from .billing import assert_billed, late_attempts
from .conftest import SAMPLE

DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
WIDTHS = (1280, 1920)
#: The raw-row column's least width: about 36 monospace characters per line.
RAW_COLUMN_MIN_PX = 280

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="Debian chromium not installed at /usr/bin/chromium (apt-get install chromium)",
    ),
]
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect


def _long_rows_csv(path: Path) -> Path:
    words = "Long conversation notes about budget timing and three competing vendors. " * 13
    lines = SAMPLE.read_text(encoding="utf-8").rstrip("\n").splitlines()
    for n in range(3):
        lines.append(
            f"long.{n}@example.com,Alexandra,Featherstonehaugh-{n},"
            f"Consolidated Intercontinental Holdings and Logistics Group {n},"
            f"Senior Vice President of Global Procurement,GB,{words[:900]}"
        )
    for n in range(2):
        lines.append(f"toolong.{n}@example.com,Sam,Lee,Acme {n},CEO,US,{'x' * 1200}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def run(cdk_out: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("viewer-truth")
    options = RunOptions(
        csv_path=_long_rows_csv(tmp / "prospects-long.csv"),
        cdk_out=cdk_out,
        duplicates=2,
        fault_rate=0.3,
        seed=7,
        log_file=tmp / "handlers.log",
    )
    with LocalPipeline(options) as pipeline:
        result = pipeline.run()
        server = pipeline.serve_viewer()
        try:
            with sync_api.sync_playwright() as playwright:
                browser = launch(playwright, ["--no-sandbox", "--disable-gpu"])
                yield {
                    "pipeline": pipeline,
                    "result": result,
                    "url": server.url,
                    "browser": browser,
                    "tmp": tmp,
                }
                browser.close()
        finally:
            server.stop()


def _screenshot(page: Any, name: str, tmp: Path) -> Path:
    from PIL import Image

    raw = tmp / f"raw-{name}"
    page.screenshot(path=str(raw), full_page=True)
    folder = DOCS_IMAGES if os.environ.get("UPDATE_SCREENSHOT") == "1" else tmp
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    # A 64-colour palette keeps the PNG small; text stays sharp.
    Image.open(raw).convert("RGB").quantize(colors=64).save(target, optimize=True)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return target


def _open(run: dict[str, Any], width: int) -> Any:
    page = run["browser"].new_page(viewport={"width": width, "height": 900})
    page.goto(run["url"])
    page.wait_for_selector("body[data-loaded]")
    upload_id = run["result"].upload_id
    page.click(f"#uploads tr[data-upload-id='{upload_id}'] button.open-upload")
    expect(page.locator("#page-label")).to_have_text("Page 1")
    expect(page.locator("#rows tr").first).to_have_attribute("data-upload-id", upload_id)
    return page


def _api(run: dict[str, Any], path: str) -> Any:
    with urllib.request.urlopen(run["url"] + path, timeout=30) as response:
        return json.loads(response.read())


def _text_count(table: str, name: str) -> int:
    found = re.search(rf"^  {re.escape(name)}\s+(\d+)\s", table, re.MULTILINE)
    assert found, f"no {name!r} line in the summary"
    return int(found.group(1))


def test_the_cli_json_and_text_the_viewer_and_the_mail_agree_on_the_counts(run):
    result = run["result"]
    assert all(check.ok for check in check_invariants(result))
    document = to_json(result)
    text = render_table(result, [])
    [upload] = [u for u in _api(run, "api/uploads")["items"] if u["upload_id"] == result.upload_id]
    api = upload["counts"]
    [mail] = [json.loads(message) for message in result.alert_messages]
    page = _open(run, 1280)
    row = page.locator(f"#uploads tr[data-upload-id='{result.upload_id}']")
    cells = row.locator("td")
    rendered = {
        "model_requests": int(row.locator("td.model-requests").inner_text()),
        "failed": int(row.locator("td.failed").inner_text().split()[0]),
        "invalid": int(cells.nth(5).inner_text()),
        "labelled": int(row.locator("td.labelled").inner_text().split()[0]),
    }

    counts = {
        "model_requests": document["model_requests"],
        "failed": document["failed"],
        "invalid": document["invalid"],
        "labelled": document["classified"],
    }
    assert counts["failed"] > 0 and counts["invalid"] > 0  # a faulted run, with bad rows
    assert {name: document["upload"][name] for name in counts} == counts  # --json's upload
    assert {
        "model_requests": _text_count(text, "model requests"),
        "failed": _text_count(text, "failed"),
        "invalid": _text_count(text, "invalid"),
        "labelled": _text_count(text, "classified"),
    } == counts
    assert {name: api[name] for name in counts} == counts
    assert rendered == counts
    assert {name: mail[name] for name in counts} == counts
    # The same state in the same words everywhere; and never a plain "complete".
    assert api["state"] == document["upload"]["state"] == mail["state"]
    assert api["state"] == "complete_with_failures"
    assert api["text"] in text.splitlines()[1] and mail["summary"] == api["text"]
    expect(row.locator(".badge")).to_have_text("complete with failures")
    # The HTTP answers the local model gave (429s and 529s included) are counted apart.
    assert document["http_requests"] >= document["model_requests"]
    page.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_viewer_is_readable_with_no_control_clipped(run, width):
    page = _open(run, width)
    viewport = page.viewport_size["width"]
    for table in ("#uploads-table", "#failures-table"):
        box = page.locator(table).bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= viewport + 0.5, (table, box)
        for header in page.locator(f"{table} th").all():
            cell = header.bounding_box()
            assert cell["x"] + cell["width"] <= box["x"] + box["width"] + 0.5, header.inner_text()
    # No cell's content runs past its column (a clipped column would).
    overflowing = page.locator("#rows td, #uploads td").evaluate_all(
        "cells => cells.filter(c => c.scrollWidth > c.clientWidth + 1).map(c => c.className)"
    )
    assert overflowing == []
    retries = page.locator("#rows button.retry")
    assert retries.count() > 0
    for button in retries.all():
        box = button.bounding_box()
        assert 0 <= box["x"] and box["x"] + box["width"] <= viewport, box
    raw_header = page.locator("#failures-table th").nth(6)
    assert raw_header.inner_text().startswith("Raw row")
    assert raw_header.bounding_box()["width"] >= RAW_COLUMN_MIN_PX
    # A long raw row wraps in its column, clamped to 4 lines until it is clicked.
    long_cell = page.locator("#rows td.raw", has=page.locator(".more")).first
    clamped = long_cell.bounding_box()["height"]
    long_cell.click()
    expect(long_cell.locator(".more")).to_have_text("show less")
    assert long_cell.bounding_box()["height"] > clamped * 2
    # Reasons are sentences with their code, never an SDK dict dump.
    reasons = page.locator("#rows td.reason").all_inner_texts()
    assert reasons and all(" Code " in r or r.startswith("Code ") for r in reasons), reasons
    assert not any("{'" in r or "Error code:" in r for r in reasons)
    # Filters whose values are known are choices; the cost cell explains itself.
    assert page.locator("select#kind-filter option").all_inner_texts()[:3] == [
        "any", "validation", "model",
    ]  # fmt: skip
    assert page.locator("select#state-filter option").count() == 7
    assert "billed" in (page.locator("#uploads td.cost").first.get_attribute("title") or "")
    assert "prompt-cache reads" in page.locator("#cost-legend").inner_text()
    long_cell.click()  # clamped again for the picture
    _screenshot(page, f"viewer-{width}.png", run["tmp"])
    page.close()


def test_a_retry_from_the_page_bills_one_request_and_shows_its_own_outcome(run):
    pipeline = run["pipeline"]
    engine = pipeline.engine
    page = _open(run, 1280)
    row = page.locator("#rows tr", has=page.locator("td.code", has_text="ModelDeadlineExceeded"))
    expect(row).to_have_count(1)
    expect(row.locator("td.outcome .badge")).to_have_text("failed")
    failure_id = row.get_attribute("data-failure-id")
    billed_before = sum(engine.model_requests.billed.values())
    late_before = late_attempts(engine)

    row.locator("button.retry").click()
    expect(page.locator("#status")).to_contain_text("Retried model#")
    engine.wait_until_settled()
    engine.drain_event_sources()
    page.reload()
    page.wait_for_selector("body[data-loaded]")

    late = late_attempts(engine) - late_before
    billed = sum(engine.model_requests.billed.values())
    assert_billed(billed, billed_before + 1, late, "billed requests of one Retry")
    retried = page.locator(f"#rows tr[data-failure-id='{failure_id}']")
    expect(retried.locator(".generation")).to_have_text("gen 1")
    outcome = retried.locator("td.outcome .outcome-line").first.inner_text()
    assert re.search(r"retry 1: \w+, attempt 1 of 1, \d{4}-\d\d-\d\d ", outcome), outcome
    history = retried.locator("details.history")
    expect(history.locator("summary")).to_have_text("History (2 failed attempts)")
    history.locator("summary").click()
    items = history.locator("li").all_inner_texts()
    assert items[0].startswith("gen 0: ModelDeadlineExceeded, attempt 3 of 3")
    assert items[1].startswith("gen 1: ") and "attempt 1 of 1" in items[1]
    _screenshot(page, "viewer-after-retry-1280.png", run["tmp"])
    page.close()
