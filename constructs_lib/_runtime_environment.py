"""The runtime's environment names, loaded from ``lambda_src/model_step/environment.py``.

The file is loaded by its path, not imported as ``model_step.environment``: importing the
``model_step`` package runs its ``__init__``, which imports boto3 and Powertools, and a CDK
app needs neither. The file itself is standard library only.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from ._paths import lambda_src_root

#: The name the loaded file is registered under in ``sys.modules`` (dataclasses look their
#: module up there). Not ``model_step.environment``, which would shadow the real package's.
_MODULE_NAME = "constructs_lib._model_step_environment"


def _load() -> ModuleType:
    loaded = sys.modules.get(_MODULE_NAME)
    if loaded is not None:
        return loaded
    path = lambda_src_root() / "model_step" / "environment.py"
    spec = importlib.util.spec_from_file_location(_MODULE_NAME, path)
    if spec is None or spec.loader is None:  # pragma: no cover - a broken installation
        raise ImportError(f"cannot load the runtime's environment names from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODULE_NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_MODULE_NAME]
        raise
    return module


#: ``lambda_src/model_step/environment.py``: ``VARIABLES``, ``RESERVED_NAMES`` and one
#: constant per name (``runtime_environment.MAX_ATTEMPTS == "MAX_ATTEMPTS"``).
runtime_environment = _load()
