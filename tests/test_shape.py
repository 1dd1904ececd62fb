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


#: The longest a runtime module may be, and a runtime function (issue 35).
MAX_RUNTIME_MODULE_LINES = 400
MAX_RUNTIME_FUNCTION_LINES = 60
RUNTIME = ROOT / "lambda_src" / "model_step"


def test_no_runtime_module_is_over_400_lines() -> None:
    long = {
        path.name: length
        for path in sorted(RUNTIME.glob("*.py"))
        if (length := len(path.read_text(encoding="utf-8").splitlines())) > MAX_RUNTIME_MODULE_LINES
    }
    assert long == {}


def test_no_runtime_function_is_over_60_lines() -> None:
    long = {}
    for path in sorted(RUNTIME.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                length = node.end_lineno - node.lineno + 1
                if length > MAX_RUNTIME_FUNCTION_LINES:
                    long[f"{path.name}:{node.name}"] = length
    assert long == {}
