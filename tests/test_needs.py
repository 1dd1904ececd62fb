"""Markers per need are found from the source: imports, lazy exports, fixtures' names."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.needs import ROOT, _fixtures, callable_needs, import_needs, module_needs, static_needs


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


def test_a_fixture_a_conftest_binds_from_another_module_is_followed_to_its_def():
    # tests/prospect/conftest.py binds moto_patching from tests/moto_per_module.py, where its
    # def enters mock_aws; test_rows.py imports nothing that needs moto.
    path = ROOT / "tests/prospect/test_rows.py"
    assert "moto" in static_needs(path, "test_an_expired_row_is_absent_to_get_and_get_many")


def test_from_imports_and_module_attributes_both_bind_a_fixture(tmp_path):
    source = """
    from tests import moto_per_module
    from tests.moto_per_module import moto_patching as imported
    assigned = moto_per_module.moto_patching
    not_a_fixture = moto_per_module.mock_aws
    """
    fixtures = _fixtures(_module(tmp_path, source))
    shared = ROOT / "tests/moto_per_module.py"
    assert fixtures["imported"][0] == fixtures["assigned"][0] == shared
    assert fixtures["assigned"][1].name == "moto_patching"
    assert "not_a_fixture" not in fixtures
