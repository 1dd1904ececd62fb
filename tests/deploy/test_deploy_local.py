"""`make deploy-local` deploys cdk.out into moto; these check its parts that need no deploy.

The deploy itself is tests/deploy/test_real_deploy.py, one of `make test`'s long tests.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path

import pytest

from scripts.deploy_local import MOTO_VERSION, moto_cloudformation_types, shim_template
from scripts.deployed_checks import FileDigests, zip_matches_directory
from tests.cdk_out import CDK_OUT, built

REPO = Path(__file__).resolve().parents[2]


def templates() -> list[dict]:
    built("ProspectUploader.template.json")
    return [json.loads(p.read_text()) for p in sorted(CDK_OUT.glob("*.template.json"))]


def references(node: object) -> set[str]:
    """Every logical id a Ref, GetAtt, Sub or DependsOn in ``node`` names."""
    text = json.dumps(node)
    found = set(re.findall(r'"Ref": "([^"]+)"', text))
    found |= set(re.findall(r'"Fn::GetAtt": \["([^"]+)"', text))
    found |= {m.split(".")[0] for m in re.findall(r"\$\{([^}!]+)\}", text)}
    return found


def test_the_shim_is_pinned_to_the_locked_moto():
    lock = (REPO / "requirements-dev.lock").read_text()
    assert re.search(rf"^moto(\[[^\]]*\])?=={re.escape(MOTO_VERSION)}$", lock, re.M)


def test_shim_removes_only_what_moto_cannot_create_and_leaves_no_dangling_reference():
    supported = moto_cloudformation_types()
    for template in templates():
        shimmed, report = shim_template(template, supported)
        resources = shimmed["Resources"]
        # GIVEN/WHEN shimmed THEN exactly the unsupported resources are gone ...
        assert set(report.removed) == {
            k for k, r in template["Resources"].items() if r["Type"] not in supported
        }
        assert set(resources) == set(template["Resources"]) - set(report.removed)
        # ... and nothing in what is deployed still points at one of them
        assert not references(resources) & set(report.removed)
        for resource in resources.values():
            depends = resource.get("DependsOn", [])
            assert not set([depends] if isinstance(depends, str) else depends) - set(resources)
        assert not references(shimmed.get("Outputs", {})) & set(report.removed)


def test_shim_turns_ref_on_an_event_bus_into_its_name():
    template = {
        "Resources": {
            "Bus": {"Type": "AWS::Events::EventBus", "Properties": {"Name": "b"}},
            "Rule": {"Type": "AWS::Events::Rule", "Properties": {"EventBusName": {"Ref": "Bus"}}},
            "Secret": {"Type": "AWS::SecretsManager::Secret", "Properties": {}},
        }
    }
    shimmed, report = shim_template(template, moto_cloudformation_types())
    assert shimmed["Resources"]["Rule"]["Properties"]["EventBusName"] == {
        "Fn::GetAtt": ["Bus", "Name"]
    }
    assert report.removed == {"Secret": "AWS::SecretsManager::Secret"}
    assert template["Resources"]["Rule"]["Properties"]["EventBusName"] == {"Ref": "Bus"}


def zipped(directory: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(directory).as_posix())
    return buffer.getvalue()


def test_code_check_tells_a_bundle_from_raw_source_published_under_its_key():
    # The failure of issue 11.5: raw lambda_src published where the bundle belongs.
    templates()
    assets = sorted(CDK_OUT.glob("asset.*"), key=lambda p: sum(1 for _ in p.rglob("*")))
    bundles = [p for p in assets if (p / "model_step").is_dir()]
    if not bundles:
        pytest.skip("no staged model step asset in cdk.out")
    smallest = assets[0]
    assert zip_matches_directory(zipped(smallest), smallest) == []
    raw = zip_matches_directory(zipped(REPO / "lambda_src"), bundles[0])
    assert any(name.startswith("anthropic/") for name in raw)


def test_digests_kept_for_a_run_read_a_zip_again_when_its_bytes_change(tmp_path):
    # GIVEN a directory, its zip, and the CRCs kept for the run (one asset, two functions)
    (tmp_path / "asset" / "pkg").mkdir(parents=True)
    (tmp_path / "asset" / "pkg" / "handler.py").write_text("x = 1\n")
    asset = tmp_path / "asset"
    digests = FileDigests()
    same = zipped(asset)
    assert zip_matches_directory(same, asset, digests, "sha-of-same") == []
    # WHEN another object is published (another sha256) THEN it is read, not remembered
    (tmp_path / "raw" / "pkg").mkdir(parents=True)
    (tmp_path / "raw" / "pkg" / "handler.py").write_text("x = 2\n")
    other = zipped(tmp_path / "raw")
    assert zip_matches_directory(other, asset, digests, "sha-of-other") == ["pkg/handler.py"]
    assert zip_matches_directory(same, asset, digests, "sha-of-same") == []
