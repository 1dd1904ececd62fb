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
