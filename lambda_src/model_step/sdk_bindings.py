"""What a package's ``__init__`` binds, read from its source with :mod:`ast`, without running it.

:mod:`.sdk_import` defers the model SDK's package ``__init__`` files and resolves their names
from these bindings: a name imported from a submodule, a literal (``__all__``), or opaque (only
the real ``__init__`` knows its value). ``pure`` says whether the ``__init__`` does anything but
bind names, which is what makes deferring it safe.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: How deep ``from x import *`` is followed into modules that star-import in turn.
_STAR_DEPTH = 4


@dataclass
class Bindings:
    """What a package's ``__init__`` binds, as read from its source."""

    #: name -> (module, attribute): the ``__init__`` does ``from module import attribute``;
    #: attribute None: the name is the module itself (``import x``, ``from . import sub``).
    imported: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    #: name -> value of a literal assignment (``__all__ = [...]``).
    literals: dict[str, Any] = field(default_factory=dict)
    #: names bound some other way: only the real ``__init__`` knows their value.
    opaque: set[str] = field(default_factory=set)
    #: a ``from x import *`` whose names could not be read: any name may be bound.
    unknown_star: bool = False
    #: every statement only binds names (no call, loop or other side effect).
    pure: bool = True


def read_bindings(package: str, source: str, site: Path | None = None, depth: int = 0) -> Bindings:
    """What the ``__init__`` of ``package`` (its ``source``) binds at module level, in
    statement order: a later binding of a name replaces an earlier one, as it would.
    ``site`` (the directory holding the top package) is where ``from x import *`` is read."""
    found = Bindings()
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom):
            base = _absolute(package, node.module, node.level)
            for alias in node.names:
                if alias.name == "*":
                    star = _star_names(base, site, depth)
                    if star is None:
                        found.unknown_star = True
                    for name in star or ():
                        _bind(found, name, (base, name))
                elif base == package:  # from . import sub: the submodule
                    _bind(found, alias.asname or alias.name, (f"{base}.{alias.name}", None))
                else:
                    _bind(found, alias.asname or alias.name, (base, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.partition(".")[0]
                _bind(found, alias.asname or top, (alias.name if alias.asname else top, None))
        elif _is_docstring(node) or _is_type_checking_block(node):
            continue  # binds nothing at run time
        elif (target := _assigned_name(node)) is not None:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if isinstance(node, ast.AnnAssign):
                found.opaque.add("__annotations__")
            if isinstance(value, ast.Name) and value.id in found.imported:  # an alias
                _bind(found, target, found.imported[value.id])
            elif isinstance(value, ast.Name) and value.id in found.literals:
                _bind_literal(found, target, found.literals[value.id])
            elif value is not None and _is_literal(value):
                _bind_literal(found, target, ast.literal_eval(value))
            else:
                # A type alias such as ``X: TypeAlias = Parsed[object]`` is deferred with the
                # rest (the real __init__ computes it on first use); a call is a side effect.
                _bind_opaque(found, {target})
                found.pure = found.pure and value is not None and _is_alias_expression(value)
        else:
            _bind_opaque(found, _names_bound_by(node))
            found.pure = False
    return found


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)


def _is_type_checking_block(node: ast.stmt) -> bool:
    """``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``) with no ``else``."""
    if not isinstance(node, ast.If) or node.orelse:
        return False
    test = node.test
    name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
    return name == "TYPE_CHECKING"


#: What a type alias's value may be built of: names, attributes, subscripts and constants.
_ALIAS_NODES = (
    ast.Name,
    ast.Attribute,
    ast.Subscript,
    ast.Constant,
    ast.Tuple,
    ast.BinOp,
    ast.BitOr,
    ast.Load,
)


def _is_alias_expression(node: ast.expr) -> bool:
    """``Name``, ``a.b``, ``Generic[X, Y]``, ``X | Y``: no call, so nothing but a lookup."""
    return all(isinstance(n, _ALIAS_NODES) for n in ast.walk(node)) and not any(
        isinstance(n, ast.BinOp) and not isinstance(n.op, ast.BitOr) for n in ast.walk(node)
    )


def _assigned_name(node: ast.stmt) -> str | None:
    """The one name ``name = value`` or ``name: annotation = value`` assigns, else None."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
    elif isinstance(node, ast.AnnAssign) and node.value is not None and node.simple:
        target = node.target
    else:
        return None
    return target.id if isinstance(target, ast.Name) else None


def _bind_literal(found: Bindings, name: str, value: Any) -> None:
    found.imported.pop(name, None)
    found.opaque.discard(name)
    found.literals[name] = value


def _bind_opaque(found: Bindings, names: set[str]) -> None:
    for name in names:
        found.imported.pop(name, None)
        found.literals.pop(name, None)
        found.opaque.add(name)


def _bind(found: Bindings, name: str, source: tuple[str, str | None]) -> None:
    found.literals.pop(name, None)
    found.opaque.discard(name)
    found.imported[name] = source


def _absolute(package: str, module: str | None, level: int) -> str:
    if level == 0:
        return module or ""
    base = package.rsplit(".", level - 1)[0] if level > 1 else package
    return f"{base}.{module}" if module else base


def _is_literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _names_bound_by(node: ast.stmt) -> set[str]:
    """Every name a statement can bind in its module's namespace (nested scopes excluded)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    names: set[str] = set()
    stack: list[ast.AST] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, ast.Name) and isinstance(current.ctx, (ast.Store, ast.Del)):
            names.add(current.id)
        elif isinstance(current, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name.partition(".")[0]) for a in current.names)
        elif isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(current.name)
            continue
        elif isinstance(current, (ast.Lambda, ast.comprehension)):
            continue
        elif isinstance(current, ast.alias):
            continue
        stack.extend(ast.iter_child_nodes(current))
    names.discard("*")
    return names


def _star_names(module: str, site: Path | None, depth: int) -> set[str] | None:
    """The names ``from module import *`` binds, read from the module's source under
    ``site`` without importing it; None when they cannot be read (any name may be bound)."""
    if site is None or depth >= _STAR_DEPTH:
        return None
    base = site.joinpath(*module.split("."))
    for path, package in (
        (base / "__init__.py", module),
        (base.with_name(base.name + ".py"), module.rpartition(".")[0]),
    ):
        if not path.is_file():
            continue
        try:
            bindings = read_bindings(package, path.read_text(encoding="utf-8"), site, depth + 1)
        except (OSError, SyntaxError, ValueError):
            return None
        declared = bindings.literals.get("__all__")
        if isinstance(declared, (list, tuple)) and all(isinstance(n, str) for n in declared):
            return set(declared)
        if bindings.unknown_star or "__all__" in bindings.opaque:
            return None
        every = {*bindings.imported, *bindings.literals, *bindings.opaque}
        return {n for n in every if not n.startswith("_")}
    return None
