"""The runtime's standard-library modules the constructs read: its environment names
(``lambda_src/model_step/environment.py``), its key-lifetime rule (``lifetime.py``) and the
batch path's times (``batch_limits.py``).

Each file is loaded by its path, not imported as ``model_step.<name>``: importing the
``model_step`` package runs its ``__init__``, which imports boto3 and Powertools, and a CDK
app needs neither. The files themselves are standard library only.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from ._paths import lambda_src_root


def _load(name: str) -> ModuleType:
    """``lambda_src/model_step/<name>.py``, registered in ``sys.modules`` (dataclasses look
    their module up there) as ``constructs_lib._model_step_<name>``: never as
    ``model_step.<name>``, which would shadow the real package's."""
    module_name = f"constructs_lib._model_step_{name}"
    loaded = sys.modules.get(module_name)
    if loaded is not None:
        return loaded
    path = lambda_src_root() / "model_step" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - a broken installation
        raise ImportError(f"cannot load the runtime's {name} module from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


#: ``lambda_src/model_step/environment.py``: ``VARIABLES``, ``RESERVED_NAMES`` and one
#: constant per name (``runtime_environment.MAX_ATTEMPTS == "MAX_ATTEMPTS"``).
runtime_environment = _load("environment")
#: ``lambda_src/model_step/lifetime.py``: ``minimum_key_lifetime`` and its constants.
runtime_lifetime = _load("lifetime")
#: ``lambda_src/model_step/batch_limits.py``: the batch path's times and sizes.
runtime_batch_limits = _load("batch_limits")
