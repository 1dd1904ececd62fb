"""The installable package: its public names, and what importing it costs."""

from __future__ import annotations

import subprocess
import sys

import pytest

import constructs_lib


@pytest.mark.synth  # resolving the lazy names imports aws-cdk-lib
def test_every_public_name_resolves():
    for name in constructs_lib.__all__:
        assert getattr(constructs_lib, name) is not None, name


def test_public_names_match_the_lazy_export_table():
    assert sorted(constructs_lib.__all__) == sorted(constructs_lib._EXPORTS)


def test_the_cli_starts_without_aws_cdk_or_jsii():
    # The local run never synthesizes, so it must not pay jsii's start-up.
    code = (
        "import sys, constructs_lib.prospect_uploader.cli;"
        "print(sorted(m for m in ('aws_cdk', 'jsii') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_runtime_packages_ship_beside_the_library():
    from constructs_lib._paths import lambda_src_root

    for package in ("model_step", "prospect_classifier", "prospect_splitter",
                    "failure_recorder", "prospect_viewer"):  # fmt: skip
        assert (lambda_src_root() / package / "__init__.py").is_file(), package


@pytest.mark.synth  # the asset's names import aws-cdk-lib
def test_the_bundling_package_exports_what_the_bundling_module_did():
    # GIVEN constructs_lib.bundling, one module before issue 35 and a package since
    from constructs_lib import bundling
    from constructs_lib.bundling import bytecode, dependency_lock, errors, local_pip

    # THEN every name it exported imports from it still, and is the moved module's
    assert sorted(bundling.__all__) == sorted([*bundling._EXPORTS, "lambda_src_root"])
    assert bundling.python_lambda_code is local_pip.python_lambda_code
    assert bundling.LocalPipBundling is local_pip.LocalPipBundling
    assert bundling.LocalBundlingError is errors.LocalBundlingError
    assert bundling.BytecodeCompiler is bytecode.BytecodeCompiler
    assert bundling.find_bytecode_python is bytecode.find_bytecode_python
    assert bundling.RUNTIME_PROVIDED is dependency_lock.RUNTIME_PROVIDED
    assert bundling.lambda_src_root() == local_pip.lambda_src_root()


def test_the_bundling_errors_keep_the_import_path_docs_named():
    from constructs_lib import bundling_errors
    from constructs_lib.bundling import errors

    assert bundling_errors.__all__ == errors.__all__
    for name in errors.__all__:
        assert getattr(bundling_errors, name) is getattr(errors, name), name


def test_the_lock_command_keeps_its_name_and_starts_without_aws_cdk_or_jsii():
    # The command the locks' headers and the lock errors name; it locks without synthesizing.
    code = (
        "import runpy, sys\n"
        "sys.argv = ['lock_requirements', '--help']\n"
        "try:\n"
        "    runpy.run_module('constructs_lib.lock_requirements', run_name='__main__')\n"
        "except SystemExit as done:\n"
        "    assert done.code == 0, done.code\n"
        "print(sorted(m for m in ('aws_cdk', 'jsii') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("usage: python -m constructs_lib.lock_requirements")
    assert out.stdout.strip().endswith("[]")
