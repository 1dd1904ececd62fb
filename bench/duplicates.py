"""Model requests per unique event under duplicate storms and model faults.

Three handlers run against the same fake Messages API and the same moto DynamoDB in one run:

- ``ours``: the real ``ModelStep`` (Powertools idempotency, SDK ``max_retries=0``);
- ``check-then-act``: GetItem / model (SDK default retries) / PutItem, bench/baselines.py;
- ``sdk-retries``: no idempotency, SDK default ``max_retries=2``.

Each unique event is delivered 1, 3 or 10 times, sequentially (each delivery and its retries
finish before the next arrives) or concurrently (all deliveries at once, threads), and Lambda's
async retries are emulated the same way for all three (bench.harness: an exception is a
function error and the event is re-invoked, up to 3 attempts). Fault scenarios are applied per
event by the fake API: every request 200; the first request 529 then 200; every request 529;
every request 400 (non-retryable).

Run: ``python -m bench.duplicates [--quick]`` (quick: one event a cell, delivered 2 times:
the fewest deliveries that still make a duplicate, in every scenario and mode).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import baselines
from bench.harness import (
    BENCH_DIR,
    NAIVE_TABLE,
    Delivery,
    bench_main,
    create_idempotency_table,
    create_queue,
    fake_api,
    make_event,
    mocked_aws,
    patched_env,
    per_event_script,
    print_table,
    ratio,
    run_concurrent,
    run_sequential,
    step_environment,
)

HANDLERS = ("ours", "check-then-act", "sdk-retries")
#: Fake-API script per event (see ``harness.per_event_script``).
SCENARIOS: dict[str, list[int]] = {
    "all 200": [],
    "529 then 200": [529],
    "persistent 529": [-529],
    # A request a retry cannot fix: ours stores the dead-lettered outcome, so every duplicate
    # replays it; the baselines raise, and Lambda retries them.
    "persistent 400": [-400],
}
MODES: dict[str, Callable[..., None]] = {"sequential": run_sequential, "concurrent": run_concurrent}
#: Seconds the fake API takes to answer in the concurrent runs, so duplicates overlap the
#: in-flight model call the way they do in production (a real call takes ~1 s or more).
CONCURRENT_MODEL_LATENCY = 0.05
CHART = BENCH_DIR / "model_requests.png"


def build_handlers(session: Any) -> dict[str, Callable[[dict, Any], Any]]:
    """Fresh handlers (one "container" each) for one measured run."""
    from model_step import ModelStep, Settings

    step = ModelStep(settings=Settings.from_environment(), boto3_session=session)
    return {
        "ours": step.handle,
        "check-then-act": baselines.CheckThenActHandler(session, NAIVE_TABLE),
        "sdk-retries": baselines.SdkRetriesHandler(),
    }


def measure(
    api: Any,
    handler: Callable[[dict, Any], Any],
    mode: str,
    deliveries: int,
    events: int,
) -> dict[str, Any]:
    """Deliver ``events`` unique events ``deliveries`` times each; count model requests."""
    upload_id = f"upload-{uuid.uuid4().hex[:8]}"
    api.delay = CONCURRENT_MODEL_LATENCY if mode == "concurrent" else 0.0
    before = api.request_count
    failed = 0
    for row in range(1, events + 1):
        storm = [Delivery(make_event(upload_id, row)) for _ in range(deliveries)]
        MODES[mode](handler, storm)
        failed += sum(d.outcome == "failed" for d in storm)
    requests = api.request_count - before
    return {
        "requests": requests,
        "requests_per_event": requests / events,
        "failed_deliveries": failed,
    }


def run(*, quick: bool = False, out_dir: Path | None = None, chart: Path | None = None) -> dict:
    events = 1 if quick else 6
    # A smoke run: 2 deliveries, the fewest with a duplicate (1 and 3 cost 1.1 CPU-s more).
    sizes = (2,) if quick else (1, 3, 10)
    rows: list[dict[str, Any]] = []
    with mocked_aws() as session:
        create_idempotency_table(session)
        create_idempotency_table(session, NAIVE_TABLE)
        queue_url = create_queue(session)
        with fake_api() as api, patched_env(step_environment(queue_url, api.base_url)):
            # One "container" per handler for the whole run (creating an SDK client costs
            # ~0.5 s); every cell uses its own upload id, so no cell sees another's records.
            handlers = build_handlers(session)
            for scenario, entries in SCENARIOS.items():
                api.script = per_event_script(entries)
                for mode in MODES:
                    for deliveries in sizes:
                        row: dict[str, Any] = {
                            "scenario": scenario,
                            "mode": mode,
                            "deliveries": deliveries,
                            "events": events,
                        }
                        for name in HANDLERS:
                            row[name] = measure(api, handlers[name], mode, deliveries, events)
                        rows.append(row)
    print_report(rows)
    if not quick:
        draw_chart(rows, chart or CHART)
    return {"rows": rows, "chart": None if quick else str(chart or CHART)}


def print_report(rows: Sequence[dict[str, Any]]) -> None:
    table = []
    for row in rows:
        ours = row["ours"]["requests_per_event"]
        naive = row["check-then-act"]["requests_per_event"]
        sdk = row["sdk-retries"]["requests_per_event"]
        failed = "/".join(str(row[name]["failed_deliveries"]) for name in HANDLERS)
        table.append(
            [
                row["scenario"],
                row["mode"],
                row["deliveries"],
                ours,
                naive,
                sdk,
                ratio(naive, ours),
                ratio(sdk, ours),
                failed,
            ]
        )
    print_table(
        f"Model requests per unique event ({rows[0]['events']} events per cell; "
        "Lambda: up to 3 attempts per delivery)",
        [
            "scenario",
            "mode",
            "deliveries",
            "ours",
            "check-then-act",
            "sdk-retries",
            "c-t-a/ours",
            "sdk/ours",
            "failed deliveries o/c/s",
        ],
        table,
    )


def draw_chart(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """x = deliveries per event, y = model requests per unique event, one line per handler
    (concurrent deliveries), one panel per fault scenario."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(SCENARIOS), figsize=(17, 4.2))
    styles = {"ours": "o-", "check-then-act": "s--", "sdk-retries": "^:"}
    for axis, scenario in zip(axes, SCENARIOS, strict=True):
        cells = [r for r in rows if r["scenario"] == scenario and r["mode"] == "concurrent"]
        xs = [r["deliveries"] for r in cells]
        for name in HANDLERS:
            axis.plot(
                xs,
                [r[name]["requests_per_event"] for r in cells],
                styles[name],
                label=name,
                linewidth=2,
                markersize=7,
            )
        axis.set_title(f"model API: {scenario}")
        axis.set_xticks(xs)
        axis.set_xlabel("deliveries per event (concurrent)")
        axis.grid(True, alpha=0.3)
    for axis in axes:
        axis.set_ylabel("model requests per unique event")
        axis.set_ylim(bottom=0)
    axes[0].legend()
    fig.suptitle(
        "Model requests per unique event under duplicate deliveries "
        "(Lambda async retries: 3 attempts)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"chart: {path}")


def main(argv: Sequence[str] | None = None) -> dict:
    return bench_main("duplicates", __doc__.splitlines()[0], run, argv)


if __name__ == "__main__":
    main()
