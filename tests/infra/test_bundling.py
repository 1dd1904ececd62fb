"""Docker-free bundling: a stable asset hash, shipped bytecode, a clear error when pip fails."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_lambda as lambda_

from constructs_lib import LocalBundlingError, LocalPipBundling
from constructs_lib.bundling import (
    BUNDLING_SKIPPED,
    NO_BYTECODE,
    NO_BYTECODE_WARNING,
    bundle_hash,
    find_bytecode_python,
    lambda_src_root,
    pip_platform,
)
from constructs_lib.python_function import python_function

from .conftest import NO_BUNDLING

RUNTIME = lambda_src_root() / "model_step"
REQS = [RUNTIME / "requirements.txt"]


@pytest.fixture
def runtime_copy(tmp_path):
    copy = tmp_path / "model_step"
    shutil.copytree(RUNTIME, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_hash_is_stable_across_calls():
    first = bundle_hash([RUNTIME], REQS, "manylinux2014_x86_64", "3.13")
    assert first == bundle_hash([RUNTIME], REQS, "manylinux2014_x86_64", "3.13")


def test_hash_ignores_bytecode_caches(runtime_copy):
    before = bundle_hash([runtime_copy], REQS, "manylinux2014_x86_64", "3.13")
    (runtime_copy / "__pycache__").mkdir(exist_ok=True)
    (runtime_copy / "__pycache__" / "handler.cpython-311.pyc").write_bytes(b"\x00")
    assert bundle_hash([runtime_copy], REQS, "manylinux2014_x86_64", "3.13") == before


def test_hash_changes_with_handler_code(runtime_copy):
    before = bundle_hash([runtime_copy], REQS, "manylinux2014_x86_64", "3.13")
    (runtime_copy / "handler.py").write_text("# changed\n", encoding="utf-8")
    assert bundle_hash([runtime_copy], REQS, "manylinux2014_x86_64", "3.13") != before


def test_hash_differs_per_architecture():
    # An arm64 and an x86_64 function must never share one staged asset.
    x86 = bundle_hash([RUNTIME], REQS, pip_platform(lambda_.Architecture.X86_64), "3.13")
    arm = bundle_hash([RUNTIME], REQS, pip_platform(lambda_.Architecture.ARM_64), "3.13")
    assert x86 != arm


def test_platform_tags():
    assert pip_platform(lambda_.Architecture.ARM_64) == "manylinux2014_aarch64"
    assert pip_platform(lambda_.Architecture.X86_64) == "manylinux2014_x86_64"


def test_copy_only_bundle_has_no_caches_or_tests(tmp_path, runtime_copy):
    (runtime_copy / "__pycache__").mkdir(exist_ok=True)
    (runtime_copy / "__pycache__" / "x.pyc").write_bytes(b"\x00")
    (runtime_copy / "tests").mkdir()
    (runtime_copy / "tests" / "test_x.py").write_text("")
    out = tmp_path / "out"
    LocalPipBundling([runtime_copy], [], "manylinux2014_x86_64").bundle(out)
    assert (out / "model_step" / "handler.py").is_file()
    assert not list(out.rglob("__pycache__")) and not list(out.rglob("tests"))
    assert not (out / "model_step" / "requirements.txt").exists()


def test_pip_failure_says_why(tmp_path, runtime_copy):
    # --no-index keeps this test offline: pip cannot find the wheel, as on a
    # machine without index access.
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("--no-index\nanthropic==2.14.0\n")
    with pytest.raises(LocalBundlingError) as error:
        LocalPipBundling([runtime_copy], [reqs], "manylinux2014_aarch64").bundle(tmp_path / "o")
    message = str(error.value)
    assert "pip could not install" in message
    assert "manylinux2014_aarch64 wheels for CPython 3.13" in message
    assert "anthropic==2.14.0" in message


# --------------------------------------------------------------------------- bytecode
def pyc_flags(path: Path) -> int:
    """The PEP 552 flags word: bit 0 = hash-based, bit 1 = check the source."""
    return struct.unpack("<I", path.read_bytes()[4:8])[0]


def no_python_313_environ(tmp_path: Path) -> dict[str, str]:
    """An environment where no CPython 3.13 can be found: only Node's directory on PATH."""
    node = shutil.which("node")
    assert node, "jsii needs node on PATH"
    empty = tmp_path / "empty-home"
    empty.mkdir(exist_ok=True)
    return {
        "PATH": str(Path(node).parent),
        "HOME": str(empty),
        "PYENV_ROOT": str(empty / "pyenv"),
        "UV_PYTHON_INSTALL_DIR": str(empty / "uv"),
    }


@pytest.fixture(scope="module")
def python313():
    compiler = find_bytecode_python("3.13")
    if compiler is None:
        pytest.skip("no CPython 3.13 on this machine (PATH, pyenv, uv)")
    return compiler


def test_hash_differs_per_bytecode_mode(python313):
    # GIVEN one set of inputs WHEN built with .pyc, without, or not at all THEN three keys.
    hashes = {
        bundle_hash([RUNTIME], REQS, "manylinux2014_x86_64", "3.13", mode)
        for mode in (NO_BYTECODE, python313.mode, BUNDLING_SKIPPED)
    }
    assert len(hashes) == 3


def test_finder_confirms_the_interpreter(python313):
    assert python313.version.startswith("3.13.") and python313.cache_tag == "cpython-313"
    assert python313.mode == f"pyc-unchecked-hash:CPython-{python313.version}:magic-f30d0d0a"


def test_finder_finds_nothing_without_an_interpreter(tmp_path):
    assert find_bytecode_python("3.13", no_python_313_environ(tmp_path)) is None


def test_finder_skips_a_pyenv_shim_and_reads_pyenv_root(tmp_path, python313):
    # GIVEN a PATH `python3.13` that fails (a pyenv shim of an unselected version)
    # and a pyenv root holding a real 3.13
    shims = tmp_path / "shims"
    shims.mkdir()
    shim = shims / "python3.13"
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.13: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    root = tmp_path / "pyenv"
    (root / "versions" / python313.version / "bin").mkdir(parents=True)
    os.symlink(python313.executable, root / "versions" / python313.version / "bin/python3.13")
    environ = {**no_python_313_environ(tmp_path), "PYENV_ROOT": str(root)}
    environ["PATH"] = f"{shims}{os.pathsep}{environ['PATH']}"
    # WHEN searched THEN the shim is probed, rejected, and pyenv's interpreter wins
    found = find_bytecode_python("3.13", environ)
    assert found is not None and found.executable.startswith(str(root))


def test_bundle_ships_unchecked_hash_based_pyc(tmp_path, runtime_copy, python313):
    out = tmp_path / "out"
    LocalPipBundling([runtime_copy], [], "manylinux2014_x86_64", compiler=python313).bundle(out)
    sources = sorted(out.rglob("*.py"))
    assert sources
    for source in sources:
        pyc = source.parent / "__pycache__" / f"{source.stem}.cpython-313.pyc"
        assert pyc.is_file(), source
        assert pyc_flags(pyc) == 0b01, pyc  # hash-based, source never checked


# --------------------------------------------------------------------------- synth
def synth_function(tmp_path: Path, package: Path, context: dict) -> tuple[cdk.Stack, dict]:
    # Asset metadata (aws:asset:path) is what the CLI asks for too.
    context = {"aws:cdk:enable-asset-metadata": True, **context}
    app = cdk.App(context=context, outdir=str(tmp_path / "cdk.out"))
    stack = cdk.Stack(app, "BundlingProbe")
    python_function(
        stack,
        "Fn",
        packages=[package],
        handler="model_step.handler.handler",
        description="bundling probe",
        environment={},
    )
    assembly = app.synth()
    template = assembly.get_stack_artifact("BundlingProbe").template
    (function,) = [
        r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"
    ]
    return stack, function


def test_skipped_bundling_never_shares_the_bundled_hash(tmp_path, runtime_copy):
    # GIVEN the same function synthesized with bundling and with bundling skipped
    _, bundled = synth_function(tmp_path / "bundled", runtime_copy, {})
    _, skipped = synth_function(tmp_path / "skipped", runtime_copy, NO_BUNDLING)
    # THEN the skipped synth points at the raw source under a key of its own
    assert bundled["Properties"]["Code"]["S3Key"] != skipped["Properties"]["Code"]["S3Key"]
    assert Path(skipped["Metadata"]["aws:asset:path"]).resolve() == runtime_copy.parent


def test_no_interpreter_warns_and_bundles_without_bytecode(tmp_path, runtime_copy, monkeypatch):
    # GIVEN a machine with no CPython 3.13 to be found
    for key in ("PATH", "HOME", "PYENV_ROOT", "UV_PYTHON_INSTALL_DIR", "XDG_DATA_HOME"):
        monkeypatch.delenv(key, raising=False)
    for key, value in no_python_313_environ(tmp_path).items():
        monkeypatch.setenv(key, value)
    # WHEN the function is bundled
    stack, function = synth_function(tmp_path, runtime_copy, {})
    # THEN synth warns, naming how to get one, and the asset has no bytecode
    warnings = assertions.Annotations.from_stack(stack).find_warning(
        "*", assertions.Match.string_like_regexp("No CPython 3.13 found")
    )
    assert len(warnings) == 1
    assert "uv python install 3.13" in warnings[0].entry.data
    assert NO_BYTECODE_WARNING in warnings[0].entry.data
    asset = tmp_path / "cdk.out" / function["Metadata"]["aws:asset:path"]
    assert (asset / "model_step" / "handler.py").is_file()
    assert not list(asset.rglob("*.pyc"))


def test_finder_reads_uv_managed_pythons(tmp_path, python313):
    # GIVEN only a uv-managed 3.13 (uv's layout: cpython-<version>-<platform>/bin/python3.13)
    uv = tmp_path / "uv-python"
    bin_dir = uv / f"cpython-{python313.version}-linux-x86_64-gnu" / "bin"
    bin_dir.mkdir(parents=True)
    os.symlink(python313.executable, bin_dir / "python3.13")
    environ = {**no_python_313_environ(tmp_path), "UV_PYTHON_INSTALL_DIR": str(uv)}
    # WHEN searched THEN it is found there
    found = find_bytecode_python("3.13", environ)
    assert found is not None and found.executable == str(bin_dir / "python3.13")
