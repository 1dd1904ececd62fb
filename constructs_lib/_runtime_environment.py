"""The runtime's standard-library modules the constructs read: its environment names
(``lambda_src/model_step/environment.py``), its key-lifetime rule (``lifetime.py``) and the
batch path's times (``batch_limits.py``).

Each file is loaded by its path (:mod:`._runtime_modules`), not imported as
``model_step.<name>``: importing the ``model_step`` package runs its ``__init__``, which
imports boto3 and Powertools, and a CDK app needs neither. The files themselves are standard
library only.
"""

from __future__ import annotations

from ._runtime_modules import load_runtime_file

#: ``lambda_src/model_step/environment.py``: ``VARIABLES``, ``RESERVED_NAMES`` and one
#: constant per name (``runtime_environment.MAX_ATTEMPTS == "MAX_ATTEMPTS"``).
runtime_environment = load_runtime_file(
    "model_step/environment.py", "constructs_lib._model_step_environment"
)
#: ``lambda_src/model_step/lifetime.py``: ``minimum_key_lifetime`` and its constants.
runtime_lifetime = load_runtime_file(
    "model_step/lifetime.py", "constructs_lib._model_step_lifetime"
)
#: ``lambda_src/model_step/batch_limits.py``: the batch path's times and sizes.
runtime_batch_limits = load_runtime_file(
    "model_step/batch_limits.py", "constructs_lib._model_step_batch_limits"
)
