"""bench.scale in its smoke configuration (tiny sizes); its figures are not asserted, except
what must hold at any size and any machine speed: no row lost, one billed request per row."""

from __future__ import annotations

import json

from bench import scale

from .billing import assert_billed


def test_quick_scale_run_loses_no_row_and_reads_the_template(tmp_path, capsys, cdk_out):
    scale.main(["--quick", "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    result = json.loads((tmp_path / "results.json").read_text())["scale"]
    (run,) = result["runs"]
    # One billed request per row, and none lost; only requests a loaded machine timed out
    # after the model counted them may add a request each (a row fails only if all its
    # MAX_ATTEMPTS, 3, did).
    late = run["late_attempts"]
    assert run["denied"] == 0 and run["rows_lost"] * 3 <= late
    billed = run["model_requests"] - run["rate_limited"]
    assert_billed(billed, run["classified"], late, "billed requests")
    assert result["template"]["max_concurrency"] == 10
    assert {(row["rpm"], row["rows"]) for row in result["capacity"]} == {
        (rpm, rows) for rpm in scale.TABLE_RPM for rows in scale.TABLE_ROWS
    }
    assert "what to do" in printed and "rows lost" in printed


def test_the_capacity_table_is_bound_by_the_limit_or_the_concurrency_cap():
    settings = {
        "max_event_age_seconds": 86_400,
        "buffer_retention_seconds": 1_209_600,
        "max_concurrency": 10,
        "timeout_seconds": 90,
    }
    rows = {(r["rpm"], r["rows"]): r for r in scale.capacity_table(settings, 1.5)}
    assert rows[(50, 10_000)]["fits"] and rows[(50, 10_000)]["hours"] == 10_000 / 50 / 60
    assert not rows[(50, 500_000)]["fits"]
    assert "split into uploads of <= 72,000 rows" in rows[(50, 500_000)]["advice"]
    assert rows[(4_000, 100_000)]["bound_by"] == "max_concurrency"
    assert rows[(4_000, 100_000)]["effective_rpm"] == 400
