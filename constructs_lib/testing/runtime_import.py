"""Make ``import model_step`` work where only the wheel is installed.

The runtime is Lambda code. The wheel ships it as package data under ``lambda_src/``, the
directory bundling copies into every model step's asset, so it is not a top-level package
of the environment a CDK app runs in. That is on purpose: installing it as ``model_step``
would put Lambda-only code (and a generic name that may clash with a user's own package)
on every CDK app's import path. A test that needs it asks for it, and then imports the very
files the asset is built from.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from constructs_lib._paths import lambda_src_root

__all__ = ["RUNTIME_PACKAGE", "RuntimeImportError", "runtime_on_path"]

#: The runtime's import name.
RUNTIME_PACKAGE = "model_step"
#: What the runtime imports that the library's own dependencies do not bring.
RUNTIME_DEPENDENCIES = {
    "anthropic": "anthropic",
    "aws_lambda_powertools": "aws-lambda-powertools",
    "boto3": "boto3",
}
LOCAL_EXTRA_HINT = "pip install 'idempotent-model-step[local]'"


class RuntimeImportError(ImportError):
    """The runtime cannot be imported here; the message says what to install or remove."""


class _RuntimeFinder(importlib.abc.MetaPathFinder):
    """Finds ``model_step`` (and, through its ``__path__``, its modules) in the wheel only.

    Only that one name: the other packages beside it (the Prospect Uploader's handlers)
    stay out of the importer's way.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != RUNTIME_PACKAGE:
            return None
        return importlib.machinery.PathFinder.find_spec(fullname, [str(self.root)])


def _installed_finder() -> _RuntimeFinder | None:
    return next((f for f in sys.meta_path if isinstance(f, _RuntimeFinder)), None)


def runtime_on_path() -> Path:
    """Let ``import model_step`` find the runtime shipped with this library; idempotent.

    Call it before importing a custom handler (which imports ``model_step``), e.g. at the top
    of a test module or in ``conftest.py``. The runtime needs anthropic,
    aws-lambda-powertools and boto3, which the ``local`` extra installs.

    :returns: the runtime's package directory.
    :raises RuntimeImportError: a dependency is missing, or another ``model_step`` was
        imported already.
    """
    root = lambda_src_root()
    package = root / RUNTIME_PACKAGE
    if not (package / "__init__.py").is_file():
        raise RuntimeImportError(f"the runtime is missing from this installation: {package}")
    missing = [dist for mod, dist in RUNTIME_DEPENDENCIES.items() if not _importable(mod)]
    if missing:
        raise RuntimeImportError(
            f"the model step runtime needs {', '.join(missing)}, which the library's 'local' "
            f"extra installs: {LOCAL_EXTRA_HINT}"
        )
    loaded = sys.modules.get(RUNTIME_PACKAGE)
    if loaded is not None:
        origin = Path(getattr(loaded, "__file__", "") or "").resolve().parent
        if origin != package.resolve():
            raise RuntimeImportError(
                f"another {RUNTIME_PACKAGE!r} is imported already ({origin}); the library's "
                f"runtime is {package}. Rename your package: the runtime is bundled beside it."
            )
    if _installed_finder() is None:
        sys.meta_path.insert(0, _RuntimeFinder(root))
    return package


def _importable(module: str) -> bool:
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
