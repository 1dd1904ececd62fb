"""The runtime's environment names, loaded from ``lambda_src/model_step/environment.py``.

The file is loaded by its path (:mod:`._runtime_modules`), not imported as
``model_step.environment``: importing the ``model_step`` package runs its ``__init__``, which
imports boto3 and Powertools, and a CDK app needs neither. The file itself is standard library
only.
"""

from __future__ import annotations

from ._runtime_modules import load_runtime_file

#: The name the loaded file is registered under in ``sys.modules`` (dataclasses look their
#: module up there). Not ``model_step.environment``, which would shadow the real package's.
_MODULE_NAME = "constructs_lib._model_step_environment"

#: ``lambda_src/model_step/environment.py``: ``VARIABLES``, ``RESERVED_NAMES`` and one
#: constant per name (``runtime_environment.MAX_ATTEMPTS == "MAX_ATTEMPTS"``).
runtime_environment = load_runtime_file("model_step/environment.py", _MODULE_NAME)
