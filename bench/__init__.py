"""Benchmarks of the idempotent model step and its baselines. See bench/README.md.

This machine's environment sets ``PYTHONDONTWRITEBYTECODE=1``, so every benchmark process would
recompile anthropic, pydantic, boto3 and moto from source on each run (seconds of pure overhead,
not part of any figure). Bytecode is cached under ``.bench/pycache`` (gitignored) instead, so
nothing is written into the source tree or the virtualenv, unless the process already has a
cache of its own (``PYTHONPYCACHEPREFIX``; ``make test`` sets ``.pytest_cache/pycache``). Each
benchmark's subprocesses use the same cache as the process (:func:`child_pycache_prefix`), so
the bytecode its own imports wrote is read, not compiled again. The cold-start benchmark
controls the bytecode cache of its own subprocesses explicitly.
"""

from __future__ import annotations

import sys
from pathlib import Path

PYCACHE = Path(__file__).resolve().parents[1] / ".bench" / "pycache"

if sys.pycache_prefix is None:
    sys.pycache_prefix = str(PYCACHE)
    sys.dont_write_bytecode = False


def child_pycache_prefix() -> str:
    """``PYTHONPYCACHEPREFIX`` for a benchmark's subprocess: this process's bytecode cache."""
    return sys.pycache_prefix or str(PYCACHE)
