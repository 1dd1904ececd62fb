"""Issue 19: results are streamed, so memory stays flat at 100,000 results.

The real SDK reads a 100,000-line results stream over HTTP from the fake's batch endpoint,
through the adapter (``model_step.anthropic_batches``) and the collector's own paging
(``model_step.batch_results.pages``: 100 lines at a time, each page's rows read at once).

The read runs in a child process, the fake in this one, so the child's memory is the
reader's alone. The child first reads a 100-line batch (imports, the connection, the SDK's
caches), then resets its peak resident set (``/proc/self/clear_refs``, Linux) and reads the
100,000 lines: the peak's growth over the resident set before the read is bounded. Where the
peak cannot be reset, the child measures tracemalloc's peak over the read instead (the same
bound, about six times the CPU). No timing is asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from model_step.batch_limits import ROWS_PAGE

from tests.fakes import FakeMessagesAPI

RESULTS = 100_000
#: The stream is about 40 MB of JSON; holding it, or its parsed lines (about 300 MB), would
#: cost far more than this. Flat: a few lines and the SDK's buffers at a time.
PEAK_BOUND = 8 * 1024 * 1024
LAMBDA_SRC = Path(__file__).resolve().parents[2] / "lambda_src"

CHILD = r"""
import json, os, re, sys
from model_step import Settings
from model_step.anthropic_batches import AnthropicBatches
from model_step.batch_limits import ROWS_PAGE
from model_step.batch_results import pages
from model_step.client import ModelClientProvider

def kib(field):
    with open("/proc/self/status") as status:
        return int(re.search(rf"^{field}:\s+(\d+) kB", status.read(), re.M).group(1))

settings = Settings(
    idempotency_table_name="unused",
    dead_letter_queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/unused",
    idempotency_key="[upload_id, row_number]",
    prompt_version="v1",
    system_prompt="Answer hot, warm or cold.",
)
provider = AnthropicBatches(settings, ModelClientProvider(settings, lambda name: None))

def read(batch_id):
    assert provider.status(batch_id).phase == "ended"
    seen = {"lines": 0, "labels": 0, "pages": 0}
    with provider.results(batch_id) as lines:
        for page in pages(lines, ROWS_PAGE):
            seen["pages"] += 1
            for line in page:
                seen["lines"] += 1
                seen["labels"] += line.kind == "succeeded"
    return seen

warm, batch_id = sys.argv[1:]
read(warm)
try:
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # the peak resident set is now the resident set
    before = kib("VmRSS")
    seen = read(batch_id)
    method, peak = "VmHWM", (kib("VmHWM") - before) * 1024
except OSError:
    import tracemalloc
    tracemalloc.start()
    seen = read(batch_id)
    method, peak = "tracemalloc", tracemalloc.get_traced_memory()[1]
print(json.dumps({"seen": seen, "method": method, "peak": peak}))
"""


def _batch(api: FakeMessagesAPI, size: int) -> str:
    """A batch of ``size`` one-row requests, ended on the fake.

    The body is the text ``json.dumps`` would write for the requests, formatted from one
    encoded ``params``: building and encoding 100,000 dicts took a third of this process's CPU.
    """
    params = json.dumps(
        {
            "model": "claude-haiku-5-5",
            "max_tokens": 8,
            "thinking": {"type": "disabled"},
            "messages": [{"role": "user", "content": "row"}],
        }
    )
    requests = ", ".join(f'{{"custom_id": "k{n:031d}", "params": {params}}}' for n in range(size))
    status, body, _ = api.batches.create(f'{{"requests": [{requests}]}}'.encode())
    assert status == 200 and body is not None
    return str(body["batch"])


@pytest.mark.long  # 100,000 lines parsed by the SDK: about 15 s of CPU, both processes
def test_100000_streamed_results_keep_memory_flat():
    with FakeMessagesAPI() as api:
        warm, batch_id = _batch(api, 100), _batch(api, RESULTS)
        env = {
            **os.environ,
            "ANTHROPIC_API_KEY": "test",
            "ANTHROPIC_BASE_URL": api.base_url,
            "PYTHONPATH": os.pathsep.join([str(LAMBDA_SRC), os.environ.get("PYTHONPATH", "")]),
        }
        child = subprocess.run(
            [sys.executable, "-c", CHILD, warm, batch_id],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert child.returncode == 0, child.stderr[-3000:]
    measured = json.loads(child.stdout.splitlines()[-1])

    assert measured["seen"] == {"lines": RESULTS, "labels": RESULTS, "pages": RESULTS // ROWS_PAGE}
    peak = measured["peak"]
    assert peak < PEAK_BOUND, f"{measured['method']} peak {peak / 1e6:.1f} MB"
