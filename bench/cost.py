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

Message Batches (issue 19), in the same process: the same rows through the same step with
``MODEL_DELIVERY=batch``, handed over as the buffer queue's mapping hands them (SQS batches
of up to 10,000 records, their first row waited past ``BATCH_MAX_WAIT_SECONDS``), then the
schedule tick (``{"model_step_batch": "tick"}``) until every row is answered. Against the
cached realtime run above (the construct's default), per delivery: billed requests per row,
model token cost (input, output, cache writes and reads, at the price table's batch
discount for batch requests) per 1,000 rows as a ratio to realtime (target <= 0.51), and
wall time. Then ``BATCH_SCALE_ROWS`` (100,000) rows in batch mode alone, shared out
between ``SCALE_WORKERS`` (2) worker processes that run at once, one a core, as the
buffer queue's mapping runs invocations side by side: each stages, submits and collects
its share through its own step on its own fresh moto and local model (the shares have no
key in common; moto serves one process's calls one at a time, so a second core can only
help with a second moto). Wall time against the 20-minute target, each worker's time per
row beside the 10,000-row batch run's (near 1.00: the cost of a row does not grow with the
upload), and each worker's peak resident memory (VmRSS sampled every 0.2 s) beside the
10,000-row run's. moto holds every record in its process, so the resident set grows with
the rows it stores; the growth per row at both sizes says whether anything else does.

Run: ``python -m bench.cost [--quick] [--rows N] [--scale-rows N] [--scale-workers N]``
(quick: 2 rows, and 2 at scale). ``--rows`` sets the comparison's rows, ``--scale-rows``
the scale run's (0 skips it), ``--scale-workers`` its processes (1: in this process alone):
``python -m bench.cost --scale-rows 0`` is the 10,000-row realtime vs batch comparison
alone.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from bench.harness import (
    Delivery,
    FakeLambdaContext,
    bench_main,
    create_idempotency_table,
    create_queue,
    make_event,
    mocked_aws,
    non_negative_int,
    patched_env,
    positive_int,
    print_table,
    run_sequential,
    shipped_prompt,
    step_environment,
)
from constructs_lib.local_engine.local_model import LocalMessagesAPI, estimated_tokens
from constructs_lib.model_prices import PRICE_TABLE, upload_cost

ROWS = 10_000
#: ``--quick`` (a smoke run, ``tests/bench``): rows of the comparison. 2 rows are still one
#: cache write and a read, and one Message Batch; 10 took 1.2 CPU-s more here, 50 6 more.
QUICK_ROWS = 2
#: Worker processes of the batch scale run: one per core of the 2-core machine its target
#: names.
SCALE_WORKERS = 2
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
    started = time.monotonic()
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
            # Message Batches comparison (issue 19): every billed token, output included.
            "output_tokens": api.output_tokens,
            "model_cost_usd": model_cost({**tokens, "output_tokens": api.output_tokens}),
            "wall_s": round(time.monotonic() - started, 1),
        }


def input_cost(tokens: dict[str, int]) -> float:
    """Dollars of the input tokens (uncached, written, read) at the default model's price."""
    price = PRICE_TABLE[MODEL_ID].for_runtime("5m")
    cost = upload_cost({**tokens, "output_tokens": 0}, price)["cost_usd"]
    assert cost is not None  # the default model is in the price table
    return cost


def model_cost(tokens: dict[str, int]) -> float:
    """Dollars of every billed token (``batch_*``: the part billed at the batch discount) at
    the default model's price, through the ledger's own formula."""
    price = PRICE_TABLE[MODEL_ID].for_runtime("5m")
    cost = upload_cost(tokens, price)["cost_usd"]
    assert cost is not None
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


def run(
    *,
    quick: bool = False,
    out_dir: Path | None = None,
    rows: int | None = None,
    scale_rows: int | None = None,
    scale_workers: int = SCALE_WORKERS,
) -> dict[str, Any]:
    """The cache and delivery comparison at ``rows`` rows [10,000; 2 quick], then the batch
    scale run at ``scale_rows`` [100,000; 2 quick; 0 skips it] in ``scale_workers``
    worker processes [2]."""
    rows = rows or (QUICK_ROWS if quick else ROWS)
    if scale_rows is None:
        scale_rows = QUICK_SCALE_ROWS if quick else BATCH_SCALE_ROWS
    prompt = system_prompt()
    with mocked_aws() as session:
        create_idempotency_table(session)
        baseline = measure("off", rows, prompt, session)
        cached = measure("5m", rows, prompt, session)
        batch = measure_batch(rows, prompt, session, "batch")
    scale = measure_scale(scale_rows, prompt, scale_workers) if scale_rows else None
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
        "delivery": delivery_figures(cached, batch, rows),
        "batch_scale": scale,
    }
    print_report(result)
    print_delivery_report(result)
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


# ------------------------------------------------------- Message Batches delivery (issue 19)
#: Rows of the batch-only scale run, and its target (wall seconds).
BATCH_SCALE_ROWS = 100_000
#: ``--quick``: 1 row a worker, the same path as more (100 took 5 CPU-s more here). Most of a
#: quick scale run is starting its two worker processes.
QUICK_SCALE_ROWS = 2
SCALE_TARGET_SECONDS = 20 * 60
#: The issue's target for batch / realtime token cost.
BATCH_TARGET_RATIO = 0.51
#: Records per SQS batch the buffer queue's mapping hands the function (BatchSize).
MAPPING_BATCH = 10_000
TICK = {"model_step_batch": "tick"}


class MemoryWatch:
    """The process's resident set, sampled every 0.2 s on a thread: its peak over a run."""

    def __init__(self) -> None:
        self.peak = self.start = resident_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, resident_bytes())

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, resident_bytes())


def resident_bytes() -> int:
    """VmRSS of this process (Linux), 0 elsewhere."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def sqs_records(events: list[dict], sent_ms: int) -> dict[str, Any]:
    """``events`` as the buffer queue's mapping hands them to the function."""
    return {
        "Records": [
            {
                "messageId": str(uuid.uuid4()),
                "receiptHandle": str(uuid.uuid4()),
                "body": json.dumps(event),
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": str(sent_ms)},
                "messageAttributes": {},
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:bench-buffer",
                "awsRegion": "us-east-1",
            }
            for event in events
        ]
    }


def measure_batch(
    rows: int,
    prompt: str,
    session: Any,
    name: str,
    on_settled: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Classify ``rows`` rows through the real runtime under ``MODEL_DELIVERY=batch``: SQS
    batches of :data:`MAPPING_BATCH` rows whose first row waited past ``max_wait``, then
    ticks until no submission is open. Billed requests, tokens, cost, wall time, memory.
    ``on_settled`` [None] is called once every row is answered, while the step, moto's
    items and the local model are all still alive (``bench.batch_memory`` takes its
    snapshot there)."""
    from model_step import ModelStep, Settings

    clock = VirtualClock()
    with LocalMessagesAPI(run_clock=clock, model=MODEL_ID, batch_delay_seconds=0.0) as api:
        # Wall-clock batches: the runtime compares their created_at with its own clock.
        api.batches.clock = time.time
        environment = {
            **step_environment(create_queue(session, f"dlq-batch-{name}"), api.base_url),
            "SYSTEM_PROMPT_SHA256": shipped_prompt(prompt),
            "PROMPT_CACHE": "5m",
            "MODEL_ID": MODEL_ID,
            "IDEMPOTENCY_RECORD_PREFIX": f"bench-cost-batch-{name}",
            "MODEL_DELIVERY": "batch",
            "BATCH_MAX_REQUESTS": str(MAPPING_BATCH),
            "BATCH_MAX_WAIT_SECONDS": "300",
        }
        started = time.monotonic()
        with patched_env(environment), MemoryWatch() as memory:
            step = ModelStep(settings=Settings.from_environment(), boto3_session=session)
            waited = int((time.time() - 600) * 1000)  # past max_wait: due when flushed
            for first in range(1, rows + 1, MAPPING_BATCH):
                events = [
                    make_event(f"cost-batch-{name}", row)
                    for row in range(first, min(rows, first + MAPPING_BATCH - 1) + 1)
                ]
                response = step.handle(sqs_records(events, waited), FakeLambdaContext())
                assert response == {"batchItemFailures": []}, response
                del events
            ticks = 0
            while step._components().batch.store.open_submissions():  # type: ignore[union-attr]
                step.handle(TICK, FakeLambdaContext())
                ticks += 1
            if on_settled is not None:
                on_settled()
        wall = time.monotonic() - started
        billed = api.batches.billed
        tokens = {
            "input_tokens": api.input_tokens,
            "output_tokens": api.output_tokens,
            "cache_creation_input_tokens": api.cache_creation_input_tokens,
            "cache_read_input_tokens": api.cache_read_input_tokens,
        }
        return {
            "rows": rows,
            "requests": api.request_count + billed,
            "realtime_requests": api.request_count,
            "batch_requests": billed,
            "batches": len(api.batches.batches),
            "ticks": ticks,
            **tokens,
            "model_cost_usd": model_cost(
                {**tokens, **{f"batch_{k}": v for k, v in api.batch_tokens.items()}}
            ),
            "wall_s": round(wall, 1),
            "peak_rss_mib": round(memory.peak / 2**20, 1),
            "rss_growth_mib": round((memory.peak - memory.start) / 2**20, 1),
            "rss_growth_kib_per_row": round((memory.peak - memory.start) / 1024 / rows, 2),
            "seconds_per_row": round(wall / rows, 4),
        }


def scale_worker(rows: int, prompt: str, name: str) -> dict[str, Any]:
    """One worker of the scale run: ``rows`` rows by batch through a step of its own, on a
    fresh moto (its records are the only ones it holds) and a local model of its own."""
    with mocked_aws() as session:
        create_idempotency_table(session)
        return measure_batch(rows, prompt, session, name)


def measure_scale(rows: int, prompt: str, workers: int = SCALE_WORKERS) -> dict[str, Any]:
    """``rows`` rows by batch, shared out between ``workers`` processes [2] that run at once,
    as the buffer queue's mapping runs invocations side by side. Each worker stages,
    submits and collects its share through its own ``ModelStep``, moto and local model
    (:func:`scale_worker`): the shares have no key in common, and DynamoDB serves each key
    on its own, so what one share's step does never waits on the other's. A single worker
    runs in this process. The figures are the shares' sums; ``wall_s`` is from the first
    worker's start to the last one's end, and memory is per worker (each process holds its
    own moto)."""
    workers = min(workers, rows)
    shares = [rows // workers + (1 if index < rows % workers else 0) for index in range(workers)]
    names = [f"scale-{index}" for index in range(workers)]
    started = time.monotonic()
    if workers == 1:
        parts = [scale_worker(rows, prompt, names[0])]
    else:
        context = multiprocessing.get_context("spawn")  # no moto or thread state inherited
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            parts = list(pool.map(scale_worker, shares, [prompt] * workers, names))
    wall = time.monotonic() - started
    summed = (
        "requests",
        "realtime_requests",
        "batch_requests",
        "batches",
        "ticks",
        "input_tokens",
        "output_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "model_cost_usd",
    )
    growth = sum(part["rss_growth_mib"] for part in parts)
    return {
        "rows": rows,
        "workers": workers,
        **{name: sum(part[name] for part in parts) for name in summed},
        "wall_s": round(wall, 1),
        "seconds_per_row": round(wall / rows, 4),
        # The slowest worker's own time per row of its share: the same figure as a one-process
        # run's seconds_per_row, so the two sizes compare.
        "worker_seconds_per_row": max(part["seconds_per_row"] for part in parts),
        "peak_rss_mib": max(part["peak_rss_mib"] for part in parts),
        "peak_rss_mib_all_workers": round(sum(part["peak_rss_mib"] for part in parts), 1),
        "rss_growth_mib": round(growth, 1),
        "rss_growth_kib_per_row": round(growth * 1024 / rows, 2),
        "per_worker": parts,
    }


def delivery_figures(realtime: dict[str, Any], batch: dict[str, Any], rows: int) -> dict:
    """Per delivery: billed requests per row, token cost per 1,000 rows and its ratio to
    realtime, wall time."""
    per_thousand = {
        "realtime": realtime["model_cost_usd"] * 1000 / rows,
        "batch": batch["model_cost_usd"] * 1000 / rows,
    }
    return {
        "rows": rows,
        "requests_per_row": {
            "realtime": realtime["requests"] / rows,
            "batch": batch["requests"] / rows,
        },
        "cost_per_1000_rows_usd": per_thousand,
        "cost_ratio": per_thousand["batch"] / per_thousand["realtime"],
        "target_ratio": BATCH_TARGET_RATIO,
        "wall_s": {"realtime": realtime["wall_s"], "batch": batch["wall_s"]},
        "wall_ratio": batch["wall_s"] / realtime["wall_s"] if realtime["wall_s"] else None,
        "batch": batch,
    }


def print_delivery_report(result: dict[str, Any]) -> None:
    figures, scale = result["delivery"], result["batch_scale"]
    costs = figures["cost_per_1000_rows_usd"]
    print_table(
        f"Realtime vs Message Batches: {figures['rows']:,} rows, {result['model_id']} prices "
        "(batch at its 50 % discount), prompt cache 5m",
        ["delivery", "requests / row", "token cost / 1,000 rows", "ratio", "wall s", "ratio"],
        [
            [
                name,
                f"{figures['requests_per_row'][name]:.2f}",
                f"${figures['cost_per_1000_rows_usd'][name]:.4f}",
                f"{costs[name] / costs['realtime']:.4f}",
                figures["wall_s"][name],
                f"{figures['wall_s'][name] / figures['wall_s']['realtime']:.2f}"
                if figures["wall_s"]["realtime"]
                else "-",
            ]
            for name in ("realtime", "batch")
        ],
    )
    met = "met" if figures["cost_ratio"] <= BATCH_TARGET_RATIO else "MISSED"
    print(
        f"\nbatch / realtime token cost: {figures['cost_ratio']:.4f} (target <= "
        f"{BATCH_TARGET_RATIO}, {met})"
    )
    small = figures["batch"]
    if scale is None:
        print("batch at scale: skipped (--scale-rows 0)")
        return
    within = "within" if scale["wall_s"] <= SCALE_TARGET_SECONDS else "NOT within"
    share = scale["rows"] // scale["workers"]
    print(
        f"batch at scale: {scale['rows']:,} rows in {scale['wall_s']} s ({within} the "
        f"{SCALE_TARGET_SECONDS // 60}-minute target) by {scale['workers']} worker "
        f"process(es) at once, each about {share:,} rows through its own step, moto and "
        f"local model; {scale['batches']} batches, "
        f"{scale['requests'] / scale['rows']:.2f} billed requests per row. Per row of a "
        f"worker's share: {scale['worker_seconds_per_row']} s, "
        f"{scale['worker_seconds_per_row'] / small['seconds_per_row']:.2f} x the "
        f"{small['rows']:,}-row run's {small['seconds_per_row']} s. Peak RSS of a worker "
        f"{scale['peak_rss_mib']} MiB, all workers {scale['peak_rss_mib_all_workers']} MiB "
        f"(growth {scale['rss_growth_mib']} MiB; {small['rows']:,} rows: "
        f"{small['peak_rss_mib']} MiB, growth {small['rss_growth_mib']} MiB): "
        f"{scale['rss_growth_kib_per_row']} KiB a row at scale, "
        f"{small['rss_growth_kib_per_row']} at {small['rows']:,} (moto keeps every record "
        "in its process; the runtime streams results, see tests/runtime/test_batch_memory.py)"
    )


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rows",
        type=positive_int,
        default=None,
        help=f"rows of the cache and delivery comparison (default {ROWS:,}; quick {QUICK_ROWS})",
    )
    parser.add_argument(
        "--scale-rows",
        type=non_negative_int,
        default=None,
        help=f"rows of the batch scale run (default {BATCH_SCALE_ROWS:,}; quick "
        f"{QUICK_SCALE_ROWS}; 0 skips it)",
    )
    parser.add_argument(
        "--scale-workers",
        type=positive_int,
        default=SCALE_WORKERS,
        help=f"worker processes of the batch scale run (default {SCALE_WORKERS}, one a core)",
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return bench_main("cost", __doc__.splitlines()[0], run, argv, _options)


if __name__ == "__main__":
    main()
