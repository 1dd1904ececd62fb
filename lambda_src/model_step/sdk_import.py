"""Load the model SDK so that a realtime call runs only the SDK modules it uses.

``import anthropic`` executes the SDK's package ``__init__`` files, and they import far more
than one Messages call needs: ``anthropic.types`` imports every type (the beta ones through
``types.shared.error_details``), ``anthropic/__init__`` the Vertex, Bedrock, Foundry, AWS,
Google Cloud and tool-runner clients, ``anthropic.lib._tracing`` its tool-runner spans. From
the shipped bytecode that is about 0.9 s of a cold start, most of it modules a realtime step
never touches.

:func:`load_sdk_lazily` (called before every ``import anthropic`` of the realtime path)
puts a finder in front of ``sys.meta_path`` that imports the SDK's packages as
:class:`LazyPackage` modules instead of executing their ``__init__``: each has the real
``__spec__``, ``__loader__``, ``__path__`` and ``__file__``, so its submodules import as
usual, and a PEP 562 ``__getattr__`` that resolves a name the way the real ``__init__``
binds it, by importing the module the ``__init__`` takes it from. What an ``__init__`` binds
is read from the installed SDK itself (its source, parsed with :mod:`ast` when the package
is imported, about 10 ms for the largest), never written down here, so an SDK upgrade cannot
silently break the map. A name the parse cannot place (bound by anything but an import, a
literal or an alias of either) executes the real ``__init__`` into the same module, which
from then on is an ordinary module: nothing is ever missing, only deferred. The classes,
exceptions, retries and requests are the SDK's own.

Only packages whose ``__init__`` does nothing but bind names (imports, literals, aliases,
``if TYPE_CHECKING:`` blocks) are deferred, so no side effect is skipped; the top package
``anthropic`` is the exception: its ``__init__`` also configures the SDK's logging from
``ANTHROPIC_LOG`` (when that is set, nothing is deferred) and renames its exports'
``__module__`` to ``anthropic`` (cosmetic: tracebacks then name ``anthropic._exceptions``).

It does nothing when the SDK is already imported (as in the in-process test suite), or when
the SDK ships no source to read.
"""

from __future__ import annotations

import ast
import importlib
import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.abc import Loader
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path
from types import ModuleType
from typing import Any

#: The SDK's top package; it and its sub-packages are imported lazily.
SDK = "anthropic"
#: The SDK's ``__init__`` configures its logging from this (a call, not a name to defer).
SDK_LOG_VARIABLE = "ANTHROPIC_LOG"
_LOCK = threading.RLock()
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


class LazyPackage(ModuleType):
    """A package whose ``__init__`` has not run: its names resolve on first access."""

    def __getattr__(self, name: str) -> Any:
        return _resolve(self, name)

    def __dir__(self) -> list[str]:
        bindings = _BINDINGS.get(self.__name__)
        if bindings is None or bindings.unknown_star or bindings.opaque:
            _execute_init(self)
            return sorted(self.__dict__)
        return sorted({*self.__dict__, *bindings.imported, *bindings.literals})


def load_sdk_lazily() -> bool:
    """Import the SDK's packages lazily from now on, unless the SDK is already imported (or
    ``ANTHROPIC_LOG`` is set); return whether the finder is in place. Cheap when repeated."""
    with _LOCK:
        if _FINDER in sys.meta_path:
            return True
        if SDK in sys.modules or os.environ.get(SDK_LOG_VARIABLE):
            return False
        sys.meta_path.insert(0, _FINDER)
    return True


def is_lazy(module: ModuleType) -> bool:
    """True while ``module``'s ``__init__`` has not run."""
    return isinstance(module, LazyPackage)


class LazyPackageFinder:
    """Finds the packages of ``top`` (the SDK) as the path finder does, and defers the
    ``__init__`` of ``top`` and of every sub-package whose ``__init__`` only binds names."""

    def __init__(self, top: str) -> None:
        self.top = top

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name != self.top and not name.startswith(self.top + "."):
            return None
        spec = PathFinder.find_spec(name, path, target)
        if spec is None or spec.submodule_search_locations is None or spec.loader is None:
            return spec
        source = _source(spec)
        if source is None:
            return spec
        try:
            bindings = read_bindings(name, source, _site(name, spec))
        except (SyntaxError, ValueError, RecursionError):
            return spec
        if not bindings.pure and name != self.top:
            return spec
        _BINDINGS[name] = bindings
        spec.loader = _DeferringLoader(spec.loader)
        return spec


class _DeferringLoader(Loader):
    """Creates the :class:`LazyPackage`; its ``exec_module`` (the import's) runs nothing and
    puts the real loader back, which later runs the ``__init__`` if a name needs it."""

    def __init__(self, real: Loader) -> None:
        self.real = real

    def create_module(self, spec: ModuleSpec) -> None:
        return None  # the default module; it becomes lazy once the import has set it up

    def exec_module(self, module: ModuleType) -> None:
        spec = module.__spec__
        if spec is not None:
            spec.loader = self.real
        module.__loader__ = self.real
        _make(module, LazyPackage)


_FINDER = LazyPackageFinder(SDK)


def _source(spec: ModuleSpec) -> str | None:
    origin = spec.origin
    if not origin or not origin.endswith(".py"):
        return None
    try:
        return Path(origin).read_text(encoding="utf-8")
    except OSError:
        return None


# -- reading an __init__ ---------------------------------------------------------------------
_BINDINGS: dict[str, Bindings] = {}


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


def _site(name: str, spec: ModuleSpec) -> Path | None:
    """The directory holding the top package of the package ``name``."""
    locations = list(spec.submodule_search_locations or ())
    if not locations:
        return None
    site = Path(locations[0])
    for _ in range(name.count(".") + 1):
        site = site.parent
    return site


# -- resolving a name ------------------------------------------------------------------------
def _resolve(module: LazyPackage, name: str) -> Any:
    bindings = _BINDINGS.get(module.__name__)
    value: Any
    if bindings is not None and name in bindings.imported:
        source, attribute = bindings.imported[name]
        value = _import_from(module, source, attribute)
    elif bindings is not None and name in bindings.literals:
        value = bindings.literals[name]
    elif (
        bindings is not None
        and not bindings.unknown_star
        and name not in bindings.opaque
        and not _is_dunder(name)
        and _is_submodule(module, name)
    ):
        # Not bound by the __init__, so the name is the submodule, as after a real import.
        value = importlib.import_module(f"{module.__name__}.{name}")
    elif _is_dunder(name) and name != "__all__" and not _may_bind(bindings, name):
        # Probes such as __wrapped__: absent from the real module too. (Without __all__,
        # ``from pkg import *`` reads the module's namespace: that needs the real __init__.)
        raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}", name=name)
    else:
        _execute_init(module)
        return ModuleType.__getattribute__(module, name)
    ModuleType.__setattr__(module, name, value)
    return value


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _may_bind(bindings: Bindings | None, name: str) -> bool:
    """Whether the real ``__init__`` may bind ``name`` in a way the parse could not place."""
    return bindings is None or bindings.unknown_star or name in bindings.opaque


def _import_from(module: ModuleType, source: str, attribute: str | None) -> Any:
    """``from source import attribute`` (``import source`` when attribute is None)."""
    if attribute is None:
        return importlib.import_module(source)
    imported = importlib.import_module(source)
    if imported is module:
        return ModuleType.__getattribute__(module, attribute)
    try:
        return getattr(imported, attribute)
    except AttributeError:
        return importlib.import_module(f"{source}.{attribute}")


def _is_submodule(module: ModuleType, name: str) -> bool:
    full = f"{module.__name__}.{name}"
    if full in sys.modules:
        return True
    return PathFinder.find_spec(full, list(getattr(module, "__path__", ()))) is not None


def _execute_init(module: ModuleType) -> None:
    """Run the real ``__init__`` into ``module``, which from then on is an ordinary module."""
    with _LOCK:
        if not isinstance(module, LazyPackage):
            return
        spec = module.__spec__
        if spec is None or spec.loader is None:
            raise ImportError(f"no loader for lazy package {module.__name__}", name=module.__name__)
        _make(module, ModuleType)  # the __init__ runs as it would in a real import
        try:
            spec.loader.exec_module(module)
        except BaseException:
            _make(module, LazyPackage)  # a later access tries again
            raise


def _make(module: ModuleType, kind: type[ModuleType]) -> None:
    module.__class__ = kind
