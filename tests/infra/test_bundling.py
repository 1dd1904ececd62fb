"""Docker-free bundling: a stable asset hash and a clear error when pip cannot help."""

from __future__ import annotations

import shutil

import pytest
from aws_cdk import aws_lambda as lambda_

from constructs_lib import LocalBundlingError, LocalPipBundling
from constructs_lib.bundling import bundle_hash, lambda_src_root, pip_platform

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
