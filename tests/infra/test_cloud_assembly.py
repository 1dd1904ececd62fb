"""The real cloud assembly that `make synth` (the CDK CLI) wrote to cdk.out/."""

from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path

import pytest

from constructs_lib.bundling.bytecode import find_bytecode_python
from constructs_lib.bundling.dependency_lock import RUNTIME_PROVIDED, LockTarget, resolve_locks
from tests.cdk_out import CDK_OUT, built

from .conftest import REPO, Synthesized
from .test_snapshot_and_compliance import lint

LAMBDA_PYTHON = "3.13"


@pytest.fixture(autouse=True)
def _cdk_out_is_built() -> None:
    """cdk.out/ is looked for when a test starts (``tests.cdk_out.built``): `make test`
    collects while its `make synth` runs, and holds the first test until that synth is done
    (a mark's condition would be read at import, before the assembly exists)."""
    built()


def find_python(version: str) -> str | None:
    """An interpreter of exactly ``version`` (PATH, pyenv, uv-managed), or None."""
    compiler = find_bytecode_python(version)
    return compiler.executable if compiler else None


def lambda_runtime_dir(tmp_path: Path) -> Path:
    """What the Lambda runtime adds to the path (boto3, botocore: pure Python); mimicked."""
    runtime = tmp_path / "lambda-runtime"
    runtime.mkdir()
    site = Path(__import__("boto3").__file__).parent.parent
    for name in ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3", "six.py"):
        if (site / name).exists():
            os.symlink(site / name, runtime / name)
    return runtime


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


def test_model_step_asset_has_no_tests_or_runtime_provided_packages():
    for asset in model_step_assets():
        assert not (asset / "tests").exists() and not (asset / "model_step" / "tests").exists()
        assert not [n for n in RUNTIME_PROVIDED if (asset / n).exists()], asset


def test_every_asset_ships_unchecked_hash_based_cpython_313_bytecode():
    if find_python(LAMBDA_PYTHON) is None:
        pytest.skip(f"no Python {LAMBDA_PYTHON} on this machine: assets ship no bytecode")
    assets = set(function_assets().values())
    assert assets
    for asset in assets:
        sources = list(asset.rglob("*.py"))
        assert sources, asset
        for source in sources:
            pyc = source.parent / "__pycache__" / f"{source.stem}.cpython-313.pyc"
            assert pyc.is_file(), pyc
            # PEP 552 flags: 0b01 = hash-based, never checked against the source.
            assert struct.unpack("<I", pyc.read_bytes()[4:8])[0] == 0b01, pyc
        # Only the Lambda's bytecode: no stray caches of the build machine's Python.
        assert {p.name.split(".")[-2] for p in asset.rglob("*.pyc")} == {"cpython-313"}, asset


def test_a_read_only_copy_imports_from_the_shipped_bytecode(tmp_path):
    # GIVEN the model step asset copied read-only, as Lambda mounts /var/task
    python = find_python(LAMBDA_PYTHON)
    if python is None:
        pytest.skip(f"no Python {LAMBDA_PYTHON} on this machine")
    task = tmp_path / "task"
    # cp -a, not shutil.copytree: the same copy (modes and times kept) of the asset's 8,500
    # files, for 0.4 CPU-s instead of 1.2 (copytree's per-file Python calls)
    subprocess.run(["cp", "-a", str(model_step_assets()[0]), str(task)], check=True)
    for path in [task, *task.rglob("*")]:
        path.chmod(path.stat().st_mode & ~0o222)
    # WHEN the handler and the SDK are imported, no bytecode writing allowed (-B)
    script = (
        "import sys; sys.path[:0] = sys.argv[1:3];"
        "import model_step.handler, anthropic, aws_lambda_powertools.utilities.idempotency"
    )
    out = subprocess.run(
        [python, "-I", "-B", "-v", "-c", script, str(task), str(lambda_runtime_dir(tmp_path))],
        capture_output=True, text=True, timeout=120,
        env={"PATH": os.environ["PATH"], "AWS_DEFAULT_REGION": "us-east-1"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    # THEN every module from the asset came from its .pyc ("X.pyc matches X.py"), and
    # none was compiled from source ("code object from X.py", unquoted; a .pyc is quoted).
    lines = out.stderr.splitlines()
    from_pyc = [x for x in lines if x.startswith(f"# {task}/") and " matches " in x]
    from_source = [x for x in lines if x.startswith(f"# code object from {task}/")]
    assert from_source == []
    assert len(from_pyc) > 300  # model_step, powertools, anthropic, pydantic, httpx2, ...
    assert not [p for p in task.rglob("*.pyc") if "cpython-313" not in p.name]


def locked_distributions(asset: Path, architecture: str) -> set[str]:
    """The dist-info names the asset's lock installs: model_step's, the splitter's, or none."""
    machine = "aarch64" if architecture == "arm64" else "x86_64"
    target = LockTarget.for_machine(LAMBDA_PYTHON, machine)
    for name in ("model_step", "prospect_splitter"):
        if (asset / name).is_dir():
            lock = resolve_locks([REPO / "lambda_src" / name / "requirements.txt"], target)
            return {f"{p.name.replace('-', '_')}-{p.version}.dist-info" for p in lock.packages}
    return set()


def test_every_asset_installs_exactly_its_lock():
    # GIVEN each function's staged asset and its architecture
    checked = 0
    for template_path in CDK_OUT.glob("*.template.json"):
        for resource in json.loads(template_path.read_text())["Resources"].values():
            if resource["Type"] != "AWS::Lambda::Function":
                continue
            asset = CDK_OUT / resource["Metadata"]["aws:asset:path"]
            (architecture,) = resource["Properties"].get("Architectures", ["x86_64"])
            # THEN its distributions are the lock's, at the locked versions, and no others
            installed = {p.name for p in asset.glob("*.dist-info")}
            assert installed == locked_distributions(asset, architecture), asset
            # AND no RECORD names a file outside the asset (console scripts are dropped)
            for record in asset.glob("*.dist-info/RECORD"):
                assert "../" not in record.read_text(), record
            checked += bool(installed)
    assert checked >= 2  # the model step and the splitter


def test_every_bundled_handler_imports_under_the_lambda_python(tmp_path):
    python = find_python(LAMBDA_PYTHON)
    if python is None:
        pytest.skip(f"no Python {LAMBDA_PYTHON} interpreter on this machine")
    runtime = lambda_runtime_dir(tmp_path)
    found = functions()
    assert found
    script = (
        "import importlib, sys; sys.path[:0] = [sys.argv[1], sys.argv[2]];"
        "module, _, name = sys.argv[3].rpartition('.');"
        "mod = importlib.import_module(module);"
        "print(callable(getattr(mod, name)), 'anthropic' in sys.modules)"
    )
    # Functions that ship the same asset with the same handler (Classify and ClassifyBatch)
    # are the same import: one interpreter answers for all of them.
    paths_by_import: dict[tuple[Path, str], list[str]] = {}
    for path, (asset, handler) in found.items():
        paths_by_import.setdefault((asset, handler), []).append(path)
    for (asset, handler), paths in paths_by_import.items():
        out = subprocess.run(
            [python, "-I", "-B", "-c", script, str(asset), str(runtime), handler],
            capture_output=True, text=True, timeout=60,
            env={"PATH": os.environ["PATH"], "AWS_DEFAULT_REGION": "us-east-1"},
        )  # fmt: skip
        assert out.returncode == 0, (paths, out.stderr)
        # Importing a handler must not pay for `import anthropic` (lazy import).
        assert out.stdout.split() == ["True", "False"], paths


def test_a_synth_that_skips_bundling_stages_nothing_under_a_bundled_hash(prospect: Synthesized):
    # GIVEN the bundled assembly (`make synth`) and the same app synthesized with bundling
    # skipped: the fixture is app.py in this process with the context `cdk ls` and
    # `cdk bootstrap` give it (aws:cdk:bundling-stacks=[]). A `cdk ls` subprocess here cost
    # 12.4 CPU-s (the CLI, a second jsii and app.py's synth) for the same assembly.
    bundled = file_assets(CDK_OUT)
    out = prospect.outdir
    skipped = file_assets(out)
    # THEN each function's asset there is the raw source, under a hash of its own
    bundled_hashes = {p.name.removeprefix("asset.") for p in function_assets().values()}
    assert bundled_hashes and bundled_hashes <= set(bundled)
    raw = {h for h, (src, _) in skipped.items() if Path(src).name == "lambda_src"}
    assert raw, skipped
    assert raw.isdisjoint(bundled_hashes), raw & bundled_hashes
    # AND nothing was staged or published under a bundled function asset's hash or key
    assert not [p for p in out.iterdir() if p.name.removeprefix("asset.") in bundled_hashes]
    bundled_keys = {bundled[h][1] for h in bundled_hashes}
    assert {key for _, key in skipped.values()}.isdisjoint(bundled_keys)


def file_assets(cdk_out: Path) -> dict[str, tuple[str, str]]:
    """Each file asset in an assembly: hash -> (source path, destination object key)."""
    found = {}
    for manifest in cdk_out.glob("*.assets.json"):
        for asset_hash, asset in json.loads(manifest.read_text())["files"].items():
            keys = {d["objectKey"] for d in asset["destinations"].values()}
            found[asset_hash] = (asset["source"]["path"], ",".join(sorted(keys)))
    return found
