"""Bounds on the shape of the code a maintainer works in (issue 35), read with ``ast``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The longest ``IdempotentModelStep.__init__`` may be, signature and docstring included.
MAX_INIT_LINES = 100


def _method(path: Path, cls: str, name: str) -> ast.FunctionDef:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    [node] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    [method] = [m for m in node.body if isinstance(m, ast.FunctionDef) and m.name == name]
    return method


def test_the_step_s_init_checks_props_and_delegates_in_at_most_100_lines() -> None:
    init = _method(ROOT / "constructs_lib" / "idempotent_model_step.py", "IdempotentModelStep",
                   "__init__")  # fmt: skip
    assert init.end_lineno is not None
    assert init.end_lineno - init.lineno + 1 <= MAX_INIT_LINES
