"""Input-token cost with prompt caching, as a ratio to the same rows without it.

The real ``ModelStep`` (Powertools idempotency over moto, the real Anthropic SDK) classifies
10,000 rows with a 6,000-token system prompt against the local model, which emulates the
API's prompt cache (``constructs_lib.local_engine.local_model.PromptCacheEmulator``): a
prefix at least the model's minimum long is written on first use and read while its TTL
lasts, each read refreshing it. Two runs in one process, the same rows:

- ``cached``: ``PROMPT_CACHE=5m``, the construct's default;
- ``uncached``: ``PROMPT_CACHE=off``, the baseline: every request bills the whole prompt.

Rows arrive ``ROW_INTERVAL_SECONDS`` apart on the local model's clock (a virtual clock the
benchmark advances per row, so the TTL is measured as a deployed step would meet it, however
fast this machine runs). Input tokens are priced with ``constructs_lib.model_prices`` (the
default model's row) through the ledger's own formula, output tokens left out: the ratio is
of input-token cost only.

Beside the measured ratio, the physical minimum from the price table: one cache write of the
prefix, then a read for every other row, plus each row's own (uncacheable) tokens. The report
says how close the run came to it.

Run: ``python -m bench.cost [--quick]`` (quick: 200 rows).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness import (
    Delivery,
    bench_main,
    create_idempotency_table,
    create_queue,
    make_event,
    mocked_aws,
    patched_env,
    print_table,
    run_sequential,
    shipped_prompt,
    step_environment,
)
from constructs_lib.local_engine.local_model import LocalMessagesAPI, estimated_tokens
from constructs_lib.model_prices import PRICE_TABLE, upload_cost

ROWS = 10_000
QUICK_ROWS = 200
#: The system prompt's length in the local model's tokens (4 characters a token).
PROMPT_TOKENS = 6_000
#: Seconds between two rows on the model's clock: 10,000 rows in about 3 hours, far slower
#: than a capped step runs, so every read must refresh the 5-minute TTL to keep the entry.
ROW_INTERVAL_SECONDS = 1.0
#: The default model, whose price-table row prices the run.
MODEL_ID = "claude-haiku-5-5"
#: The issue's target for the ratio.
TARGET_RATIO = 0.15
RUBRIC = Path(__file__).resolve().parents[1] / "lambda_src/prospect_classifier/system_prompt.md"


def system_prompt(tokens: int = PROMPT_TOKENS) -> str:
    """The classifier's rubric, repeated to ``tokens`` local-model tokens."""
    rubric = RUBRIC.read_text(encoding="utf-8")
    chars = tokens * 4
    return (rubric * (chars // len(rubric) + 1))[:chars]


class VirtualClock:
    """The local model's run clock: it moves only when the benchmark advances it."""

    def __init__(self) -> None:
        self._now = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


def measure(prompt_cache: str, rows: int, prompt: str, session: Any) -> dict[str, Any]:
    """Classify ``rows`` rows through the real runtime with ``prompt_cache``; the tokens the
    local model billed and their input-token cost."""
    from model_step import ModelStep, Settings

    clock = VirtualClock()
    with LocalMessagesAPI(run_clock=clock, model=MODEL_ID) as api:
        environment = {
            **step_environment(create_queue(session, f"dlq-{prompt_cache}"), api.base_url),
            "SYSTEM_PROMPT_SHA256": shipped_prompt(prompt),
            "PROMPT_CACHE": prompt_cache,
            "MODEL_ID": MODEL_ID,
            "IDEMPOTENCY_RECORD_PREFIX": f"bench-cost-{prompt_cache}",
        }
        with patched_env(environment):
            step = ModelStep(settings=Settings.from_environment(), boto3_session=session)
            for row in range(1, rows + 1):
                run_sequential(step.handle, [Delivery(make_event(f"cost-{prompt_cache}", row))])
                clock.advance(ROW_INTERVAL_SECONDS)
        tokens = {
            "input_tokens": api.input_tokens,
            "cache_creation_input_tokens": api.cache_creation_input_tokens,
            "cache_read_input_tokens": api.cache_read_input_tokens,
        }
        return {
            "requests": api.request_count,
            "cache_writes": api.prompt_cache.writes,
            "cache_reads": api.prompt_cache.reads,
            **tokens,
            "input_cost_usd": input_cost(tokens),
        }


def input_cost(tokens: dict[str, int]) -> float:
    """Dollars of the input tokens (uncached, written, read) at the default model's price."""
    price = PRICE_TABLE[MODEL_ID].for_runtime("5m")
    cost = upload_cost({**tokens, "output_tokens": 0}, price)["cost_usd"]
    assert cost is not None  # the default model is in the price table
    return cost


def physical_minimum(rows: int, prefix_tokens: int, row_tokens: int) -> float:
    """The least the rows' input can cost: one write of the prefix, reads for the rest, and
    the rows' own tokens (``row_tokens`` in all, never cacheable) at the input price."""
    return input_cost(
        {
            "input_tokens": row_tokens,
            "cache_creation_input_tokens": prefix_tokens,
            "cache_read_input_tokens": (rows - 1) * prefix_tokens,
        }
    )


def run(*, quick: bool = False, out_dir: Path | None = None) -> dict[str, Any]:
    rows = QUICK_ROWS if quick else ROWS
    prompt = system_prompt()
    with mocked_aws() as session:
        create_idempotency_table(session)
        baseline = measure("off", rows, prompt, session)
        cached = measure("5m", rows, prompt, session)
    prefix = estimated_tokens(prompt)
    # The rows' own tokens (their user messages): what the cached run billed uncached. They
    # are the same under any caching, so the minimum differs from the run only in writes.
    minimum = physical_minimum(rows, prefix, cached["input_tokens"])
    ratio = cached["input_cost_usd"] / baseline["input_cost_usd"]
    minimum_ratio = minimum / baseline["input_cost_usd"]
    result = {
        "rows": rows,
        "prompt_tokens": prefix,
        "row_interval_seconds": ROW_INTERVAL_SECONDS,
        "model_id": MODEL_ID,
        "uncached": baseline,
        "cached": cached,
        "ratio": ratio,
        "physical_minimum_usd": minimum,
        "physical_minimum_ratio": minimum_ratio,
        "above_minimum": cached["input_cost_usd"] / minimum - 1,
        "target_ratio": TARGET_RATIO,
    }
    print_report(result)
    return result


def print_report(result: dict[str, Any]) -> None:
    columns = ["requests", "cache_writes", "cache_reads", "input_tokens"]
    columns += ["cache_creation_input_tokens", "cache_read_input_tokens", "input_cost_usd"]
    rows: Sequence[Sequence[Any]] = [
        [name, *(result[name][column] for column in columns)] for name in ("uncached", "cached")
    ]
    print_table(
        f"Input-token cost of {result['rows']:,} rows, a {result['prompt_tokens']:,}-token "
        f"system prompt, {result['model_id']} prices, rows {result['row_interval_seconds']} s "
        "apart",
        ["run", *columns],
        rows,
    )
    print(
        f"\ncached / uncached input cost: {result['ratio']:.4f} (target <= "
        f"{result['target_ratio']}); physical minimum from the price table (one write, then "
        f"reads): ${result['physical_minimum_usd']:.4f} = {result['physical_minimum_ratio']:.4f}"
        f" of uncached; the run is {result['above_minimum']:.2%} above it"
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return bench_main("cost", __doc__.splitlines()[0], run, argv)


if __name__ == "__main__":
    main()
