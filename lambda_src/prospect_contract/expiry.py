"""Expired items are absent, for every reader (issue 34).

DynamoDB deletes an item whose TTL attribute is in the past lazily, within days, and until
then a read returns it. The pipeline's items that hold personal data (``RowsTable``'s row
values, ``FailuresTable``'s failures, ``UploadsTable``'s uploads) expire on purpose, so a
reader treats an item past its ``expires_at`` as if it were gone, as the model step's
attempt budget and batch store do with their ``expiration``. Standard library only.

Example::

    if item is None or expired(item, time.time()):
        return None  # the same answer as a deleted item
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The TTL attribute of the pipeline's data tables.
EXPIRES_AT = "expires_at"


def expired(item: Mapping[str, Any], now: float, attribute: str = EXPIRES_AT) -> bool:
    """True when ``item``'s TTL ``attribute`` (epoch seconds; a low-level ``{"N": ...}`` or a
    resource-level number) is before ``now``. An item without one, or with one that is not a
    number, never expires (DynamoDB's TTL ignores it too)."""
    value = item.get(attribute)
    if isinstance(value, Mapping):
        value = value.get("N")
    if value is None or isinstance(value, bool):
        return False
    try:
        return float(value) < now
    except (TypeError, ValueError):
        return False
