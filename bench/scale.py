"""A large upload under a provider's rate limit: rows lost, throughput against the limit, and
billed requests per row; plus what the template's settings mean at real sizes.

Part 1 runs the real pipeline locally (``prospect-uploader run``'s engine: the stack from
``cdk.out``, moto, the real handlers, the buffer queue and its mapping's MaximumConcurrency
on the run's clock) on a generated CSV of valid rows, with the local model's ``--rate-limit``
set below what the local pipeline can do, so the limit binds. Per size it prints:

- ``rows lost``: valid rows not classified (must be 0);
- ``throughput``: classified rows per minute of the run's clock / the limit (target >= 0.8).
  The clock runs from the upload to the last settled invocation, so splitting and the tail
  are included;
- ``requests/row``: billed (non-429) model requests per valid row (target 1.00).

Part 2 is arithmetic over the template (no run): for 50, 1,000 and 4,000 requests per minute,
how long 10k, 100k and 500k rows take, and whether that fits the window the design holds a
row for: the step's ``MAX_EVENT_AGE_SECONDS`` (the runtime dead-letters a row whose age plus
its wait would pass it) and the buffer queue's retention, whichever is shorter. Throughput
is capped by the provider's limit and by the mapping's concurrency:
``max_concurrency x 60 / seconds per call`` requests per minute (``SECONDS_PER_CALL``
assumed, printed). Where a size does not fit, the table says what to do.

Run: ``python -m bench.scale [--quick]`` (the full run takes tens of minutes on 2 cores:
the local pipeline handles 20-50 rows a second here).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness import REPO, FakeLambdaContext, bench_main, print_table

HEADER = "email,first_name,last_name,company,title,country,notes"
#: Full run: the sizes issue 8 asks for. Quick: a smoke run.
SIZES = (2_000, 20_000)
QUICK_SIZES = (60,)
#: Requests per minute of the run's clock, and how long that minute lasts locally: 20 a
#: minute of 1 s is 20 requests a second, below the ~50 rows/s the local pipeline does here
#: unlimited, so the limit binds. (The limit's value is arbitrary: the clock scales it.)
RATE_LIMIT = 20
SECONDS_PER_MINUTE = 1.0
QUICK_RATE_LIMIT = 20
#: Part 2.
TABLE_RPM = (50, 1_000, 4_000)
TABLE_ROWS = (10_000, 100_000, 500_000)
SECONDS_PER_CALL = 1.5  # assumed duration of one classify call (model latency + overhead)
STACK = "ProspectUploader"


def write_csv(path: Path, rows: int) -> Path:
    """A CSV of ``rows`` distinct valid prospect rows."""
    lines = [HEADER]
    lines += [
        f"lead{n}@example{n % 97}.com,Ann{n},Lee{n},Company {n % 50},CTO,US,note {n}"
        for n in range(rows)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def measure(rows: int, rate_limit: int, seconds_per_minute: float, work: Path) -> dict[str, Any]:
    """One local run of ``rows`` valid rows at ``rate_limit``."""
    from constructs_lib.prospect_uploader.local_run import RunOptions, run_pipeline

    csv_path = write_csv(work / f"rows-{rows}.csv", rows)
    began = time.perf_counter()
    result = run_pipeline(
        RunOptions(
            csv_path=csv_path,
            cdk_out=REPO / "cdk.out",
            rate_limit=rate_limit,
            seconds_per_minute=seconds_per_minute,
            log_file=work / f"rows-{rows}.log",
            run_timeout_seconds=max(300.0, rows / 2),
            # The realtime path under a rate limit (context auto would send 2,000 rows by
            # Message Batches, whose limits are their own: see batch_capacity).
            delivery="realtime",
        )
    )
    wall = time.perf_counter() - began
    billed = result.model_requests - result.rate_limited
    per_minute = result.classified / result.run_minutes if result.run_minutes else 0.0
    return {
        "rows": rows,
        "rate_limit_rpm": rate_limit,
        "valid": result.valid,
        "classified": result.classified,
        "failed": result.failed,
        "rows_lost": result.valid - result.classified,
        "model_requests": result.model_requests,
        "rate_limited": result.rate_limited,
        "requests_per_row": billed / result.valid if result.valid else None,
        # Attempts a loaded machine ended late (a request that failed in transport, an
        # attempt past its deadline): each may bill once more, so these alone can raise
        # requests_per_row above 1.
        "late_attempts": result.late_attempts,
        "run_minutes": result.run_minutes,
        "rows_per_run_minute": per_minute,
        "throughput_fraction": per_minute / rate_limit,
        "wall_seconds": wall,
        "denied": result.denied,
        "peak_concurrency": max(
            (q.get("peak_concurrency", 0) for q in result.queues.values()), default=0
        ),
    }


def template_settings(cdk_out: Path = REPO / "cdk.out") -> dict[str, Any]:
    """The model step's window and concurrency cap, read from the synthesized template."""
    template = json.loads((cdk_out / f"{STACK}.template.json").read_text())
    resources = template["Resources"]
    step = next(
        body
        for body in resources.values()
        if body["Type"] == "AWS::Lambda::Function"
        and "IDEMPOTENCY_KEY" in body["Properties"].get("Environment", {}).get("Variables", {})
    )
    variables = step["Properties"]["Environment"]["Variables"]
    max_event_age = int(variables.get("MAX_EVENT_AGE_SECONDS", 86_400))
    buffer_retention = None
    max_concurrency = None
    # The step's cap is its buffer queue's mapping, not the redrive queue's (always 2).
    buffer_id = variables["BUFFER_QUEUE_URL"]["Ref"]
    for body in resources.values():
        if (
            body["Type"] == "AWS::Lambda::EventSourceMapping"
            and body["Properties"].get("ScalingConfig")
            and body["Properties"]["EventSourceArn"]["Fn::GetAtt"][0] == buffer_id
        ):
            max_concurrency = int(body["Properties"]["ScalingConfig"]["MaximumConcurrency"])
            queue = resources[buffer_id]["Properties"]
            buffer_retention = int(queue.get("MessageRetentionPeriod", 345_600))
    return {
        "max_event_age_seconds": max_event_age,
        "buffer_retention_seconds": buffer_retention,
        "max_concurrency": max_concurrency,
        "timeout_seconds": int(step["Properties"].get("Timeout", 3)),
    }


def capacity_table(settings: dict[str, Any], seconds_per_call: float = SECONDS_PER_CALL) -> list:
    """Part 2: one row per (limit, size)."""
    window = settings["max_event_age_seconds"]
    if settings["buffer_retention_seconds"]:
        window = min(window, settings["buffer_retention_seconds"])
    cap = (
        settings["max_concurrency"] * 60.0 / seconds_per_call
        if settings["max_concurrency"]
        else float("inf")
    )
    rows_out = []
    for rpm in TABLE_RPM:
        effective = min(rpm, cap)
        bound = "limit" if rpm <= cap else "max_concurrency"
        for rows in TABLE_ROWS:
            minutes = rows / effective
            fits = minutes * 60 <= window
            most = int(effective * window / 60)
            if fits and bound == "max_concurrency":
                advice = (
                    f"fits; max_concurrency ~{int(rpm * seconds_per_call / 60) + 1} "
                    "would use the whole limit"
                )
            elif fits:
                advice = "fits"
            elif bound == "max_concurrency":
                advice = (
                    f"raise max_concurrency to ~{int(rpm * seconds_per_call / 60) + 1}, "
                    f"or split into uploads of <= {most:,} rows"
                )
            else:
                advice = f"raise the provider limit, or split into uploads of <= {most:,} rows"
            rows_out.append(
                {
                    "rpm": rpm,
                    "rows": rows,
                    "effective_rpm": effective,
                    "bound_by": bound,
                    "hours": minutes / 60,
                    "window_hours": window / 3600,
                    "fits": fits,
                    "advice": advice,
                }
            )
    return rows_out


#: The classifier's system prompt: sent once in every request of a Message Batch.
SYSTEM_PROMPT = REPO / "lambda_src/prospect_classifier/system_prompt.md"
#: Create bytes of a request besides its system prompt: custom_id, model, max_tokens,
#: cache_control and a row's user message (a Prospect row's is a few hundred bytes).
REQUEST_OVERHEAD_BYTES = 1_000


def batch_settings(cdk_out: Path = REPO / "cdk.out") -> dict[str, Any] | None:
    """The Message Batches step's settings (issue 19), or None without one in the template:
    its ``BATCH_MAX_REQUESTS``, ``BATCH_MAX_WAIT_SECONDS``, ``MAX_EVENT_AGE_SECONDS`` and
    memory, and the size of one of its requests (the shipped system prompt, as JSON, plus
    :data:`REQUEST_OVERHEAD_BYTES`)."""
    template = json.loads((cdk_out / f"{STACK}.template.json").read_text())
    for body in template["Resources"].values():
        properties = body.get("Properties", {})
        variables = properties.get("Environment", {}).get("Variables", {})
        if body["Type"] == "AWS::Lambda::Function" and variables.get("MODEL_DELIVERY") == "batch":
            prompt = SYSTEM_PROMPT.read_text(encoding="utf-8")
            return {
                "max_requests": int(variables["BATCH_MAX_REQUESTS"]),
                "max_wait_seconds": int(variables["BATCH_MAX_WAIT_SECONDS"]),
                "max_event_age_seconds": int(variables.get("MAX_EVENT_AGE_SECONDS", 86_400)),
                "memory_mb": int(properties.get("MemorySize", 128)),
                "request_bytes": len(json.dumps(prompt)) + REQUEST_OVERHEAD_BYTES,
            }
    return None


def rows_per_batch(settings: dict[str, Any]) -> int:
    """Requests in one Message Batch: ``max_requests``, or fewer when their create body
    would pass what the function's memory sends (``model_step.batch.create_bytes_limit``)."""
    from model_step.batch import create_bytes_limit

    context = FakeLambdaContext(memory_limit_in_mb=settings["memory_mb"])
    by_memory = create_bytes_limit(context) // settings["request_bytes"]
    return max(1, min(int(settings["max_requests"]), by_memory))


def batch_capacity(settings: dict[str, Any]) -> list[dict[str, Any]]:
    """The batch path per size: the Messages limit (RPM) does not apply; each Message Batch
    of up to :func:`rows_per_batch` rows is one create call, and it ends within 24 h
    (usually within an hour), inside the window a row is held (MAX_EVENT_AGE_SECONDS)."""
    rows_out = []
    per_batch = rows_per_batch(settings)
    usual_hours = 1 + settings["max_wait_seconds"] / 3600
    # The usual case (the wait, then about an hour) must end inside the window a row is
    # held; a batch that takes its whole 24 h is the case that resubmits its expired rows.
    fits = usual_hours * 3600 <= settings["max_event_age_seconds"]
    for rows in TABLE_ROWS:
        batches = -(-rows // per_batch)
        rows_out.append(
            {
                "rows": rows,
                "batches": batches,
                "creates_per_minute_needed": batches,
                "hours_usual": usual_hours,
                "hours_at_most": 24,
                "fits": fits,
                "advice": (
                    f"fits at any RPM tier: {batches} create calls of "
                    f"<= {per_batch:,} rows; usually within an hour, at most 24 h "
                    "(expired rows are sent again within MAX_EVENT_AGE_SECONDS)"
                    if fits
                    else f"does not fit: a batch usually takes {usual_hours:.1f} h, longer "
                    f"than MAX_EVENT_AGE_SECONDS ({settings['max_event_age_seconds']} s)"
                ),
            }
        )
    return rows_out


def run(*, quick: bool = False, out_dir: Path | None = None, sizes: Sequence[int] = ()) -> dict:
    sizes = tuple(sizes) or (QUICK_SIZES if quick else SIZES)
    rate = QUICK_RATE_LIMIT if quick else RATE_LIMIT
    measured = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as work:
        for rows in sizes:
            measured.append(measure(rows, rate, SECONDS_PER_MINUTE, Path(work)))
    print_table(
        f"Local run at a binding rate limit ({rate} requests per run-minute; a minute lasts "
        f"{SECONDS_PER_MINUTE:g} s)",
        [
            "rows",
            "rows lost",
            "429s",
            "requests/row",
            "run minutes",
            "rows/min",
            "of limit",
            "peak conc.",
            "wall s",
        ],
        [
            [
                m["rows"],
                m["rows_lost"],
                m["rate_limited"],
                m["requests_per_row"],
                m["run_minutes"],
                m["rows_per_run_minute"],
                m["throughput_fraction"],
                m["peak_concurrency"],
                m["wall_seconds"],
            ]
            for m in measured
        ],
    )
    settings = template_settings()
    table = capacity_table(settings)
    window_hours = (
        min(
            settings["max_event_age_seconds"],
            settings["buffer_retention_seconds"] or settings["max_event_age_seconds"],
        )
        / 3600
    )
    print_table(
        f"From the template: max_concurrency {settings['max_concurrency']}, window "
        f"{window_hours:g} h (MAX_EVENT_AGE_SECONDS vs buffer retention), "
        f"{SECONDS_PER_CALL:g} s per call assumed",
        ["limit rpm", "rows", "effective rpm", "bound by", "hours", "fits", "what to do"],
        [
            [
                t["rpm"],
                t["rows"],
                round(t["effective_rpm"]),
                t["bound_by"],
                t["hours"],
                "yes" if t["fits"] else "no",
                t["advice"],
            ]
            for t in table
        ],
    )
    batch = batch_settings()
    batch_table = batch_capacity(batch) if batch else []
    if batch_table:
        print_table(
            f"The Message Batches path (issue 19): batches of at most "
            f"{rows_per_batch(batch):,} rows (BATCH_MAX_REQUESTS {batch['max_requests']:,}; "
            f"{batch['request_bytes']:,} bytes a request, {batch['memory_mb']} MB of memory), "
            f"sent {batch['max_wait_seconds']} s after their first row waited",
            ["rows", "batches", "usual hours", "at most", "fits", "what to do"],
            [
                [b["rows"], b["batches"], b["hours_usual"], b["hours_at_most"], "yes", b["advice"]]
                for b in batch_table
            ],
        )
    return {
        "rate_limit_rpm": rate,
        "seconds_per_minute": SECONDS_PER_MINUTE,
        "runs": measured,
        "template": settings,
        "seconds_per_call_assumed": SECONDS_PER_CALL,
        "capacity": table,
        "batch_capacity": batch_table,
    }


def main(argv: Sequence[str] | None = None) -> dict:
    return bench_main("scale", __doc__.splitlines()[0], run, argv)


if __name__ == "__main__":
    main()
