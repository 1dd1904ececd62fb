"""Lazy package exports (PEP 562): the one ``__getattr__`` of the packages that import a
public name only on its first use (``constructs_lib``, ``constructs_lib.testing``,
``constructs_lib.bundling``), so importing a package loads none of its heavy modules."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: MutableMapping[str, Any]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``exports`` maps each public name to the
    relative module that defines it. A name is imported on first use and kept in
    ``namespace`` (the package's ``globals()``), so later lookups never come back here; any
    other name raises ``AttributeError``."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name], package), name)
        namespace[name] = value
        return value

    return __getattr__
