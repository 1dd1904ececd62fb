"""Loading handlers from their template handler strings, in a fresh module namespace.

A Lambda execution environment starts by importing the handler module, and keeps module-level
state (clients, settings, caches) for its lifetime. Each local run imports the Lambda
packages afresh: module-level state of an earlier run in the same process (a model client
bound to an old local model port, a cached table name) never leaks into this one, and the
modules another caller imported (tests, for example) are put back untouched afterwards.

Limit: all functions and all concurrent invocations of one run share these modules, where
Lambda would give each concurrent invocation its own environment.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from .errors import AssemblyError


def lambda_packages(code_root: Path) -> frozenset[str]:
    """Top-level package names under ``code_root`` (directories with ``__init__.py``)."""
    return frozenset(p.parent.name for p in code_root.glob("*/__init__.py"))


class ExecutionEnvironment:
    """Context manager: while open, the packages of ``code_root`` are freshly imported."""

    def __init__(self, code_root: Path) -> None:
        self.code_root = code_root
        self._packages = lambda_packages(code_root)
        self._saved: dict[str, ModuleType] = {}
        self._path_added = False

    def _owned(self, module_name: str) -> bool:
        return module_name.split(".", 1)[0] in self._packages

    def __enter__(self) -> ExecutionEnvironment:
        self._saved = {name: mod for name, mod in sys.modules.items() if self._owned(name)}
        for name in self._saved:
            del sys.modules[name]
        root = str(self.code_root)
        if root not in sys.path:
            sys.path.insert(0, root)
            self._path_added = True
        importlib.invalidate_caches()
        return self

    def __exit__(self, *exc_info: object) -> None:
        for name in [name for name in sys.modules if self._owned(name)]:
            del sys.modules[name]
        sys.modules.update(self._saved)
        if self._path_added:
            sys.path.remove(str(self.code_root))
            self._path_added = False

    def load(self, handler: str, instance: str | None = None) -> Callable[[Any, Any], Any]:
        """Import ``module.path.function`` (a template ``Handler``) and return the function.

        With ``instance``, the handler's module is executed again as a module of its own
        (its package and the modules it imports are shared), so a second function with the
        same handler gets its own module-level state, as its own Lambda container would.
        """
        module_name, _, attribute = handler.rpartition(".")
        if module_name.split(".", 1)[0] not in self._packages:
            raise AssemblyError(f"handler {handler!r} is not a package under {self.code_root}")
        module = (
            importlib.import_module(module_name)
            if instance is None
            else self._instance(module_name, instance)
        )
        function = getattr(module, attribute, None)
        if not callable(function):
            raise AssemblyError(f"handler {handler!r}: {module_name} has no function {attribute}")
        return cast(Callable[[Any, Any], Any], function)

    def _instance(self, module_name: str, instance: str) -> ModuleType:
        importlib.import_module(module_name)  # its package and dependencies, shared
        found = importlib.util.find_spec(module_name)
        # Registered under a name of its own (a dataclass or pickle looks its module up in
        # sys.modules); in the same package, so its relative imports are the shared modules.
        name = f"{module_name}[{instance}]"
        spec = found and found.origin and importlib.util.spec_from_file_location(name, found.origin)
        if not spec or spec.loader is None:  # pragma: no cover - it was just imported
            raise AssemblyError(f"cannot load {module_name} again for {instance}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    def module(self, name: str) -> ModuleType:
        """Import a module of the fresh namespace (e.g. the viewer's ``local_server``)."""
        return importlib.import_module(name)
