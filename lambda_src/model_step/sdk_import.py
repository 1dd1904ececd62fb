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

import importlib
import os
import sys
import threading
from collections.abc import Sequence
from importlib.abc import Loader
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path
from types import ModuleType
from typing import Any

from .sdk_bindings import Bindings, read_bindings

#: The SDK's top package; it and its sub-packages are imported lazily.
SDK = "anthropic"
#: The SDK's ``__init__`` configures its logging from this (a call, not a name to defer).
SDK_LOG_VARIABLE = "ANTHROPIC_LOG"
_LOCK = threading.RLock()


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


def sdk() -> ModuleType:
    """The ``anthropic`` module, its packages loaded lazily unless the SDK was already
    imported: what the realtime path imports the SDK with (see :func:`load_sdk_lazily`)."""
    load_sdk_lazily()
    import anthropic

    return anthropic


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


#: What each deferred package's ``__init__`` binds (:func:`.sdk_bindings.read_bindings`).
_BINDINGS: dict[str, Bindings] = {}


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
