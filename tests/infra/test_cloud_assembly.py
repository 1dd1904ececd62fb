"""The real cloud assembly that `make synth` (the CDK CLI) wrote to cdk.out/."""

from __future__ import annotations

import glob
import json
import os
import subprocess
from pathlib import Path

import pytest

from constructs_lib.bundling import RUNTIME_PROVIDED

from .conftest import REPO
from .test_snapshot_and_compliance import lint

CDK_OUT = REPO / "cdk.out"
LAMBDA_PYTHON = "3.13"

pytestmark = pytest.mark.skipif(
    not (CDK_OUT / "manifest.json").exists(),
    reason="cdk.out/ is missing: `make test` builds it with `make synth` first",
)


def find_python(version: str) -> str | None:
    """An interpreter of exactly ``version`` (PATH, then pyenv), or None."""
    home = Path.home()
    candidates = [
        f"python{version}",
        *glob.glob(str(home / f".pyenv/versions/{version}*/bin/python{version}")),
    ]
    for candidate in candidates:
        try:
            out = subprocess.run(
                [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True, text=True, timeout=20,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and out.stdout.strip() == version:
            return candidate
    return None


def functions() -> dict[str, tuple[Path, str]]:
    """Each Lambda function's staged asset directory and handler, by construct path."""
    found = {}
    for template_path in CDK_OUT.glob("*.template.json"):
        template = json.loads(template_path.read_text())
        for resource in template["Resources"].values():
            if resource["Type"] != "AWS::Lambda::Function":
                continue
            path = resource["Metadata"]["aws:cdk:path"]
            asset = CDK_OUT / resource["Metadata"]["aws:asset:path"]
            found[path] = (asset, resource["Properties"]["Handler"])
    return found


def function_assets() -> dict[str, Path]:
    return {path: asset for path, (asset, _) in functions().items()}


def model_step_assets() -> list[Path]:
    return [p for p in function_assets().values() if (p / "model_step").is_dir()]


def test_cfn_lint_finds_nothing_in_any_template_in_cdk_out():
    assert lint(CDK_OUT) == []


def test_cdk_nag_reported_no_violations():
    report = CDK_OUT / "validation-report.json"
    violations = []
    if report.exists():
        violations = [
            v
            for r in json.loads(report.read_text())["pluginReports"]
            for v in r.get("violations", [])
        ]
    assert violations == []


def test_every_function_has_a_staged_asset():
    assert function_assets() and all(p.is_dir() for p in function_assets().values())


def test_model_step_asset_has_no_caches_tests_or_runtime_provided_packages():
    for asset in model_step_assets():
        assert not list(asset.rglob("__pycache__")), asset
        assert not list(asset.rglob("*.pyc")), asset
        assert not (asset / "tests").exists() and not (asset / "model_step" / "tests").exists()
        assert not [n for n in RUNTIME_PROVIDED if (asset / n).exists()], asset


def test_model_step_asset_pins_the_sdk_and_powertools():
    pins = (REPO / "lambda_src/model_step/requirements.txt").read_text().split()
    for asset in model_step_assets():
        for pin in pins:
            name, version = pin.split("==")
            assert (asset / f"{name.replace('-', '_')}-{version}.dist-info").is_dir(), (asset, pin)


def test_every_bundled_handler_imports_under_the_lambda_python(tmp_path):
    python = find_python(LAMBDA_PYTHON)
    if python is None:
        pytest.skip(f"no Python {LAMBDA_PYTHON} interpreter on this machine")
    # The Lambda runtime provides boto3 and botocore (pure Python); mimic it.
    runtime = tmp_path / "lambda-runtime"
    runtime.mkdir()
    site = Path(__import__("boto3").__file__).parent.parent
    for name in ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3", "six.py"):
        if (site / name).exists():
            os.symlink(site / name, runtime / name)
    found = functions()
    assert found
    script = (
        "import importlib, sys; sys.path[:0] = [sys.argv[1], sys.argv[2]];"
        "module, _, name = sys.argv[3].rpartition('.');"
        "mod = importlib.import_module(module);"
        "print(callable(getattr(mod, name)), 'anthropic' in sys.modules)"
    )
    for path, (asset, handler) in found.items():
        out = subprocess.run(
            [python, "-I", "-B", "-c", script, str(asset), str(runtime), handler],
            capture_output=True, text=True, timeout=60,
            env={"PATH": os.environ["PATH"], "AWS_DEFAULT_REGION": "us-east-1"},
        )  # fmt: skip
        assert out.returncode == 0, (path, out.stderr)
        # Importing a handler must not pay for `import anthropic` (lazy import).
        assert out.stdout.split() == ["True", "False"], path
