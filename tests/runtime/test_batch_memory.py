"""Issue 19: results are streamed, so memory stays flat at 100,000 results.

The real SDK reads a 100,000-line results stream over HTTP from the fake's batch endpoint,
through the adapter (``model_step.anthropic_batches``) and the collector's own paging
(``model_step.batch_results.pages``: 100 lines at a time, each page's rows read at once).
tracemalloc's peak over the read is bounded (no timing is asserted).
"""

from __future__ import annotations

import json
import tracemalloc

import pytest
from model_step import Settings
from model_step.anthropic_batches import AnthropicBatches
from model_step.batch_limits import ROWS_PAGE
from model_step.batch_results import pages
from model_step.client import ModelClientProvider

from tests.fakes import FakeMessagesAPI

RESULTS = 100_000


@pytest.mark.long  # 100,000 lines parsed by the SDK under tracemalloc: about a minute
def test_100000_streamed_results_keep_memory_flat(monkeypatch):
    with FakeMessagesAPI() as api:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.base_url)
        requests = [
            {
                "custom_id": f"k{n:031d}",
                "params": {
                    "model": "claude-haiku-5-5",
                    "max_tokens": 8,
                    "thinking": {"type": "disabled"},
                    "messages": [{"role": "user", "content": "row"}],
                },
            }
            for n in range(RESULTS)
        ]
        status, body, _ = api.batches.create(json.dumps({"requests": requests}).encode())
        del requests
        assert status == 200 and body is not None
        settings = step_settings()
        provider = AnthropicBatches(settings, ModelClientProvider(settings, lambda name: None))
        batch_id = body["batch"]
        assert provider.status(batch_id).phase == "ended"
        seen = {"lines": 0, "labels": 0, "pages": 0}

        tracemalloc.start()
        try:
            with provider.results(batch_id) as lines:
                for page in pages(lines, ROWS_PAGE):
                    seen["pages"] += 1
                    for line in page:
                        seen["lines"] += 1
                        seen["labels"] += line.kind == "succeeded"
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()

    assert seen == {"lines": RESULTS, "labels": RESULTS, "pages": RESULTS // ROWS_PAGE}
    # The stream is about 40 MB of JSON; holding it (or its parsed lines) would cost far
    # more than this. Flat: a few lines and the SDK's buffers at a time.
    assert peak < 8 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB"


def step_settings():
    """Settings of a step whose API key comes from the environment (no secret is read)."""
    return Settings(
        idempotency_table_name="unused",
        dead_letter_queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/unused",
        idempotency_key="[upload_id, row_number]",
        prompt_version="v1",
        system_prompt="Answer hot, warm or cold.",
    )
