"""The demo stack's snapshot, cfn-lint on every template and cdk-nag's AwsSolutions rules."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from .conftest import Synthesized

HASH = re.compile(r"[0-9a-f]{64}")
# A published version's logical id ends in a hash of the function's code and configuration
# (``FunctionCurrentVersion`` + 8 hex of the path + 32 hex of the config).
VERSION_ID = re.compile(r"(CurrentVersion[0-9A-F]{8})[0-9a-f]{32}")


def _mask(text: str) -> str:
    return VERSION_ID.sub(r"\1<version-hash>", HASH.sub("<asset-hash>", text))


def mask_asset_hashes(value: Any) -> Any:
    """Replace asset and version hashes so that editing handler code does not churn the
    snapshot."""
    if isinstance(value, dict):
        return {_mask(k): mask_asset_hashes(v) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_asset_hashes(v) for v in value]
    if isinstance(value, str):
        return _mask(value)
    return value


@pytest.fixture
def snapshot_json(snapshot):
    return snapshot.use_extension(JSONSnapshotExtension)


def test_demo_stack_matches_snapshot(demo: Synthesized, snapshot_json):
    assert mask_asset_hashes(demo.templates["IdempotentModelStepDemo"]) == snapshot_json


def test_demo_v2_stack_matches_snapshot(demo: Synthesized, snapshot_json):
    assert mask_asset_hashes(demo.templates["IdempotentModelStepDemoV2"]) == snapshot_json


def test_masking_removes_every_asset_hash(demo: Synthesized):
    text = json.dumps(mask_asset_hashes(demo.templates))
    assert not HASH.search(text) and "<asset-hash>.zip" in text
    assert not VERSION_ID.search(text) and "CurrentVersion" in text


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
