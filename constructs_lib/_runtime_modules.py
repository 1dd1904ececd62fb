"""Runtime modules the constructs read, loaded by their path from ``lambda_src/``.

A file is loaded by its path, not imported as ``model_step.<name>``: importing the
``model_step`` package runs its ``__init__``, which imports boto3 and Powertools, and a CDK app
needs neither. Each file loaded this way is standard library only.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from ._paths import lambda_src_root


def load_runtime_file(relative_path: str, module_name: str) -> ModuleType:
    """``lambda_src/<relative_path>`` as a module registered as ``module_name`` (dataclasses
    look their module up in ``sys.modules``), loaded once per process. The name is never the
    runtime's own (``model_step.x``), which it would shadow."""
    loaded = sys.modules.get(module_name)
    if loaded is not None:
        return loaded
    path = lambda_src_root() / relative_path
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - a broken installation
        raise ImportError(f"cannot load the runtime's {relative_path} from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


#: ``lambda_src/model_step/model_catalogue.py``: ``CATALOGUE``, ``ModelSpec``, ``lookup``...
model_catalogue = load_runtime_file(
    "model_step/model_catalogue.py", "constructs_lib._model_step_model_catalogue"
)
