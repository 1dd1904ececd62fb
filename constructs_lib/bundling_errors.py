"""Where the bundling errors were imported from before they moved to
:mod:`constructs_lib.bundling.errors` (issue 35); docs/bundling.md named this path, so it
keeps working. New code imports them from :mod:`constructs_lib.bundling.errors`.
"""

from __future__ import annotations

from .bundling.errors import (
    LocalBundlingError,
    PackageIndexUnreachableError,
    RequirementsConflictError,
    RequirementsNotLockedError,
)

__all__ = [
    "LocalBundlingError",
    "PackageIndexUnreachableError",
    "RequirementsConflictError",
    "RequirementsNotLockedError",
]
