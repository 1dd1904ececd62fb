"""Import cycles in ``lambda_src/`` and ``constructs_lib/``: none allowed, type-only ones included.

Every ``import`` and ``from ... import`` of a repository module counts as an edge, wherever
it stands: at module level, inside a function (a deferred import), or under ``if
TYPE_CHECKING:`` (a type-only import). A type-only back-edge is still a cycle in the design:
the two modules cannot be read, tested or moved apart. Break it with a small ``Protocol`` in
the lower module that says what it needs of the higher one.

Modules are files. A runtime module is named as Lambda imports it (``model_step.batch``:
``lambda_src/`` is on the path) and is the same node when a construct imports it as
``lambda_src.model_step.batch``. ``from pkg import name`` is an edge to ``pkg.name`` when that
is a module, else to ``pkg`` itself. Importing a submodule does not count as importing its
package's ``__init__`` (Python runs it, but a package re-exporting its own modules is not a
design cycle).

``python -m scripts.import_cycles [DIR ...]`` (``make lint`` runs it) prints each cycle, one
edge a line with where it is written and how (``type-only``, ``deferred``), and exits 1
when there is one. The default directories are ``lambda_src`` and ``constructs_lib``.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIRECTORIES = ("lambda_src", "constructs_lib")
#: Directories whose children import one another by their own top-level names (Lambda puts
#: each bundled package at the root of /var/task; the repository puts lambda_src on the path).
PATH_ROOTS = ("lambda_src",)


@dataclass(frozen=True)
class Edge:
    """One import of ``target`` written in ``source`` at ``line``; ``how`` is ``""``,
    ``"type-only"`` (under ``if TYPE_CHECKING:``) or ``"deferred"`` (inside a function)."""

    source: str
    target: str
    line: int
    how: str


class ModuleIndex:
    """The repository modules below ``root``'s ``directories``, by dotted name."""

    def __init__(self, root: Path, directories: Sequence[str]) -> None:
        self.root = root
        #: file -> the one name it is reported by.
        self.names: dict[Path, str] = {}
        for directory in directories:
            for path in sorted((root / directory).rglob("*.py")):
                if "__pycache__" not in path.parts:
                    self.names[path] = self._name(path)

    def _name(self, path: Path) -> str:
        relative = path.relative_to(self.root)
        for path_root in PATH_ROOTS:
            if relative.parts[0] == path_root and len(relative.parts) > 1:
                relative = relative.relative_to(path_root)
        parts = list(relative.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        return ".".join(parts)

    def resolve(self, dotted: str) -> Path | None:
        """The file that ``import dotted`` loads, if it is one of ours."""
        parts = dotted.split(".")
        for base in (self.root, *(self.root / r for r in PATH_ROOTS)):
            stem = base.joinpath(*parts)
            for candidate in (stem.with_suffix(".py"), stem / "__init__.py"):
                if candidate in self.names:
                    return candidate
        return None

    def package_of(self, path: Path) -> list[str]:
        """The dotted parts of the package that ``path``'s relative imports start from."""
        parts = self.names[path].split(".")
        return parts if path.name == "__init__.py" else parts[:-1]


def _imports(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement of ``tree`` and how it is written (see :class:`Edge`)."""

    def walk(node: ast.AST, how: str) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, how
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from walk(child, how or "deferred")
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for statement in child.body:
                    yield from walk(ast.Module(body=[statement], type_ignores=[]), "type-only")
                for statement in child.orelse:
                    yield from walk(ast.Module(body=[statement], type_ignores=[]), how)
            else:
                yield from walk(child, how)

    yield from walk(tree, "")


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _targets(index: ModuleIndex, path: Path, statement: ast.Import | ast.ImportFrom) -> set[Path]:
    if isinstance(statement, ast.Import):
        found = (index.resolve(alias.name) for alias in statement.names)
        return {target for target in found if target is not None}
    if statement.level:
        package = index.package_of(path)
        if statement.level > 1:
            package = package[: len(package) - statement.level + 1]
        base = ".".join([*package, *([statement.module] if statement.module else [])])
    else:
        base = statement.module or ""
    targets = set()
    for alias in statement.names:
        target = index.resolve(f"{base}.{alias.name}") or index.resolve(base)
        if target is not None:
            targets.add(target)
    return targets


def import_edges(index: ModuleIndex) -> list[Edge]:
    """Every import between two of ``index``'s modules."""
    edges = []
    for path, name in index.names.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for statement, how in _imports(tree):
            for target in _targets(index, path, statement):
                if target != path:
                    edges.append(Edge(name, index.names[target], statement.lineno, how))
    return edges


def _strongly_connected(nodes: Sequence[str], edges: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's components, iteratively (a deep package must not hit the recursion limit)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in nodes:
        if start in order:
            continue
        work = [(start, iter(edges.get(start, ())))]
        order[start] = low[start] = len(order)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == order[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
            elif child not in order:
                order[child] = low[child] = len(order)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(edges.get(child, ()))))
            elif child in on_stack:
                low[node] = min(low[node], order[child])
    return components


def _shortest_cycle(start: str, members: set[str], edges: dict[str, list[str]]) -> list[str]:
    """The shortest path from ``start`` back to itself inside ``members``."""
    previous: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in edges.get(node, ()):
            if child not in members:
                continue
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return [*reversed(path), start]
            if child not in previous:
                previous[child] = node
                queue.append(child)
    return [start]


@dataclass(frozen=True)
class Cycle:
    """A group of modules that import one another (``members``), and the shortest cycle
    through its first member (``edges``)."""

    members: tuple[str, ...]
    edges: tuple[Edge, ...]


def find_cycles(edges: Sequence[Edge]) -> list[Cycle]:
    """One :class:`Cycle` per strongly connected group of modules."""
    graph: dict[str, list[str]] = {}
    written: dict[tuple[str, str], Edge] = {}
    for edge in edges:
        if (edge.source, edge.target) not in written:
            graph.setdefault(edge.source, []).append(edge.target)
            written[edge.source, edge.target] = edge
    cycles = []
    for component in _strongly_connected(sorted(graph), graph):
        if len(component) == 1 and component[0] not in graph.get(component[0], ()):
            continue
        path = _shortest_cycle(component[0], set(component), graph)
        steps = tuple(written[a, b] for a, b in zip(path, path[1:], strict=False))
        cycles.append(Cycle(tuple(component), steps))
    return cycles


def describe(cycle: Cycle, names: dict[str, Path], root: Path) -> str:
    """A cycle, then one edge a line: ``a -> b  (a's file:line, type-only)``."""
    lines = [" -> ".join([cycle.edges[0].source, *(edge.target for edge in cycle.edges)])]
    if len(cycle.members) > len(cycle.edges):
        lines[0] += f"  (one of the cycles among {', '.join(cycle.members)})"
    for edge in cycle.edges:
        how = f", {edge.how}" if edge.how else ""
        where = f"{names[edge.source].relative_to(root)}:{edge.line}{how}"
        lines.append(f"    {edge.source} -> {edge.target}  ({where})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directories", nargs="*", default=list(DEFAULT_DIRECTORIES))
    parser.add_argument(
        "--root", type=Path, default=ROOT, help="the repository (default: this one)"
    )
    options = parser.parse_args(argv)
    index = ModuleIndex(options.root.resolve(), options.directories)
    cycles = find_cycles(import_edges(index))
    paths = {name: path for path, name in index.names.items()}
    for cycle in cycles:
        print(f"import cycle: {describe(cycle, paths, index.root)}")
    if cycles:
        print(
            f"{len(cycles)} import cycle(s); a type-only back-edge is broken by a Protocol "
            "in the lower module (see scripts/import_cycles.py)"
        )
        return 1
    print(f"no import cycles in {', '.join(options.directories)} ({len(index.names)} modules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
