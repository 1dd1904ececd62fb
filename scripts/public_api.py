"""The public API read from source with ``ast``: no import, so no jsii, boto3 or moto.

A package's public names are its ``__all__``; where each is defined is read from the
package's ``_EXPORTS`` table (``constructs_lib``'s lazy exports), its ``from .x import``
statements, or its own body. For each public class this module lists the keyword
parameters of its constructors (``__init__`` and every classmethod or staticmethod that
builds one), its public methods and properties, and the public attributes ``__init__``
assigns, with what their docstrings say about each. ``tests/docs`` holds every entry to
"documented, with its default"; ``scripts/reference_tables.py`` renders the props tables.

Docstring conventions it reads (reStructuredText, as pdoc renders them):

- ``:param name: what it does ... Default: ...`` in the class or the ``__init__``
  docstring (or the method's own, for a method);
- an attribute is documented by a ``#:`` comment on the lines above its assignment, a
  string literal right after it, or a mention as ``name`` (double backquotes) in the
  class docstring.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Parameters every construct takes and aws-cdk-lib documents.
CONSTRUCT_PARAMETERS = frozenset({"self", "cls", "scope", "id"})
_PARAM = re.compile(r"^\s*:param\s+(?:[\w\[\], .|]+\s+)?(\w+):(.*)$")
#: How a ``:param:`` entry states what happens when the argument is left out.
STATES_DEFAULT = re.compile(r"\b(default|required)\b", re.I)
_FIELD = re.compile(r"^\s*:(param|type|returns?|rtype|raises?|var|ivar|cvar|meta)\b")


@dataclass(frozen=True)
class Parameter:
    """One parameter of a public callable."""

    name: str
    #: The default's source text (``defaults.DEFAULT_MAX_TOKENS``), or None if required.
    default: str | None
    #: Its ``:param:`` text, whitespace collapsed, or None if undocumented.
    doc: str | None


@dataclass(frozen=True)
class Callable:
    """A public constructor or method."""

    qualname: str
    docstring: str | None
    parameters: tuple[Parameter, ...]
    #: ``__init__`` or a classmethod/staticmethod: its parameters are props.
    is_constructor: bool
    lineno: int


@dataclass(frozen=True)
class Attribute:
    """A public attribute a class assigns (``self.name = ...``) or declares."""

    qualname: str
    documented: bool
    lineno: int


@dataclass
class PublicClass:
    """A class named in a package's ``__all__``."""

    name: str
    module: Path
    docstring: str | None
    lineno: int
    callables: list[Callable] = field(default_factory=list)
    attributes: list[Attribute] = field(default_factory=list)

    def constructor(self) -> Callable | None:
        """The ``__init__`` entry, if the class defines one."""
        return next((c for c in self.callables if c.qualname.endswith(".__init__")), None)


@dataclass(frozen=True)
class PublicFunction:
    """A module-level function named in a package's ``__all__``."""

    callable: Callable
    module: Path


def param_docs(docstring: str | None) -> dict[str, str]:
    """``:param name: text`` entries of a docstring, each text on one line."""
    docs: dict[str, str] = {}
    current: str | None = None
    for line in (docstring or "").splitlines():
        match = _PARAM.match(line)
        if match:
            current = match.group(1)
            docs[current] = match.group(2).strip()
        elif current and line.strip() and not _FIELD.match(line):
            docs[current] = f"{docs[current]} {line.strip()}".strip()
        else:
            current = None
    return docs


def _module_path(package_dir: Path, relative: str) -> Path:
    """``.x.y`` -> package_dir/x/y.py (or its package's __init__.py)."""
    level = len(relative) - len(relative.lstrip("."))
    base = package_dir
    for _ in range(level - 1):
        base = base.parent
    parts = [p for p in relative.lstrip(".").split(".") if p]
    target = base.joinpath(*parts)
    return target / "__init__.py" if target.is_dir() else target.with_suffix(".py")


def _literal_all(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return [str(v) for v in ast.literal_eval(node.value)]
    return []


def _definitions(init: Path) -> dict[str, Path]:
    """Public name -> the module that defines it, for the package whose ``__init__`` this is."""
    tree = ast.parse(init.read_text(encoding="utf-8"))
    where: dict[str, Path] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets
        ):
            for name, module in ast.literal_eval(node.value).items():
                where.setdefault(name, _module_path(init.parent, module))
        elif isinstance(node, ast.ImportFrom) and node.level:
            relative = "." * node.level + (node.module or "")
            for alias in node.names:
                where.setdefault(alias.asname or alias.name, _module_path(init.parent, relative))
    return {name: where.get(name, init) for name in _literal_all(tree)}


def public_packages(root: Path = ROOT / "constructs_lib") -> list[Path]:
    """Every ``__init__.py`` under ``root`` that declares ``__all__``."""
    return sorted(
        init
        for init in root.rglob("__init__.py")
        if "__pycache__" not in init.parts
        and _literal_all(ast.parse(init.read_text(encoding="utf-8")))
    )


def _parameters(function: ast.FunctionDef, docs: dict[str, str]) -> tuple[Parameter, ...]:
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += list(args.defaults)
    pairs = list(zip(positional, defaults, strict=True))
    pairs += list(zip(args.kwonlyargs, args.kw_defaults, strict=True))
    return tuple(
        Parameter(
            arg.arg,
            None if default is None else ast.unparse(default),
            docs.get(arg.arg),
        )
        for arg, default in pairs
        if arg.arg not in CONSTRUCT_PARAMETERS
    )


def _decorators(function: ast.FunctionDef) -> set[str]:
    return {ast.unparse(d).split("(")[0] for d in function.decorator_list}


def _comment_above(lines: list[str], lineno: int) -> bool:
    """A ``#:`` comment on the line(s) right above line ``lineno`` (1-based)."""
    index = lineno - 2
    while index >= 0 and lines[index].strip().startswith("#"):
        if lines[index].strip().startswith("#:"):
            return True
        index -= 1
    return False


def _documented_assignments(
    body: list[ast.stmt], lines: list[str], *, on_self: bool
) -> Iterator[tuple[str, int, bool]]:
    """(name, line, documented) of each public assignment in ``body`` (recursively)."""
    for index, node in enumerate(body):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if on_self:
                if not (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                ):
                    continue
                name = target.attr
            else:
                if not isinstance(target, ast.Name):
                    continue
                name = target.id
            if name.startswith("_"):
                continue
            after = body[index + 1] if index + 1 < len(body) else None
            string_after = (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            )
            yield name, node.lineno, string_after or _comment_above(lines, node.lineno)
        for child in ("body", "orelse", "finalbody"):
            nested = getattr(node, child, None)
            if nested and not isinstance(node, ast.FunctionDef | ast.ClassDef):
                yield from _documented_assignments(nested, lines, on_self=on_self)


def _read_class(node: ast.ClassDef, module: Path, lines: list[str]) -> PublicClass:
    cls = PublicClass(node.name, module, ast.get_docstring(node), node.lineno)
    class_docs = param_docs(cls.docstring)
    mentioned = set(re.findall(r"``(\w+)``", cls.docstring or ""))
    seen: set[str] = set()
    # Class-level declarations first: ``rule: events.Rule | None`` with a docstring
    # documents the attribute a step method assigns later.
    for name, lineno, documented in _documented_assignments(node.body, lines, on_self=False):
        if name not in seen:
            seen.add(name)
            cls.attributes.append(
                Attribute(f"{node.name}.{name}", documented or name in mentioned, lineno)
            )
    for item in node.body:
        if not isinstance(item, ast.FunctionDef):
            continue
        decorators = _decorators(item)
        if "property" in decorators or any(d.endswith(".setter") for d in decorators):
            if not item.name.startswith("_") and item.name not in seen:
                seen.add(item.name)
                cls.attributes.append(
                    Attribute(
                        f"{node.name}.{item.name}",
                        bool(ast.get_docstring(item)),
                        item.lineno,
                    )
                )
            continue
        # Attributes may be assigned by any method: a constructor made of named steps
        # (``_storage``, ``_queues``, ...) assigns them in private helpers.
        for name, lineno, documented in _documented_assignments(item.body, lines, on_self=True):
            if name not in seen:
                seen.add(name)
                cls.attributes.append(
                    Attribute(f"{node.name}.{name}", documented or name in mentioned, lineno)
                )
        if item.name.startswith("_") and item.name != "__init__":
            continue
        docstring = ast.get_docstring(item)
        is_constructor = item.name == "__init__" or bool(
            decorators & {"classmethod", "staticmethod"}
        )
        docs = (
            {**class_docs, **param_docs(docstring)}
            if item.name == "__init__"
            else (param_docs(docstring))
        )
        cls.callables.append(
            Callable(
                f"{node.name}.{item.name}",
                docstring,
                _parameters(item, docs),
                is_constructor,
                item.lineno,
            )
        )
    return cls


def public_api(
    root: Path = ROOT / "constructs_lib",
) -> tuple[list[PublicClass], list[PublicFunction]]:
    """Every public class and function of every package under ``root`` with an ``__all__``."""
    classes: list[PublicClass] = []
    functions: list[PublicFunction] = []
    done: set[tuple[Path, str]] = set()
    for init in public_packages(root):
        for name, module in _definitions(init).items():
            if (module, name) in done or not module.is_file():
                continue
            done.add((module, name))
            source = module.read_text(encoding="utf-8")
            tree = ast.parse(source)
            lines = source.splitlines()
            for node in tree.body:
                if isinstance(node, ast.ClassDef) and node.name == name:
                    classes.append(_read_class(node, module, lines))
                elif isinstance(node, ast.FunctionDef) and node.name == name:
                    docstring = ast.get_docstring(node)
                    functions.append(
                        PublicFunction(
                            Callable(
                                name,
                                docstring,
                                _parameters(node, param_docs(docstring)),
                                True,
                                node.lineno,
                            ),
                            module,
                        )
                    )
    return classes, functions


@dataclass(frozen=True)
class Gap:
    """Something public without the documentation it needs."""

    #: Stable across edits: ``Class.attribute`` or ``Class.method(parameter)``.
    key: str
    #: ``path:line`` where it is.
    where: str
    #: What is missing.
    problem: str

    def __str__(self) -> str:
        return f"{self.where} {self.key}: {self.problem}"


#: Packages whose ``__all__`` is not a CDK user's API: the local run's engine, used by
#: the ``prospect-uploader`` CLI (its results are documented as its ``--json`` output).
NOT_A_LIBRARY_API = ("constructs_lib/prospect_uploader/local_run/",)


def undocumented(root: Path = ROOT / "constructs_lib") -> list[Gap]:
    """Every public class, method or attribute with no docs, every constructor parameter
    without a ``:param:`` entry, and every one with a default that its entry does not
    state."""
    classes, functions = public_api(root)
    gaps: list[Gap] = []

    def where(module: Path, lineno: int) -> str:
        return f"{module.relative_to(root.parent).as_posix()}:{lineno}"

    def check_callable(item: Callable, module: Path) -> None:
        if not item.qualname.endswith("__init__") and not item.docstring:
            gaps.append(Gap(item.qualname, where(module, item.lineno), "no docstring"))
        if not item.is_constructor:
            return
        for parameter in item.parameters:
            key = f"{item.qualname}({parameter.name})"
            if parameter.doc is None:
                gaps.append(Gap(key, where(module, item.lineno), "no ':param' entry"))
            elif parameter.default is not None and not STATES_DEFAULT.search(parameter.doc):
                gaps.append(
                    Gap(
                        key,
                        where(module, item.lineno),
                        f"its ':param' entry does not state the default ({parameter.default})",
                    )
                )

    def public(module: Path) -> bool:
        return not module.relative_to(root.parent).as_posix().startswith(NOT_A_LIBRARY_API)

    for cls in classes:
        if not public(cls.module):
            continue
        if not cls.docstring:
            gaps.append(Gap(cls.name, where(cls.module, cls.lineno), "no docstring"))
        for item in cls.callables:
            check_callable(item, cls.module)
        for attribute in cls.attributes:
            if not attribute.documented:
                gaps.append(
                    Gap(
                        attribute.qualname,
                        where(cls.module, attribute.lineno),
                        "no '#:' comment, docstring or ``mention`` in the class docstring",
                    )
                )
    for function in functions:
        if public(function.module):
            check_callable(function.callable, function.module)
    return gaps


if __name__ == "__main__":
    for gap in undocumented():
        print(gap)
