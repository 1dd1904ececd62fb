"""Docker-free bundling of the Lambda assets, and the hash-pinned dependency locks it installs.

- :mod:`.local_pip`: :func:`python_lambda_code` and :class:`LocalPipBundling`, the asset
  built with pip on this machine, its hash and its bytecode;
- :mod:`.bytecode`: the CPython of the Lambda's version that compiles the shipped ``.pyc``;
- :mod:`.installed_locks`: each lock installed and compiled once a process, for every bundle;
- :mod:`.dependency_lock`: the locks: read, checked and combined;
- :mod:`.lock_requirements`: writes them (``python -m constructs_lib.lock_requirements``);
- :mod:`.synth_resolution`: a custom handler's unlocked requirements, resolved at synth;
- :mod:`.pip_failure`: which failure a failed pip run was;
- :mod:`.errors`: one :class:`LocalBundlingError` subclass for each cause a caller may act on.

The package exports what ``constructs_lib.bundling`` exported when it was one module
(``from constructs_lib.bundling import python_lambda_code`` still works). Names are
imported on first use (PEP 562): the lock command and the lock modules are standard
library and ``packaging`` only, and importing them must not start jsii.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from .._paths import lambda_src_root

_EXPORTS = {
    "RUNTIME_PROVIDED": ".dependency_lock",
    "BytecodeCompiler": ".bytecode",
    "LocalBundlingError": ".errors",
    "LocalPipBundling": ".local_pip",
    "find_bytecode_python": ".bytecode",
    "python_lambda_code": ".local_pip",
}

__all__ = [
    "RUNTIME_PROVIDED",
    "BytecodeCompiler",
    "LocalBundlingError",
    "LocalPipBundling",
    "find_bytecode_python",
    "lambda_src_root",
    "python_lambda_code",
]

if TYPE_CHECKING:
    from .bytecode import BytecodeCompiler, find_bytecode_python
    from .dependency_lock import RUNTIME_PROVIDED
    from .errors import LocalBundlingError
    from .local_pip import LocalPipBundling, python_lambda_code


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
