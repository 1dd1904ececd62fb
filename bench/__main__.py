"""``python -m bench [--quick] [--out DIR]``: every benchmark, one after another.

Each benchmark prints its table(s) with the ratio against its baseline measured in the same
run, and all results are merged into ``bench/out/results.json``. The full run writes the chart
``bench/model_requests.png``. Order: cheapest first; the splitter and the scale run last.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from bench import (
    batch_memory,
    cold_start,
    cost,
    duplicates,
    dynamodb_calls,
    scale,
    splitter,
    synth,
)
from bench.harness import parse_args, write_results

BENCHMARKS = {
    "dynamodb_calls": dynamodb_calls.run,
    "duplicates": duplicates.run,
    "cold_start": cold_start.run,
    "cost": cost.run,
    "batch_memory": batch_memory.run,
    "synth": synth.run,
    "splitter": splitter.run,
    "scale": scale.run,
}


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    started = time.perf_counter()
    for name, run in BENCHMARKS.items():
        print(f"\n=== {name} ===", flush=True)
        began = time.perf_counter()
        result = run(quick=args.quick, out_dir=args.out)
        seconds = time.perf_counter() - began
        write_results(name, {"quick": args.quick, "seconds": seconds, **result}, args.out)
        print(f"({name}: {seconds:.1f} s)", flush=True)
    print(
        f"\nall benchmarks: {time.perf_counter() - started:.1f} s; results: "
        f"{args.out / 'results.json'}"
    )


if __name__ == "__main__":
    main()
