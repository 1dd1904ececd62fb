"""The demo stack's snapshot, cfn-lint on every template and cdk-nag's AwsSolutions rules."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from constructs_lib.testing import normalize_template

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
    bundled = Path(REPO, "cdk.out", "ProspectUploader.template.json")
    if not bundled.is_file():
        pytest.skip("no cdk.out; `make test` synthesizes it first")
    template = json.loads(bundled.read_text())
    assert template != prospect.templates["ProspectUploader"]
    assert normalize_template(template) == normalize_template(
        prospect.templates["ProspectUploader"]
    )


#: Regions the stacks are linted for. Not every region: AWS::Lambda::Url (the
#: viewer) is missing from a few newer and GovCloud regions.
LINT_REGIONS = ["us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-southeast-2"]


def lint(outdir) -> list[str]:
    from cfnlint.api import ManualArgs
    from cfnlint.api import lint as cfn_lint

    matches = []
    for template in sorted(outdir.glob("*.template.json")):
        # Errors and warnings count. W3005 (redundant DependsOn) is how CDK orders
        # role policies and is harmless; informational I-rules are advice only.
        matches += [
            f"{template.name}: {m}"
            for m in cfn_lint(template.read_text(), config=ManualArgs(regions=LINT_REGIONS))
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
        "/IdempotentModelStepDemoV2/AnthropicApiKey Annotation::AwsSolutions-SMG4",
        "/IdempotentModelStepDemoV2/Classify/DeadLetterQueue Annotation::AwsSolutions-SQS3",
        "/IdempotentModelStepDemoV2/Classify/Function Annotation::AwsSolutions-L1",
    ]
    assert all(len(reason) > 60 for reason in acks.values())
