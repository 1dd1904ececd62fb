"""The demo stack's snapshot, and the scanners users run on templates: cfn-lint, cdk-nag's
AwsSolutions rules and checkov."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from constructs_lib.testing import normalize_template
from tests.cdk_out import built

from .conftest import REPO, Synthesized

HASH = re.compile(r"[0-9a-f]{64}")
VERSION_ID = re.compile(r"CurrentVersion[0-9A-F]{8}[0-9a-f]{32}")


@pytest.fixture
def snapshot_json(snapshot):
    return snapshot.use_extension(JSONSnapshotExtension)


def test_demo_stack_matches_snapshot(demo: Synthesized, snapshot_json):
    assert normalize_template(demo.templates["IdempotentModelStepDemo"]) == snapshot_json


def test_demo_v2_stack_matches_snapshot(demo: Synthesized, snapshot_json):
    assert normalize_template(demo.templates["IdempotentModelStepDemoV2"]) == snapshot_json


def test_normalizing_removes_every_asset_and_version_hash(demo: Synthesized):
    text = json.dumps(normalize_template(demo.templates))
    assert not HASH.search(text) and "<asset-hash>.zip" in text
    assert not VERSION_ID.search(text) and "CurrentVersion" in text


def test_the_bundled_cli_template_normalizes_to_the_unbundled_one(prospect: Synthesized):
    # cdk.out is `cdk synth` with bundling (and, where a CPython 3.13 is found, bytecode);
    # the fixture is an in-process synth that skips bundling. One snapshot serves both.
    bundled = built("ProspectUploader.template.json")
    template = json.loads(bundled.read_text())
    assert template != prospect.templates["ProspectUploader"]
    assert normalize_template(template) == normalize_template(
        prospect.templates["ProspectUploader"]
    )


#: Regions the stacks are linted for. Not every region: AWS::Lambda::Url (the
#: viewer) is missing from a few newer and GovCloud regions.
LINT_REGIONS = ["us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-southeast-2"]


@functools.cache
def _cfn_lint_runner() -> Any:
    """One cfn-lint ``Runner`` (its rules, for :data:`LINT_REGIONS`) per test process.

    ``cfnlint.api.lint`` makes a new ``Runner`` for each template, and a ``Runner`` loads
    its rules by executing every rule module again: 0.4 CPU-s a template here, seven
    templates a run. The CLI validates all the templates it is given with one ``Runner``,
    as this does; each template still sets its own template-level configuration."""
    from cfnlint.config import ConfigMixIn, ManualArgs
    from cfnlint.runner import Runner

    return Runner(ConfigMixIn(**ManualArgs(regions=LINT_REGIONS)))


def cfn_lint(text: str) -> list[Any]:
    """What ``cfnlint.api.lint(text, config=ManualArgs(regions=LINT_REGIONS))`` returns
    (the same decoding, then the same ``Runner.validate_template``), with the process's one
    ``Runner``."""
    from cfnlint.decode.decode import decode_str

    template, errors = decode_str(text)
    if errors:
        return list(errors)
    if template is None:
        return []
    return list(_cfn_lint_runner().validate_template(template))


def lint(outdir) -> list[str]:
    matches = []
    for template in sorted(outdir.glob("*.template.json")):
        # Errors and warnings count. W3005 (redundant DependsOn) is how CDK orders
        # role policies and is harmless; informational I-rules are advice only.
        matches += [
            f"{template.name}: {m}"
            for m in cfn_lint(template.read_text())
            if m.rule.id[0] in "EW" and m.rule.id != "W3005"
        ]
    return matches


def test_cfn_lint_finds_nothing_in_any_template(demo: Synthesized):
    assert lint(demo.outdir) == []


def test_cdk_nag_aws_solutions_has_no_unacknowledged_findings(demo: Synthesized):
    # build_app() registers AwsSolutionsChecks; an unacknowledged error would have
    # made synth raise ValidationFailed, so reaching here already passed. The report
    # makes that explicit.
    report = json.loads((demo.outdir / "validation-report.json").read_text())
    violations = [v for r in report["pluginReports"] for v in r.get("violations", [])]
    assert violations == []


def acknowledgments(outdir) -> dict[str, str]:
    """Every cdk-nag acknowledgment recorded in the assembly: ``{path rule: reason}``."""
    acks = {}
    for metadata in outdir.glob("*.metadata.json"):
        for path, entries in json.loads(metadata.read_text()).items():
            for entry in entries:
                if entry["type"] == "aws:cdk:acknowledged-rules":
                    acks.update(
                        {f"{path} {rule}": reason for rule, reason in entry["data"].items()}
                    )
    return acks


def test_every_acknowledgment_gives_a_specific_reason(demo: Synthesized):
    acks = acknowledgments(demo.outdir)
    assert sorted(acks) == [
        "/IdempotentModelStepDemo/AnthropicApiKey Annotation::AwsSolutions-SMG4",
        "/IdempotentModelStepDemo/Classify/DeadLetterQueue Annotation::AwsSolutions-SQS3",
        "/IdempotentModelStepDemo/Classify/Function Annotation::AwsSolutions-L1",
        # tracing=True: X-Ray's two write actions have no resource-level permissions.
        "/IdempotentModelStepDemo/Classify/FunctionServiceRole "
        "Annotation::AwsSolutions-IAM5[Resource::*]",
        "/IdempotentModelStepDemoV2/AnthropicApiKey Annotation::AwsSolutions-SMG4",
        "/IdempotentModelStepDemoV2/Classify/DeadLetterQueue Annotation::AwsSolutions-SQS3",
        "/IdempotentModelStepDemoV2/Classify/Function Annotation::AwsSolutions-L1",
    ]
    assert all(len(reason) > 60 for reason in acks.values())


#: checkov lives in a venv of its own: it pins boto3 1.35, too old for the dev venv.
CHECKOV = REPO / ".venv-checkov" / "bin" / "checkov"
#: Offline: no Prisma Cloud guidelines download (--skip-download, BC_SKIP_MAPPING), no PyPI
#: version check. Its bytecode goes beside its own venv's modules (written at its first run,
#: read at every later one), not under ``make test``'s PYTHONPYCACHEPREFIX: from there a fresh
#: clone's run compiled the 3,800 modules checkov imports again, 6 CPU-s.
CHECKOV_ENV = {
    "BC_SKIP_MAPPING": "TRUE",
    "CKV_SKIP_PACKAGE_UPDATE_CHECK": "TRUE",
    "PYTHONDONTWRITEBYTECODE": "",
    "PYTHONPYCACHEPREFIX": "",
}


def checkov(root: Path) -> dict[str, dict]:
    """One checkov run over the templates in ``root``'s subfolders:
    ``{"<folder>/<file>": {"failed": [...], "skipped": {...}}}``, each entry
    ``"<logical id> <check id>"`` (a skip with its comment)."""
    if not CHECKOV.exists():
        pytest.skip("checkov is not installed; `make setup` installs it into .venv-checkov")
    templates = sorted(p.relative_to(root).as_posix() for p in root.glob("*/*.template.json"))
    command = [str(CHECKOV), "--skip-download", "--framework", "cloudformation", "-o", "json"]
    for template in templates:
        command += ["-f", template]
    result = subprocess.run(
        command,
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, **CHECKOV_ENV},
        timeout=600,
    )
    assert result.returncode in (0, 1), result.stderr  # 1: some check failed
    reports = json.loads(result.stdout)
    [report] = [r for r in (reports if isinstance(reports, list) else [reports])]
    assert report["check_type"] == "cloudformation"
    assert report["summary"]["parsing_errors"] == 0
    found: dict[str, dict] = {t: {"failed": [], "skipped": {}} for t in templates}
    for check in report["results"]["failed_checks"]:
        key = f"{check['resource'].split('.')[-1]} {check['check_id']}"
        found[check["file_path"].lstrip("/")]["failed"].append(key)
    for check in report["results"]["skipped_checks"]:
        key = f"{check['resource'].split('.')[-1]} {check['check_id']}"
        comment = check["check_result"]["suppress_comment"]
        found[check["file_path"].lstrip("/")]["skipped"][key] = comment
    return found


def without_checkov_metadata(template: dict) -> dict:
    stripped = json.loads(json.dumps(template))
    for resource in stripped["Resources"].values():
        resource.get("Metadata", {}).pop("checkov", None)
    return stripped


@pytest.fixture(scope="module")
def checkov_results(demo: Synthesized, tmp_path_factory) -> dict[str, dict]:
    """checkov on the demo stacks and on cdk.out (`cdk synth` of app.py, bundled), each as
    synthesized and stripped of its checkov acknowledgments, in one run (start-up is most
    of checkov's time).

    The templates are copied to short folders first: checkov 3.3 scans the path it is given
    as if it were one of a function's variables, and fails CKV_AWS_45 (a secret in the
    environment) on every function when that path has a run of exactly 40 letters, digits
    and slashes (its AWS secret key pattern), e.g. ``stripped0/UnacknowledgedProspectUploader``.
    """
    templates = sorted(demo.outdir.glob("*.template.json"))
    templates += sorted(built("ProspectUploader.template.json").parent.glob("*.template.json"))
    root = tmp_path_factory.mktemp("ckv")
    for folder in ("as-synthesized", "no-acks"):
        (root / folder).mkdir()
    for template in templates:
        text = template.read_text()
        (root / "as-synthesized" / template.name).write_text(text)
        stripped = without_checkov_metadata(json.loads(text))
        (root / "no-acks" / template.name).write_text(json.dumps(stripped, indent=1))
    return checkov(root)


def test_checkov_fails_no_check_in_any_synthesized_template(checkov_results):
    scanned = {
        name.removeprefix("as-synthesized/"): result["failed"]
        for name, result in checkov_results.items()
        if name.startswith("as-synthesized/")
    }
    assert scanned == {
        "IdempotentModelStepDemo.template.json": [],
        "IdempotentModelStepDemoV2.template.json": [],
        "ProspectUploader.template.json": [],
    }


def test_every_checkov_acknowledgment_is_needed_and_says_why(checkov_results):
    for name, result in checkov_results.items():
        if not name.startswith("as-synthesized/"):
            continue
        # Without the metadata, exactly the acknowledged checks fail: none acknowledges a
        # check that would pass.
        bare = checkov_results[name.replace("as-synthesized/", "no-acks/")]
        assert sorted(result["skipped"]) == sorted(bare["failed"]), name
        assert all(len(comment) > 100 for comment in result["skipped"].values()), name


def test_checkov_before_and_after_on_the_prospect_uploader(checkov_results):
    # Issue 17 found 34 failed checks on app.py's template; Classify's RedriveQueue, added
    # since, is a 35th (SSE-SQS again). ClassifyBatch (issue 19, context delivery=auto)
    # brings the same step findings again: its two queues and its function's five, 42 in
    # all, each acknowledged by the construct. RowsTable (issue 18) adds a 43rd (an AWS
    # managed key, as every other table of the stack). Now: 0 failed, 43 acknowledged.
    before = checkov_results["no-acks/ProspectUploader.template.json"]["failed"]
    after = checkov_results["as-synthesized/ProspectUploader.template.json"]
    assert (len(before), len(after["failed"]), len(after["skipped"])) == (43, 0, 43)
    by_check: dict[str, int] = {}
    for key in before:
        by_check[key.split()[1]] = by_check.get(key.split()[1], 0) + 1
    assert by_check == {
        "CKV_AWS_18": 1,  # the access log bucket: cdk-nag's S1 acknowledgment, now checkov's too
        # false positive: SSE-SQS (FailureQueue, the two queues of Classify and ClassifyBatch)
        "CKV_AWS_27": 5,
        "CKV_AWS_115": 6,  # by design: no reserved concurrency
        "CKV_AWS_116": 6,  # 5 false positives (mappings, destination, URL), 1 by design
        "CKV_AWS_117": 6,  # by design: no VPC
        "CKV_AWS_119": 6,  # by design: the AWS managed DynamoDB key (RowsTable the 6th)
        "CKV_AWS_149": 1,  # by design: the aws/secretsmanager key
        "CKV_AWS_158": 6,  # by design: CloudWatch Logs' own encryption
        "CKV_AWS_173": 6,  # by design: configuration-only environments
    }
