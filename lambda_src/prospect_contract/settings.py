"""Reading a Prospect function's environment: one way to read a setting, one error.

Each function's ``Settings.from_env`` lists its own variables; these read them, so a bad
value fails the same way everywhere: ``ConfigurationError`` naming the variable, the value
and what it must be. Standard library only.

Example::

    table = required("FAILURES_TABLE_NAME")
    retention_days = positive_int("FAILURE_RETENTION_DAYS", 90)
"""

from __future__ import annotations

import os

from .errors import ConfigurationError

#: The splitter's idempotency record prefix (Powertools ``key_prefix``) on the shared
#: idempotency table: its record ids are ``<prefix>#<hash>``, and the stack grants it those
#: only (``dynamodb:LeadingKeys``), never the classify steps' records.
SPLIT_RECORD_PREFIX = "prospect-splitter.split_upload"


def required(name: str) -> str:
    """The variable's value, stripped; raises when it is unset or blank."""
    value = os.environ.get(name, "").strip()
    if not value:
        raise ConfigurationError(f"environment variable {name} is required")
    return value


def positive_int(name: str, default: int, maximum: int | None = None) -> int:
    """The variable as an integer in ``1..maximum``; ``default`` when unset or blank."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigurationError(f"{name} must be an integer, got {raw!r}") from exc
    if value <= 0:
        raise ConfigurationError(f"{name} must be positive, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigurationError(f"{name} must be at most {maximum}, got {value}")
    return value
