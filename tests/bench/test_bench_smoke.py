"""Smoke runs of every benchmark's --quick configuration.

Only that each ran and produced the expected keys is asserted: performance is measured by
``python -m bench``, never asserted in tests. Results go to a temporary directory, so the
committed chart and bench/out are left alone.
"""

from __future__ import annotations

import json
import shutil
import zipfile

import pytest

from bench import batch_memory, cold_start, cost, duplicates, dynamodb_calls, splitter, synth


def _run_quick(module, tmp_path, capsys) -> dict:
    module.main(["--quick", "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    results = json.loads((tmp_path / "results.json").read_text())
    name = module.__name__.rsplit(".", 1)[-1]
    assert results[name]["quick"] is True
    assert "results:" in printed
    return results[name]


@pytest.mark.moto
def test_dynamodb_calls(tmp_path, capsys):
    result = _run_quick(dynamodb_calls, tmp_path, capsys)
    cases = {row["case"] for row in result["rows"]}
    assert cases == set(dynamodb_calls.CASES)
    for row in result["rows"]:
        assert {"calls", "operations"} <= set(row["ours"])
        assert {"calls", "operations"} <= set(row["check-then-act"])


@pytest.mark.moto
def test_duplicates(tmp_path, capsys):
    result = _run_quick(duplicates, tmp_path, capsys)
    assert result["chart"] is None  # quick never overwrites the committed chart
    row = result["rows"][0]
    assert {"scenario", "mode", "deliveries", "events"} <= set(row)
    for name in duplicates.HANDLERS:
        assert {"requests", "requests_per_event", "failed_deliveries"} <= set(row[name])
    assert {r["scenario"] for r in result["rows"]} == set(duplicates.SCENARIOS)


@pytest.mark.moto
def test_cost(tmp_path, capsys):
    result = _run_quick(cost, tmp_path, capsys)
    assert result["rows"] == cost.QUICK_ROWS and result["prompt_tokens"] == cost.PROMPT_TOKENS
    for run in ("uncached", "cached"):
        assert result[run]["requests"] == cost.QUICK_ROWS
    assert {"ratio", "physical_minimum_usd", "physical_minimum_ratio"} <= set(result)
    # Message Batches (issue 19): one billed request per row by either delivery, no timing.
    figures = result["delivery"]
    assert figures["requests_per_row"] == {"realtime": 1.0, "batch": 1.0}
    assert {"cost_per_1000_rows_usd", "cost_ratio", "wall_s"} <= set(figures)
    assert figures["batch"]["realtime_requests"] == 0 and figures["batch"]["batches"] >= 1
    # Token cost is counted, not timed: the batch discount holds at any size.
    assert 0.49 <= figures["cost_ratio"] <= cost.BATCH_TARGET_RATIO
    scale = result["batch_scale"]
    assert scale["rows"] == cost.QUICK_SCALE_ROWS == scale["batch_requests"]
    assert {"peak_rss_mib", "rss_growth_mib", "wall_s", "worker_seconds_per_row"} <= set(scale)
    # Two worker processes, each its share of the rows through its own step.
    assert scale["workers"] == cost.SCALE_WORKERS == 2
    share = cost.QUICK_SCALE_ROWS // 2
    assert [part["rows"] for part in scale["per_worker"]] == [share, share]
    assert [part["batch_requests"] for part in scale["per_worker"]] == [share, share]


@pytest.mark.moto
def test_batch_memory(tmp_path, capsys):
    result = _run_quick(batch_memory, tmp_path, capsys)
    small, large = result["rows"]
    assert (small, large) == batch_memory.QUICK_ROWS
    owners = set(batch_memory.OWNER_NAMES)
    assert set(result["kib_per_row"]) == owners
    held = result["bytes"]
    assert set(held[str(small)]) == set(held[str(large)]) == owners
    # moto keeps two items a row answered (its record and its budget): it grows
    assert held[str(large)]["moto"] > held[str(small)]["moto"]


def test_batch_memory_charges_an_allocation_to_its_innermost_owner():
    moto = "/venv/site-packages/moto/dynamodb/models/table.py"
    json_module = "/usr/lib/python3.11/json/decoder.py"
    runtime = "/repo/lambda_src/model_step/batch.py"
    botocore = "/venv/site-packages/botocore/parsers.py"
    assert batch_memory.owner_of([json_module, moto, botocore, runtime]) == "moto"
    assert batch_memory.owner_of([botocore, runtime]) == "SDKs"
    assert batch_memory.owner_of([json_module, runtime]) == "runtime"
    assert batch_memory.owner_of([json_module]) == batch_memory.OTHER


def test_batch_memory_refuses_sizes_out_of_order(tmp_path):
    with pytest.raises(SystemExit, match="--rows needs SMALL < LARGE, got 9 3"):
        batch_memory.main(["--rows", "9", "3", "--out", str(tmp_path)])


@pytest.mark.moto
def test_cold_start(tmp_path, capsys):
    result = _run_quick(cold_start, tmp_path, capsys)
    kinds = {row["kind"] for row in result["cold_starts"]}
    assert kinds == set(cold_start.KINDS)
    for row in result["cold_starts"]:
        assert {"median_seconds", "ratio_vs_import_anthropic", "anthropic_imported"} <= set(row)
    asset = result["asset_size"]
    assert "assets" in asset or "skipped" in asset


def test_asset_size_skips_cleanly_without_cdk_out(tmp_path):
    assert "skipped" in cold_start.measure_assets(tmp_path / "no-cdk-out")


def test_asset_sizes_without_pyc_are_those_of_an_archive_without_them(tmp_path):
    # GIVEN an asset with sources, bytecode and a non-ASCII name
    asset = tmp_path / "asset"
    for name, text in {
        "model_step/handler.py": "def handler(event, context):\n    return event\n" * 50,
        "model_step/__pycache__/handler.cpython-313.pyc": "\x00bytecode" * 300,
        "model_step_prompt/é.txt": "Answer hot, warm or cold.\n",
    }.items():
        (asset / name).parent.mkdir(parents=True, exist_ok=True)
        (asset / name).write_text(text)
    # WHEN measured once THEN its figures without .pyc are those of the zip written without them
    sizes = cold_start.asset_sizes(asset)
    with zipfile.ZipFile(tmp_path / "source.zip", "w", compression=zipfile.ZIP_DEFLATED) as z:
        for path in sorted(asset.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                z.write(path, path.relative_to(asset))
    assert sizes["without_pyc"] == {
        "files": 2,
        "unzipped_bytes": (asset / "model_step/handler.py").stat().st_size
        + (asset / "model_step_prompt/é.txt").stat().st_size,
        "zipped_bytes": (tmp_path / "source.zip").stat().st_size,
    }
    assert sizes["files"] == 3 and sizes["zipped_bytes"] > sizes["without_pyc"]["zipped_bytes"]
    # ... and measured without zipping (--quick), the same counts, with no zipped figure
    unzipped = cold_start.asset_sizes(asset, zipped=False)
    assert unzipped == {
        "files": 3,
        "unzipped_bytes": sizes["unzipped_bytes"],
        "without_pyc": {k: v for k, v in sizes["without_pyc"].items() if k != "zipped_bytes"},
    }


@pytest.mark.synth
def test_synth_one_step(tmp_path, capsys):
    if shutil.which("node") is None:
        pytest.skip("no Node on PATH for jsii")
    result = _run_quick(synth, tmp_path, capsys)
    assert {(r["variant"], r["steps"]) for r in result["rows"]} == {
        (variant, 1) for variant in synth.VARIANTS
    }
    for row in result["rows"]:
        assert {"median_wall_seconds", "resources_per_step", "max_steps_per_stack"} <= set(row)


@pytest.mark.moto
def test_splitter(tmp_path, capsys):
    result = _run_quick(splitter, tmp_path, capsys)
    assert {r["implementation"] for r in result["rows"]} == set(splitter.IMPLEMENTATIONS)
    for row in result["rows"]:
        assert {"rows_per_second", "peak_rss_kb", "rss_growth_kb"} <= set(row)


@pytest.mark.moto
def test_cost_sizes_come_from_its_options_and_a_zero_scale_skips_the_scale_run(tmp_path, capsys):
    # 3 rows: neither the default nor --quick's, so only --rows can have set them
    assert 3 not in (cost.ROWS, cost.QUICK_ROWS)
    cost.main(["--rows", "3", "--scale-rows", "0", "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    result = json.loads((tmp_path / "results.json").read_text())["cost"]
    assert result["rows"] == 3 and result["delivery"]["batch"]["rows"] == 3
    assert result["batch_scale"] is None and "skipped (--scale-rows 0)" in printed


@pytest.mark.moto
def test_one_scale_worker_runs_the_scale_run_in_this_process(tmp_path, capsys):
    # 3 scale rows: more than one worker could share, none of the sizes' defaults
    assert 3 not in (cost.BATCH_SCALE_ROWS, cost.QUICK_SCALE_ROWS)
    cost.main(["--rows", "1", "--scale-rows", "3", "--scale-workers", "1", "--out", str(tmp_path)])
    scale = json.loads((tmp_path / "results.json").read_text())["cost"]["batch_scale"]
    assert (scale["workers"], scale["rows"], scale["batch_requests"]) == (1, 3, 3)
    assert "by 1 worker process(es)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rows", "0"], "must be at least 1, got 0"),
        (["--scale-rows", "-1"], "must be 0 or more, got -1"),
        (["--rows", "many"], "must be a whole number, got 'many'"),
        (["--scale-workers", "0"], "must be at least 1, got 0"),
    ],
)
def test_cost_refuses_a_bad_size_naming_the_option(argv, message, capsys):
    with pytest.raises(SystemExit):
        cost.main(argv)
    assert message in capsys.readouterr().err


def test_the_batch_capacity_table_counts_batches_the_memory_can_send():
    """Issue 19's capacity table: a Message Batch holds BATCH_MAX_REQUESTS rows, or fewer
    when their create body (the system prompt once a request) is more than the batch
    step's memory sends (model_step.batch.create_bytes_limit)."""
    from bench.scale import batch_capacity, rows_per_batch

    settings = {
        "max_requests": 10_000,
        "max_wait_seconds": 300,
        "max_event_age_seconds": 86_400,
        "memory_mb": 512,
        "request_bytes": 21_000,
    }
    # 512 MB sends (512 - 160) / 3 MB: 5,858 requests of 21,000 bytes.
    assert rows_per_batch(settings) == (512 - 160) * (2**20 // 3) // 21_000 == 5_858
    table = {row["rows"]: row["batches"] for row in batch_capacity(settings)}
    assert table == {10_000: 2, 100_000: 18, 500_000: 86}
    assert all(row["fits"] for row in batch_capacity(settings))
    # A row held only 30 minutes cannot wait the usual hour of a batch.
    short = batch_capacity({**settings, "max_event_age_seconds": 1_800})
    assert not any(row["fits"] for row in short)
    assert short[1]["advice"].startswith("does not fit")
    assert rows_per_batch({**settings, "memory_mb": 1_024, "request_bytes": 2_000}) == 10_000
