"""Issue 19: results are streamed, so memory stays flat at 100,000 results.

The real SDK reads a 100,000-line results stream over HTTP from the fake's batch endpoint,
through the collector's own loop (``model_step.batch.stream_results``), which applies each
line and checkpoints. tracemalloc's peak over the read is bounded (no timing is asserted).
"""

from __future__ import annotations

import json
import tracemalloc

import anthropic
import pytest
from model_step.batch import stream_results

from tests.fakes import FakeMessagesAPI

RESULTS = 100_000


@pytest.mark.long  # 100,000 lines parsed by the SDK under tracemalloc: about a minute
def test_100000_streamed_results_keep_memory_flat():
    with FakeMessagesAPI() as api:
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
        client = anthropic.Anthropic(api_key="test", base_url=api.base_url, max_retries=0)
        batch_id = body["batch"]
        assert client.messages.batches.retrieve(batch_id).processing_status == "ended"
        seen = {"lines": 0, "labels": 0, "checkpoints": 0}

        def apply(line) -> None:
            seen["lines"] += 1
            seen["labels"] += line.result.type == "succeeded"

        def checkpoint(position: int) -> None:
            seen["checkpoints"] += 1

        tracemalloc.start()
        try:
            stream = client.messages.batches.results(batch_id)
            finished, position, applied = stream_results(
                stream, 0, apply, checkpoint, lambda: False
            )
            stream.close()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()

    assert (finished, position, applied) == (True, RESULTS, RESULTS)
    assert seen["labels"] == RESULTS
    assert seen["checkpoints"] == RESULTS // 50
    # The stream is about 40 MB of JSON; holding it (or its parsed lines) would cost far
    # more than this. Flat: a few lines and the SDK's buffers at a time.
    assert peak < 8 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB"
