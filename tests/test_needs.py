"""Markers per need are found from the source: imports, lazy exports, fixtures' names."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.needs import ROOT, callable_needs, import_needs, module_needs


def _module(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "test_probe.py"
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def test_a_lazy_construct_export_is_followed_to_aws_cdk(tmp_path):
    assert import_needs(_module(tmp_path, "from constructs_lib import IdempotentModelStep\n")) == {
        "synth"
    }


def test_an_export_behind_type_checking_and_getattr_is_followed_too(tmp_path):
    source = "from constructs_lib.prospect_uploader import ProspectUploaderStack\n"
    assert import_needs(_module(tmp_path, source)) == {"synth"}


def test_the_lazy_package_itself_needs_nothing(tmp_path):
    assert import_needs(_module(tmp_path, "import constructs_lib\n")) == set()


def test_imports_inside_functions_and_type_checking_are_not_needs(tmp_path):
    source = """
    from typing import TYPE_CHECKING
    if TYPE_CHECKING:
        import aws_cdk
    def later():
        import moto
    """
    assert import_needs(_module(tmp_path, source)) == set()


def test_importorskip_is_an_import(tmp_path):
    source = 'import pytest\nsync_api = pytest.importorskip("playwright.sync_api")\n'
    assert import_needs(_module(tmp_path, source)) == {"browser"}


def test_a_conftest_passes_on_jsii_but_not_moto():
    assert "synth" in module_needs(ROOT / "tests/infra/test_prop_validation.py")
    # tests/runtime/conftest.py imports moto; the settings tests use none of it.
    assert module_needs(ROOT / "tests/runtime/test_config.py") == set()


def test_names_in_a_function_and_its_module_helpers_are_needs():
    from moto import mock_aws

    def with_moto():
        with mock_aws():
            pass

    def asks_for_the_assembly(cdk_out):
        return cdk_out

    assert callable_needs(with_moto) == {"moto"}
    assert callable_needs(asks_for_the_assembly) == {"cdk_out"}
    assert callable_needs(test_importorskip_is_an_import) == set()
