"""The lazy package modules of ``model_step.sdk_import``, on a small package of its own.

Each test writes a package ``lazysdk_<n>`` under ``tmp_path`` whose modules record that they
ran, imports it through a :class:`LazyPackageFinder`, and checks what ran when. The real SDK
on the realtime path is tested in a fresh process (``test_cold_start.py``).
"""

from __future__ import annotations

import itertools
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from model_step import sdk_import
from model_step.sdk_bindings import read_bindings
from model_step.sdk_import import LazyPackageFinder, is_lazy, load_sdk_lazily

_NAMES = itertools.count()

INIT = '''
"""A package whose __init__ imports more than most users need."""
from typing import TYPE_CHECKING

from .light import Light as Light, LIGHT_VALUE
from .heavy import Heavy
from . import sub
from .stars import *
from .sub.inner import Inner as Renamed
import json as _json

Alias = Light
Generic = Light[int]
__all__ = ["Light", "Heavy", "Renamed", "Alias", "Starred", "sub"]

if TYPE_CHECKING:
    from .heavy import OnlyForTypes
'''
MODULES = {
    "registry.py": "RAN = []\n",
    "light.py": (
        "from .registry import RAN\nRAN.append('light')\nLIGHT_VALUE = 1\n"
        "class Light:\n    def __class_getitem__(cls, item):\n        return cls\n"
    ),
    "heavy.py": "from .registry import RAN\nRAN.append('heavy')\nclass Heavy: pass\n",
    "stars.py": (
        "from .registry import RAN\nRAN.append('stars')\n__all__ = ['Starred']\n"
        "class Starred: pass\nclass NotExported: pass\n"
    ),
    "sub/__init__.py": "from .inner import Inner\nfrom ..registry import RAN\nRAN.append('sub')\n",
    "sub/inner.py": "from ..registry import RAN\nRAN.append('inner')\nclass Inner: pass\n",
    "pure/__init__.py": "from .inner import Inner as Inner\nfrom .other import Other\n",
    "pure/inner.py": "from ..registry import RAN\nRAN.append('pure.inner')\nclass Inner: pass\n",
    "pure/other.py": "from ..registry import RAN\nRAN.append('pure.other')\nclass Other: pass\n",
    "plain/__init__.py": "from .x import X\nX.counted = True\n",
    "plain/x.py": "class X: pass\n",
}


@pytest.fixture
def lazy_package(tmp_path: Path) -> Iterator[str]:
    """The name of a fresh test package, imported lazily while the test runs."""
    name = f"lazysdk_{next(_NAMES)}"
    root = tmp_path / name
    for path, text in {"__init__.py": INIT, **MODULES}.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(textwrap.dedent(text))
    finder = LazyPackageFinder(name)
    sys.path.insert(0, str(tmp_path))
    sys.meta_path.insert(0, finder)
    try:
        yield name
    finally:
        sys.meta_path.remove(finder)
        sys.path.remove(str(tmp_path))
        for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[module]


def _import(name: str) -> ModuleType:
    __import__(name)
    return sys.modules[name]


def ran(package: str) -> list[str]:
    return list(_import(f"{package}.registry").RAN)


def test_importing_the_package_runs_none_of_its_modules(lazy_package):
    package = _import(lazy_package)

    assert is_lazy(package)
    assert ran(lazy_package) == []
    assert package.__spec__.name == lazy_package
    assert package.__file__.endswith("__init__.py")
    assert package.__loader__ is package.__spec__.loader
    assert type(package.__loader__).__name__ == "SourceFileLoader"


def test_a_name_imports_only_the_module_the_init_takes_it_from(lazy_package):
    package = _import(lazy_package)

    assert package.Light is _import(f"{lazy_package}.light").Light
    assert package.LIGHT_VALUE == 1
    assert ran(lazy_package) == ["light"]
    assert package.Heavy.__name__ == "Heavy"
    assert ran(lazy_package) == ["light", "heavy"]
    assert is_lazy(package)


def test_submodules_aliases_renames_stars_and_literals_resolve_as_the_init_binds_them(
    lazy_package,
):
    package = _import(lazy_package)

    assert package.sub is _import(f"{lazy_package}.sub")
    assert package.Renamed is _import(f"{lazy_package}.sub.inner").Inner
    assert package.Alias is package.Light
    assert package.Starred.__module__ == f"{lazy_package}.stars"
    assert package._json is _import("json")
    assert package.__all__ == ["Light", "Heavy", "Renamed", "Alias", "Starred", "sub"]
    assert is_lazy(package)  # all of them read from the __init__'s source


def test_a_submodule_imports_without_its_package_init(lazy_package):
    inner = _import(f"{lazy_package}.pure.inner")

    assert inner.Inner.__name__ == "Inner"
    assert is_lazy(sys.modules[f"{lazy_package}.pure"])
    assert ran(lazy_package) == ["pure.inner"]
    # A name the __init__ does not bind is its submodule, as after a real import.
    assert sys.modules[f"{lazy_package}.pure"].inner is inner


def test_an_unknown_name_runs_the_real_init_then_is_missing_as_it_would_be(lazy_package):
    package = _import(lazy_package)

    with pytest.raises(AttributeError):
        _ = package.not_bound_anywhere

    assert not is_lazy(package)
    assert type(package) is ModuleType
    assert set(ran(lazy_package)) == {"light", "heavy", "sub", "inner", "stars"}
    assert package.Generic is package.Light  # computed by the real __init__


def test_a_name_the_parse_cannot_place_comes_from_the_real_init(lazy_package):
    package = _import(lazy_package)

    # ``Generic = Light[int]`` is an expression: only the __init__ knows its value.
    assert package.Generic is package.Light
    assert not is_lazy(package)


def test_an_absent_dunder_probe_does_not_run_the_init(lazy_package):
    package = _import(lazy_package)

    assert not hasattr(package, "__wrapped__")
    assert is_lazy(package)
    assert ran(lazy_package) == []


def test_dir_lists_every_name_the_init_binds(lazy_package):
    package = _import(f"{lazy_package}.pure")

    assert {"Inner", "Other"} <= set(dir(package))
    assert ran(lazy_package) == []


def test_dir_of_a_package_with_names_the_parse_cannot_place_runs_the_init(lazy_package):
    package = _import(lazy_package)

    names = set(dir(package))

    assert {"Light", "Heavy", "Renamed", "Alias", "Generic", "Starred", "sub"} <= names
    assert "NotExported" not in names
    assert not is_lazy(package)


def test_star_import_of_a_package_with_all_gives_its_all_lazily(lazy_package):
    namespace: dict[str, object] = {}
    exec(f"from {lazy_package} import *", namespace)

    assert set(namespace) - {"__builtins__"} == {
        "Light",
        "Heavy",
        "Renamed",
        "Alias",
        "Starred",
        "sub",
    }
    assert is_lazy(sys.modules[lazy_package])


def test_star_import_of_a_package_without_all_gives_every_public_name(lazy_package):
    namespace: dict[str, object] = {}
    exec(f"from {lazy_package}.pure import *", namespace)

    assert {"Inner", "Other"} <= set(namespace)
    assert not is_lazy(sys.modules[f"{lazy_package}.pure"])


def test_a_sub_package_whose_init_does_more_than_bind_names_is_imported_as_usual(
    lazy_package,
):
    plain = _import(f"{lazy_package}.plain")

    assert not is_lazy(plain)
    assert plain.X.counted is True


def test_read_bindings_follows_statement_order():
    bindings = read_bindings(
        "pkg",
        "from .a import x\nx = 1\nfrom .b import y\ny = compute()\nfrom .c import y\n",
    )

    assert bindings.literals == {"x": 1}
    assert bindings.imported == {"y": ("pkg.c", "y")}
    assert not bindings.pure  # the call


def test_it_does_nothing_when_the_sdk_is_already_imported():
    import anthropic  # noqa: F401  (as the in-process suite does)

    before = list(sys.meta_path)

    assert load_sdk_lazily() is False
    assert sys.meta_path == before


def test_it_does_nothing_when_the_sdk_is_asked_to_log(monkeypatch):
    monkeypatch.delitem(sys.modules, "anthropic")
    monkeypatch.setenv(sdk_import.SDK_LOG_VARIABLE, "debug")
    before = list(sys.meta_path)

    assert load_sdk_lazily() is False
    assert sys.meta_path == before
