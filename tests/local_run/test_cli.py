"""The console script: output, --json, exit codes and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from constructs_lib.local_engine.iam import RolePolicies
from constructs_lib.prospect_uploader.cli import main
from constructs_lib.prospect_uploader.local_run.pipeline import LocalPipeline
from constructs_lib.prospect_uploader.local_run.report import render_table
from constructs_lib.prospect_uploader.local_run.results import RunResult

from .billing import assert_billed
from .conftest import REPO

HEADER = "email,first_name,last_name,company,title,country,notes\n"
JSON_KEYS = {
    "rows",
    "valid",
    "invalid",
    "classified",
    "failed",
    "dlq",
    "model_requests",
    "http_requests",
    "upload",
    "deliveries",
    "labels",
    "model_transport_errors",
    "overruns",
}


def _small_csv(tmp_path: Path) -> Path:
    path = tmp_path / "small.csv"
    path.write_text(
        HEADER
        + "ada@example.com,Ada,Lovelace,Analytical Engines,CTO,GB,Wants a demo\n"
        + "grace@example.com,Grace,Hopper,Compilers Inc,VP,US,\n"
        + "not-an-email,Bad,Row,Co,CEO,US,\n",
        encoding="utf-8",
    )
    return path


def test_cli_subprocess_json_and_summary(cdk_out, tmp_path):
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "constructs_lib.prospect_uploader.cli",
            "run",
            str(_small_csv(tmp_path)),
            "--cdk-out",
            str(cdk_out),
            "--duplicates",
            "2",
            "--json",
            "--log-file",
            str(tmp_path / "handlers.log"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.strip().splitlines()
    document = json.loads(lines[-1])
    assert JSON_KEYS <= set(document)
    assert document["rows"] == 3 and document["valid"] == 2 and document["invalid"] == 1
    assert document["classified"] == 2
    late = document["model_transport_errors"] + document["overruns"]
    assert_billed(document["model_requests"], 2, late, "model_requests")
    # The split ran twice; each repeated entry was DEDUPLICATED by RowBus (within 300 s of
    # the run's clock: all of them on a quiet machine) or published, and each published
    # entry was delivered twice (4 when the repeat was all deduplicated).
    assert document["split_runs"] == 2 and document["row_entries_sent"] == 4
    published = document["row_entries_sent"] - document["deduplicated"]
    assert 2 <= published <= 4
    assert document["deliveries"] == 2 * published
    assert set(document["labels"]) == {"hot", "warm", "cold"}
    summary = "\n".join(lines[:-1])
    assert "Invariants:" in summary and "FAIL" not in summary
    assert "model requests" in summary
    # Quiet by default (issue 36): the IAM detail is one line, the grant lists need --verbose.
    assert "Granted but never used" not in summary and "(--verbose lists them)" in summary
    # Handler logs (Powertools JSON) stay out of stdout.
    assert all(not line.startswith('{"level"') for line in lines)
    assert "handler logs:" in completed.stderr
    assert (tmp_path / "handlers.log").read_text()


def test_missing_file_is_a_usage_error(capsys, tmp_path):
    code = main(["run", str(tmp_path / "absent.csv")])
    err = capsys.readouterr().err
    assert code == 2
    assert "absent.csv: no such file" in err
    assert "Traceback" not in err


def test_missing_cdk_out_says_make_synth(capsys, tmp_path):
    code = main(["run", str(_small_csv(tmp_path)), "--cdk-out", str(tmp_path / "none")])
    err = capsys.readouterr().err
    assert code == 2 and "make synth" in err and "Traceback" not in err


def test_malformed_file_prints_the_recorded_reason(cdk_out, capsys, tmp_path):
    bad = tmp_path / "notes.csv"
    bad.write_text("this is not the prospect header\nhello,world\n", encoding="utf-8")
    code = main(["run", str(bad), "--cdk-out", str(cdk_out), "--log-file", str(tmp_path / "l")])
    captured = capsys.readouterr()
    assert code == 1
    assert "upload rejected (MissingHeader): first record must be the header" in captured.err
    assert "Traceback" not in captured.err
    assert "rejected" in captured.out  # the summary shows the recorded status


def test_a_key_no_rule_matches_is_a_usage_error(cdk_out, capsys, tmp_path):
    text = tmp_path / "prospects.txt"
    text.write_text(HEADER, encoding="utf-8")
    code = main(["run", str(text), "--cdk-out", str(cdk_out), "--log-file", str(tmp_path / "l")])
    err = capsys.readouterr().err
    assert code == 2
    assert "matched no rule" in err and '"suffix": ".csv"' in err


def test_help_defines_the_counts(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "deliveries" in out and "retries excluded" in out
    assert "--rate-limit" in out and "rate_limited" in out and "deduplicated" in out
    assert "--duplicates" in out and "--fault-rate" in out


def test_run_timeout_bounds_the_run_and_says_so(cdk_out, capsys, tmp_path):
    # GIVEN a run given far less wall time than the pipeline needs to settle
    code = main(
        [
            "run",
            str(_small_csv(tmp_path)),
            "--cdk-out",
            str(cdk_out),
            "--run-timeout",
            "0.01",
            "--json",
            "--log-file",
            str(tmp_path / "l"),
        ]
    )
    # THEN it fails with a one-line error naming the limit
    captured = capsys.readouterr()
    err = captured.err
    assert code != 0
    assert "had not settled after 0 s" in err
    # ... and still prints its summary and JSON line, saying it did not settle (issue 36)
    document = json.loads(captured.out.strip().splitlines()[-1])
    assert document["settled"] is False and document["rows"] == 3
    assert "NOT SETTLED" in captured.out


def test_a_refused_grant_prints_the_denied_calls_and_exits_non_zero(
    cdk_out, capsys, tmp_path, monkeypatch
):
    """The issue's case: dynamodb:PutItem stripped from the classify role. The rows wait for
    the fix (spaced minutes apart, so the run does not spin), the run's bound passes, and the
    JSON line names the denied call."""
    real_enter = LocalPipeline.__enter__

    def enter(pipeline: LocalPipeline) -> LocalPipeline:
        pipeline = real_enter(pipeline)
        iam, assembly = pipeline.engine.iam, pipeline.assembly
        assert iam is not None and assembly is not None
        step = assembly.model_step_function().logical_id
        role = iam.roles[step]
        deny = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Deny", "Action": "dynamodb:PutItem", "Resource": "*"}],
        }
        iam.roles[step] = RolePolicies(role.function, role.role_name, [*role.documents, deny])
        return pipeline

    monkeypatch.setattr(LocalPipeline, "__enter__", enter)
    code = main(
        [
            "run",
            str(_small_csv(tmp_path)),
            "--cdk-out",
            str(cdk_out),
            "--run-timeout",
            "8",
            "--json",
            "--log-file",
            str(tmp_path / "l"),
        ]
    )
    captured = capsys.readouterr()
    assert code == 1
    assert "had not settled after 8 s" in captured.err
    document = json.loads(captured.out.strip().splitlines()[-1])
    assert document["settled"] is False
    assert document["denied"] >= 2 and document["model_requests"] == 0
    [denied] = document["denied_calls"]
    assert ": dynamodb:PutItem on arn:aws:dynamodb:" in denied
    assert "Denied AWS calls" in captured.out
    # The handler log names the refusal once (one process: one container), never per row.
    log = (tmp_path / "l").read_text()
    assert log.count("configuration error: the step may not call dynamodb:PutItem") == 1
    assert "transient failure" not in log


def test_run_timeout_must_be_positive(capsys, tmp_path):
    with pytest.raises(SystemExit):
        main(["run", str(_small_csv(tmp_path)), "--run-timeout", "0"])
    assert "--run-timeout" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--kill-rate", "1.5"),
        ("--throttle-rate", "-0.1"),
        ("--fault-rate", "2"),
        ("--kill-rate", "nan"),
        ("--batch-create-kill-rate", "1.5"),
    ],
)
def test_a_rate_outside_zero_to_one_names_the_flag_the_value_and_the_range(
    capsys, tmp_path, flag, value
):
    code = main(["run", str(_small_csv(tmp_path)), flag, value])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{flag} must be between 0 and 1, got {float(value):g}" in err
    assert "Traceback" not in err


def test_kills_need_the_local_model(capsys, tmp_path):
    code = main(["run", str(_small_csv(tmp_path)), "--model", "anthropic", "--kill-rate", "0.1"])
    assert code == 2 and "--kill-rate needs --model local" in capsys.readouterr().err


def test_help_names_the_lambda_faults_and_their_counts(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    assert "--kill-rate" in out and "--throttle-rate" in out
    assert "--batch-create-kill-rate" in out and "batch_create_kills" in out
    assert "max_requests_per_key" in out and "redriven" in out
    assert "derived from the work" in out


def _iam_checked_result() -> RunResult:
    return RunResult(
        file="small.csv",
        object_key="small.csv",
        iam_checked=True,
        aws_calls=40,
        unused_grants={"Splitter": ["s3:PutObject on UploadBucket/*"], "Viewer": []},
        unevaluated_conditions=["aws:SourceAccount on AlertTopic"],
        elapsed_s=6.505,
        run_minutes=6.505,
        run_timeout_s=120,
    )


def test_the_summary_leaves_the_iam_detail_to_verbose():
    # GIVEN an IAM-checked run with unused grants and assumed conditions
    result = _iam_checked_result()
    # WHEN it is rendered by default, THEN one line counts them and names --verbose
    quiet = render_table(result, [])
    assert "Granted but never used" not in quiet and "s3:PutObject" not in quiet
    assert "IAM conditions assumed" not in quiet
    assert (
        "IAM: 1 grant never used in this run and 1 condition assumed to hold (--verbose lists them)"
    ) in quiet
    # WHEN verbose, THEN the lists are there, per function
    verbose = render_table(result, [], verbose=True)
    assert "Granted but never used in this run" in verbose
    assert "    s3:PutObject on UploadBucket/*" in verbose and "  Viewer: none" in verbose
    assert "  aws:SourceAccount on AlertTopic" in verbose


def test_denied_calls_are_listed_without_verbose():
    result = _iam_checked_result()
    result.denied, result.denials = 1, ["Splitter: s3:GetObject on UploadBucket/x.csv"]
    assert "  Splitter: s3:GetObject on UploadBucket/x.csv" in render_table(result, [])


def test_elapsed_names_its_units_and_the_run_minute():
    # The demo printed "elapsed s  6.505  6.505 minutes of the run's clock": one number twice.
    row = next(
        line for line in render_table(_iam_checked_result(), []).splitlines() if "elapsed" in line
    )
    assert "6.5 s" in row and "wall time from the upload until everything settled" in row
    assert "6.505 minutes of the run's clock (a minute lasts 1 s of wall time)" in row


def test_verbose_run_lists_the_grants_never_used(cdk_out, capsys, tmp_path):
    code = main(
        [
            "run",
            str(_small_csv(tmp_path)),
            "--cdk-out",
            str(cdk_out),
            "--verbose",
            "--log-file",
            str(tmp_path / "handlers.log"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Granted but never used in this run" in out and "--verbose lists them" not in out
