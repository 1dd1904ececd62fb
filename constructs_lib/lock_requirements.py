"""The lock command: ``python -m constructs_lib.lock_requirements <requirements.txt>``.

Its code is in :mod:`constructs_lib.bundling.lock_requirements`. The command keeps this
name, because users run it, the locks' headers say how to refresh them with it, and every
error that asks for a lock names it (:data:`~constructs_lib.bundling.dependency_lock.LOCK_COMMAND`).
"""

from __future__ import annotations

import sys

from .bundling.lock_requirements import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
