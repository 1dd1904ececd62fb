"""The import-cycle check (`make lint`): every import counts, type-only and deferred ones too."""

from __future__ import annotations

from pathlib import Path

from scripts.import_cycles import ROOT, ModuleIndex, find_cycles, import_edges, main


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def _cycles(root: Path, *directories: str) -> list[list[tuple[str, str, str]]]:
    index = ModuleIndex(root, directories)
    return [
        [(edge.source, edge.target, edge.how) for edge in cycle.edges]
        for cycle in find_cycles(import_edges(index))
    ]


def test_a_type_only_back_edge_is_a_cycle(tmp_path):
    # GIVEN a module that imports another only for its types, and is imported back lazily
    root = _tree(
        tmp_path,
        {
            "constructs_lib/__init__.py": "",
            "constructs_lib/step.py": "def dash():\n    from .dashboard import Dashboard\n",
            "constructs_lib/dashboard.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .step import Step\n"
            ),
        },
    )
    # THEN the check reports the cycle and how each edge is written
    assert _cycles(root, "constructs_lib") == [
        [
            ("constructs_lib.dashboard", "constructs_lib.step", "type-only"),
            ("constructs_lib.step", "constructs_lib.dashboard", "deferred"),
        ]
    ]
    assert main(["--root", str(root), "constructs_lib"]) == 1


def test_a_runtime_module_is_one_node_by_either_name(tmp_path):
    # GIVEN a runtime package imported by its Lambda name and by its repository path
    root = _tree(
        tmp_path,
        {
            "lambda_src/step/__init__.py": "",
            "lambda_src/step/work.py": "import typing\nif typing.TYPE_CHECKING:\n"
            "    from step import parts\n",
            "lambda_src/step/parts.py": "from lambda_src.step.work import run\n",
        },
    )
    assert _cycles(root, "lambda_src") == [
        [("step.parts", "step.work", ""), ("step.work", "step.parts", "type-only")]
    ]


def test_a_three_module_cycle_is_found_through_from_imports(tmp_path):
    root = _tree(
        tmp_path,
        {
            "lambda_src/step/__init__.py": "",
            "lambda_src/step/a.py": "from . import b\n",
            "lambda_src/step/b.py": "from .c import thing\n",
            "lambda_src/step/c.py": "from step.a import other\n",
        },
    )
    (cycle,) = _cycles(root, "lambda_src")
    assert [(source, target) for source, target, _ in cycle] == [
        ("step.a", "step.b"),
        ("step.b", "step.c"),
        ("step.c", "step.a"),
    ]


def test_a_package_exporting_its_modules_is_no_cycle(tmp_path):
    # GIVEN a package __init__ that imports its modules, which import each other one way
    root = _tree(
        tmp_path,
        {
            "constructs_lib/__init__.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from .step import Step\n    from .dashboard import D\n",
            "constructs_lib/step.py": "from . import dashboard\nfrom .defaults import X\n",
            "constructs_lib/dashboard.py": "from constructs_lib import defaults\n",
            "constructs_lib/defaults.py": "import os\n",
        },
    )
    assert _cycles(root, "constructs_lib") == []
    assert main(["--root", str(root), "constructs_lib"]) == 0


def test_a_name_that_is_not_a_module_is_an_edge_to_its_package(tmp_path):
    # `from constructs_lib import Step` runs constructs_lib/__init__, which imports step
    root = _tree(
        tmp_path,
        {
            "constructs_lib/__init__.py": "from .step import Step\n",
            "constructs_lib/step.py": "def f():\n    from constructs_lib import Step\n",
        },
    )
    assert _cycles(root, "constructs_lib") == [
        [
            ("constructs_lib", "constructs_lib.step", ""),
            ("constructs_lib.step", "constructs_lib", "deferred"),
        ]
    ]


def test_constructs_lib_has_no_import_cycle():
    # The runtime's own (lambda_src) is checked by `make lint` over both trees.
    assert _cycles(ROOT, "constructs_lib") == []
