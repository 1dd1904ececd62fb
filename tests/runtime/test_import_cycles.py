"""Issue 35, item 3 (the runtime's part): no import cycle in ``lambda_src/model_step``,
counting imports made only for type checking.

A type-only back-import is still a cycle in the design (``batch -> components -> batch``
closed one): the lower module names a small Protocol instead (``step_parts``). The graph is
read from the source with ``ast``, so nothing is imported to check it.
"""

from __future__ import annotations

import ast
from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[2] / "lambda_src" / "model_step"


def imports_of(path: Path) -> set[str]:
    """The sibling modules ``path`` imports, anywhere in it (``TYPE_CHECKING`` blocks and
    function bodies included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
    return {name for name in found if (RUNTIME / f"{name}.py").exists()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle found by a depth-first walk (each reported once, from its first node)."""
    found: list[list[str]] = []
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                found.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_the_runtime_has_no_import_cycle_even_for_type_checking():
    graph = {path.stem: imports_of(path) for path in RUNTIME.glob("*.py")}
    assert "batch" in graph and "step_parts" in graph
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_type_only_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
