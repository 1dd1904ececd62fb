"""``prospect-uploader run FILE --provider bedrock`` (issue 22): the stack synthesized with
``-c model_provider=bedrock``, its real handlers, moto, and the local bedrock-runtime.

Every InvokeModel is evaluated against the classify function's role as the template grants
it: the inference profile and the foundation model in the region each request is routed
to. With the grant, every call is allowed; with it stripped, every call is denied, and each
row still ends with a clear, recorded answer (a stored AccessDeniedException dead letter).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from constructs_lib.bedrock_models import GEOGRAPHY_REGIONS
from constructs_lib.local_engine.errors import UsageError
from constructs_lib.prospect_uploader.local_run import (
    RunOptions,
    RunResult,
    check_invariants,
    run_pipeline,
)

from .billing import assert_billed, assert_one_billed_request_per_row

pytestmark = pytest.mark.slow

STACK = "ProspectUploader"
HEADER = "email,first_name,last_name,company,title,country,notes\n"
PROFILE = "us.anthropic.claude-haiku-5-5"


def _csv(tmp_path: Path, rows: int = 4) -> Path:
    path = tmp_path / "few.csv"
    lines = [
        f"row{n}@example.com,Ada{n},Lovelace,Engines {n},CTO,GB,Wants a demo\n" for n in range(rows)
    ]
    path.write_text(HEADER + "".join(lines) + "not-an-email,Bad,Row,Co,CEO,US,\n", "utf-8")
    return path


def _failing(result: RunResult) -> set[str]:
    return {check.name for check in check_invariants(result) if not check.ok}


@pytest.fixture(scope="module")
def granted_run(bedrock_cdk_out: Path, tmp_path_factory) -> RunResult:
    tmp = tmp_path_factory.mktemp("bedrock")
    return run_pipeline(
        RunOptions(
            csv_path=_csv(tmp),
            cdk_out=bedrock_cdk_out,
            provider="bedrock",
            duplicates=2,
            log_file=tmp / "handlers.log",
        )
    )


def test_the_bedrock_stack_classifies_every_row_once_through_the_local_bedrock(granted_run):
    result = granted_run
    assert _failing(result) == set()
    assert (result.provider, result.status) == ("bedrock", "completed")
    assert result.valid == 4
    assert_one_billed_request_per_row(result)
    assert result.failed == result.dlq
    assert set(result.labels) <= {"hot", "warm", "cold"}


def test_each_invoke_model_is_allowed_by_the_templates_grant(granted_run):
    result = granted_run
    assert result.iam_checked and result.denied == 0
    assert result.bedrock_invocations_checked == result.model_requests
    # Round-robin over the profile's destination regions: the grant covers each of them.
    assert set(result.bedrock_destinations) <= set(GEOGRAPHY_REGIONS["us"])
    assert len(result.bedrock_destinations) == min(4, result.model_requests)
    assert not [c for c in result.unevaluated_conditions if "bedrock:" in c]
    grants = result.unused_grants["Classify/Function"]
    assert not [g for g in grants if "inference-profile" in g]


def _strip_invoke_model(cdk_out: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "cdk.out"
    copy.mkdir()
    for entry in cdk_out.iterdir():  # the manifest, the shipped prompts, the assets
        if entry.name != f"{STACK}.template.json":
            (copy / entry.name).symlink_to(entry.resolve())
    template = json.loads((cdk_out / f"{STACK}.template.json").read_text())
    stripped = 0
    for resource in template["Resources"].values():
        if resource["Type"] != "AWS::IAM::Policy":
            continue
        document = resource["Properties"]["PolicyDocument"]
        kept = [s for s in document["Statement"] if s["Action"] != "bedrock:InvokeModel"]
        stripped += len(document["Statement"]) - len(kept)
        document["Statement"] = kept
    # The profile's statement and the foundation model's, for each of Classify,
    # ClassifyBatch and ClassifyBatch's job role (issue 37: auto has the batch step).
    assert stripped == 6
    (copy / f"{STACK}.template.json").write_text(json.dumps(template))
    return copy


def test_without_the_grant_every_invoke_model_is_denied_and_every_row_is_recorded(
    bedrock_cdk_out: Path, tmp_path: Path
):
    result = run_pipeline(
        RunOptions(
            csv_path=_csv(tmp_path, rows=2),
            cdk_out=_strip_invoke_model(bedrock_cdk_out, tmp_path),
            provider="bedrock",
            log_file=tmp_path / "handlers.log",
        )
    )
    assert result.iam_checked
    assert result.denied == result.valid == 2
    assert all(
        d.startswith("Classify/Function: bedrock:InvokeModel on arn:aws:bedrock:us-east-1:")
        and d.endswith(f":inference-profile/{PROFILE}")
        for d in result.denials
    )
    assert result.model_requests == 0  # a denied call never reaches the model
    # Nothing is lost: each row is a stored, recorded dead letter with Bedrock's code.
    assert result.classified == 0 and result.failed == result.dlq == 2
    # Only the checks of a clean run fail (denials, and rows not classified); every row is
    # accounted for, recorded once, nothing is left on a queue.
    assert _failing(result) == {"denied = 0", "failed = 0", "http_requests - rate_limited = valid"}
    assert "AccessDeniedException" in (tmp_path / "handlers.log").read_text()


def test_a_rate_limit_waits_and_bills_each_row_once(bedrock_cdk_out: Path, tmp_path: Path):
    result = run_pipeline(
        RunOptions(
            csv_path=_csv(tmp_path, rows=4),
            cdk_out=bedrock_cdk_out,
            provider="bedrock",
            rate_limit=2,
            seconds_per_minute=0.5,
            timeout_cap_seconds=20.0,
            log_file=tmp_path / "handlers.log",
        )
    )
    assert _failing(result) == set()
    assert result.rate_limited > 0
    assert_one_billed_request_per_row(result)


def test_the_provider_must_be_the_templates(bedrock_cdk_out: Path, cdk_out: Path, tmp_path):
    with pytest.raises(UsageError, match="run it with --provider bedrock"):
        run_pipeline(RunOptions(csv_path=_csv(tmp_path), cdk_out=bedrock_cdk_out))
    with pytest.raises(UsageError, match="cdk synth -c model_provider=bedrock"):
        run_pipeline(RunOptions(csv_path=_csv(tmp_path), cdk_out=cdk_out, provider="bedrock"))


def test_faults_in_bedrocks_shape_keep_the_invariants(bedrock_cdk_out: Path, tmp_path: Path):
    # The local model's fault plans, sent as Bedrock's errors: ThrottlingException (429),
    # ServiceUnavailableException (for a 529), InternalServerException, ValidationException.
    result = run_pipeline(
        RunOptions(
            csv_path=_csv(tmp_path, rows=8),
            cdk_out=bedrock_cdk_out,
            provider="bedrock",
            duplicates=2,
            fault_rate=0.6,
            seed=3,
            log_file=tmp_path / "handlers.log",
        )
    )
    assert _failing(result) == set()
    assert {k for k in result.model_outcomes if k != "200"}, "no fault was injected"
    assert result.failed == result.dlq
    assert result.classified + result.failed == result.valid == 8
    assert result.max_requests_per_key <= result.max_attempts
    assert result.denied == 0 and result.left_on_queue == 0


@pytest.mark.moto  # main() runs the pipeline, which the source cannot show
def test_the_cli_runs_the_bedrock_stack(bedrock_cdk_out: Path, tmp_path: Path, capsys):
    from constructs_lib.prospect_uploader.cli import main

    code = main(
        [
            "run",
            str(_csv(tmp_path, rows=2)),
            "--cdk-out",
            str(bedrock_cdk_out),
            "--provider",
            "bedrock",
            "--json",
            "--log-file",
            str(tmp_path / "handlers.log"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    counts = json.loads(out.strip().splitlines()[-1])
    assert (counts["classified"], counts["denied"]) == (2, 0)
    late = counts["model_transport_errors"] + counts["overruns"]
    assert_billed(counts["model_requests"], 2, late, "model_requests")
    checked = counts["http_requests"]
    assert f"Bedrock: {checked} InvokeModel calls checked against the calling role" in out
    if late == 0:  # round-robin: one call to each of the profile's first two regions
        assert "us-east-1 x1, us-east-2 x1" in out


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--provider", "bedrock", "--model", "anthropic"], "--provider bedrock runs against"),
        (["--provider", "vertex"], "invalid choice: 'vertex'"),
    ],
)
def test_the_cli_refuses_a_provider_it_cannot_run(flags, message, tmp_path: Path, capsys):
    from constructs_lib.prospect_uploader.cli import main

    try:
        code = main(["run", str(_csv(tmp_path)), *flags])
    except SystemExit as exit:  # argparse's own refusal
        code = int(exit.code or 0)
    assert code == 2 and message in capsys.readouterr().err
