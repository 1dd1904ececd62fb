"""Why local bundling could not build a Lambda asset: one class for each cause a caller may act on.

Every class is a :class:`LocalBundlingError`, so ``except LocalBundlingError`` still catches
them all. Stdlib only: the lock command imports it without starting jsii.
"""

from __future__ import annotations

__all__ = [
    "LocalBundlingError",
    "PackageIndexUnreachableError",
    "RequirementsConflictError",
    "RequirementsNotLockedError",
]


class LocalBundlingError(RuntimeError):
    """Local bundling could not build the asset; the message says why and what to do."""


class RequirementsConflictError(LocalBundlingError):
    """Two requirements files (yours and the runtime's lock, say) want one package at
    different versions; the message names the package, each side's file and version."""


class RequirementsNotLockedError(LocalBundlingError):
    """A requirements file has no current hash-pinned lock for the function's target."""


class PackageIndexUnreachableError(LocalBundlingError):
    """pip could not connect to the package index, so it could fetch no wheels."""
