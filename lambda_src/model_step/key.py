"""The business key of an event: what makes two deliveries "the same" request."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jmespath

from .errors import MissingIdempotencyKeyError


def extract_business_key(detail: Mapping[str, Any], expression: str) -> list[Any]:
    """Evaluate ``expression`` (JMESPath) over the event detail and return the key as a list.

    A scalar result becomes a one-element list; a multi-select list is returned as is; a
    multi-select hash becomes the list of its values in expression order.

    Raises ``MissingIdempotencyKeyError`` when the result is missing or ANY part is null,
    an empty or blank string, or an empty collection. Powertools only rejects a key whose
    parts are ALL null, yet ``[null, "7"]`` or ``["", ""]`` would still merge unrelated
    events onto one record, so every part is checked here.
    """
    value = jmespath.search(expression, dict(detail))
    if isinstance(value, dict):
        parts = list(value.values())
    elif isinstance(value, list):
        parts = value
    else:
        parts = [value]
    if not parts or any(_is_empty(part) for part in parts):
        raise MissingIdempotencyKeyError(
            f"business key {expression!r} has a missing or empty part: {parts!r}"
        )
    return parts


def _is_empty(part: Any) -> bool:
    if part is None:
        return True
    if isinstance(part, str):
        return not part.strip()
    if isinstance(part, (list, dict)):
        return not part
    # Numbers and booleans are real values, including 0 and False.
    return False
