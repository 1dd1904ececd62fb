"""Who holds the batch run's memory: the bytes still allocated once every row is answered,
by owner, at two sizes.

``bench.cost``'s 100,000-row batch run grows its resident set about 10 KiB a row. The run's
process holds the runtime and the two emulators it talks to (moto's tables and queues, the
local Messages API's batches), so the resident set alone cannot say which one grows. This
benchmark runs ``bench.cost.measure_batch`` under ``tracemalloc`` at ``--rows SMALL LARGE``
(each in a fresh moto), takes a snapshot once every row is answered, while everything is
still alive (after a full garbage collection), and charges each allocation to an owner:

- ``moto``: moto's DynamoDB items, its SQS queues, and its request handling;
- ``local model``: ``constructs_lib.local_engine.local_model``, the local Messages API;
- ``runtime``: ``lambda_src/model_step``, the code that runs in Lambda;
- ``SDKs``: botocore, boto3, the Anthropic SDK, httpx, Powertools and pydantic, where the
  runtime (or moto, through botocore) called them;
- ``bench``: this directory's harness;
- ``other``: frames of none of these (the interpreter, the standard library alone).

An allocation belongs to the innermost frame of its traceback (``FRAMES`` deep) that lies
in an owner's files. Standard library frames are passed over, so a ``json.loads`` called by
moto is moto's. The result is each owner's KiB per row: ``(bytes at LARGE - bytes at SMALL)
/ (LARGE - SMALL)``. What stays flat as rows grow is near 0. What the deployed step would
hold is ``runtime`` plus its share of ``SDKs``; moto's tables are DynamoDB, not Lambda
memory.

Run: ``python -m bench.batch_memory [--quick] [--rows SMALL LARGE]`` (default 50 and
200; quick 1 and 2, after a 1-row warm-up instead of 5). tracemalloc, 16 frames deep, slows the
run about 18 times (about 1 s a row here), so the sizes are small: the slope is what matters.
"""

from __future__ import annotations

import argparse
import functools
import gc
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.cost import measure_batch, system_prompt
from bench.harness import (
    bench_main,
    create_idempotency_table,
    mocked_aws,
    positive_int,
    print_table,
)

ROWS = (50, 200)
#: ``--quick`` (a smoke run, ``tests/bench``): the smallest sizes whose moto bytes still grow;
#: 2 and 6 took 6-10 CPU-s more here.
QUICK_ROWS = (1, 2)
#: Traceback depth kept per allocation: deep enough to pass through the standard library,
#: werkzeug and botocore's hooks to the frame of an owner.
FRAMES = 16
#: Rows of the untraced run before the two measured ones.
WARM_UP_ROWS = 5
#: ``--quick``: one row already imports and caches what every row needs once (a smoke run's
#: slope is not read; 5 rows took 1.6 CPU-s more here).
QUICK_WARM_UP_ROWS = 1
#: Owners, each with path fragments of its files, checked in this order for every frame.
OWNERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("moto", ("/moto/",)),
    ("local model", ("/constructs_lib/local_engine/local_model",)),
    ("runtime", ("/model_step/",)),  # lambda_src/model_step, or a staged copy of it
    (
        "SDKs",
        (
            "/botocore/",
            "/boto3/",
            "/anthropic/",
            "/httpx",
            "/httpcore/",
            "/aws_lambda_powertools/",
            "/pydantic",
        ),
    ),
    ("bench", ("/bench/",)),
)
OTHER = "other"
#: Every owner an allocation can be charged to, in report order.
OWNER_NAMES = (*(name for name, _ in OWNERS), OTHER)


def owner_of(filenames: Sequence[str]) -> str:
    """The owner of an allocation whose traceback has ``filenames``, innermost first."""
    for filename in filenames:
        owner = owner_of_file(filename)
        if owner is not None:
            return owner
    return OTHER


@functools.cache
def owner_of_file(filename: str) -> str | None:
    """The owner whose files include ``filename``, or None. Cached: a snapshot's tracebacks
    pass through the same few hundred files hundreds of thousands of times."""
    for owner, fragments in OWNERS:
        if any(fragment in filename for fragment in fragments):
            return owner
    return None


def by_owner(snapshot: tracemalloc.Snapshot) -> dict[str, int]:
    """Bytes still allocated in ``snapshot``, per owner (every owner listed, 0 if none)."""
    totals = dict.fromkeys(OWNER_NAMES, 0)
    for stat in snapshot.statistics("traceback"):
        # A tracemalloc Traceback runs from the oldest frame to the most recent.
        names = [frame.filename for frame in reversed(stat.traceback)]
        totals[owner_of(names)] += stat.size
    return totals


def measure(rows: int, prompt: str, *, traced: bool = True) -> dict[str, int]:
    """Bytes per owner still allocated once ``rows`` batch rows are answered (fresh moto);
    ``traced=False`` runs the same untraced (the warm-up: imports and one-time caches)."""
    held: dict[str, int] = {}

    def on_settled() -> None:
        if traced:
            gc.collect()  # garbage of a reference cycle is not held: count only what lives
            snapshot = tracemalloc.take_snapshot()
            # The snapshot holds every figure: what follows (counting it by owner, the run's
            # end, moto's reset) runs untraced, about 18 times faster.
            tracemalloc.stop()
            held.update(by_owner(snapshot))

    with mocked_aws() as session:
        create_idempotency_table(session)
        if traced:
            tracemalloc.start(FRAMES)
        try:
            result = measure_batch(rows, prompt, session, f"memory-{rows}", on_settled)
        finally:
            tracemalloc.stop()
    assert result["batch_requests"] == rows, result
    return held


def run(
    *, quick: bool = False, out_dir: Path | None = None, rows: Sequence[int] | None = None
) -> dict[str, Any]:
    """KiB per row by owner between ``rows`` [(50, 200); (1, 2) quick]."""
    small, large = rows or (QUICK_ROWS if quick else ROWS)
    if large <= small:
        raise SystemExit(f"--rows needs SMALL < LARGE, got {small} {large}")
    prompt = system_prompt()
    # Untraced first: what the first run imports and caches once is in neither snapshot.
    measure(QUICK_WARM_UP_ROWS if quick else WARM_UP_ROWS, prompt, traced=False)
    at_small = measure(small, prompt)
    at_large = measure(large, prompt)
    per_row = {
        owner: (at_large[owner] - at_small[owner]) / 1024 / (large - small) for owner in at_small
    }
    result = {
        "rows": [small, large],
        "frames": FRAMES,
        "bytes": {str(small): at_small, str(large): at_large},
        "kib_per_row": per_row,
        "total_kib_per_row": sum(per_row.values()),
    }
    print_report(result)
    return result


def print_report(result: dict[str, Any]) -> None:
    small, large = result["rows"]
    table = [
        [
            owner,
            result["bytes"][str(small)][owner] / 2**20,
            result["bytes"][str(large)][owner] / 2**20,
            kib,
        ]
        for owner, kib in result["kib_per_row"].items()
    ]
    table.append(["all", None, None, result["total_kib_per_row"]])
    print_table(
        f"Bytes still allocated once every batch row is answered (tracemalloc, {small:,} and "
        f"{large:,} rows)",
        ["owner", f"MiB at {small:,}", f"MiB at {large:,}", "KiB per row"],
        table,
    )


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rows",
        type=positive_int,
        nargs=2,
        metavar=("SMALL", "LARGE"),
        default=None,
        help=f"the two sizes (default {ROWS[0]:,} {ROWS[1]:,}; quick {QUICK_ROWS[0]} "
        f"{QUICK_ROWS[1]})",
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return bench_main("batch_memory", __doc__.splitlines()[0], run, argv, _options)


if __name__ == "__main__":
    main()
