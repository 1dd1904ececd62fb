"""The business key of an event and the record key built from it.

Two deliveries are "the same request" when their record keys are equal. The record key is the
business key (``IDEMPOTENCY_KEY`` over the detail) plus everything that shapes the request
(prompt version, model, the request fingerprint) and the operator's retry markers (a
``replay_generation`` in the detail, or the dead-letter id of a message an operator moved back
from the DLQ). :func:`record_key` is the one function that builds it.

Canonical form (see ``docs/runtime.md``, "Key canonicalisation"): before anything is hashed,
numbers are compared by value (``1``, ``1.0``, ``Decimal("1")`` and ``1e0`` are one key part,
``1e30`` and ``10**30`` another, ``1.5`` a third) and strings are in Unicode NFC (a precomposed
"é" and "e" + combining accent are one spelling). Booleans stay booleans: ``true`` is not
``1``. Whitespace is significant: ``" 7"`` and ``"7"`` are two key parts.
"""

from __future__ import annotations

import decimal
import math
import re
import unicodedata
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

import jmespath

from .errors import InvalidReplayGenerationError, MissingIdempotencyKeyError

#: Reserved detail field of an operator's retry; joins the key, never the payload validation.
REPLAY_GENERATION_FIELD = "replay_generation"
#: Top-level member the runtime adds to each event it dead-letters (see :mod:`.dead_letter`).
DEAD_LETTER_FIELD = "dead_letter"
_DEAD_LETTER_ID = re.compile(r"^[0-9a-f]{64}$")
#: Python's default limit on the digits of an int read from or written as text (``json.loads``
#: refuses longer integer literals): a larger integral value stays a float.
_MAX_INT_DIGITS = 4300


class RecordKey(TypedDict):
    """What one idempotency record (and its attempt budget) is keyed on."""

    business_key: list[Any]
    prompt_version: str
    model_id: str
    fingerprint: str
    replay_generation: NotRequired[int]
    #: The dead-letter id of the DLQ message an operator moved back: a new record with a
    #: budget of one request.
    redrive_of: NotRequired[str]


def canonical(value: Any) -> Any:
    """``value`` in canonical form: integral numbers as the exact ``int`` (a float through its
    shortest repr, so ``1e30`` is ``10**30``), other numbers as ``float``, strings (and
    mapping keys) in NFC, recursively through lists and mappings."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float | decimal.Decimal):
        return _canonical_number(value)
    if isinstance(value, Mapping):
        return {canonical(name): canonical(item) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return [canonical(item) for item in value]
    return value


def json_number(text: str) -> int | float:
    """``parse_float`` for the JSON the step reads itself (SQS bodies): a number written with
    a fraction or an exponent, by its exact value. An integral one is the exact ``int``
    (``"9007199254740993.0"`` is ``2**53 + 1``, which a float cannot hold), any other a
    ``float``, as ``json.loads`` makes it."""
    integral = _integral(decimal.Decimal(text))
    return float(text) if integral is None else integral


def _canonical_number(value: float | decimal.Decimal) -> int | float | decimal.Decimal:
    if isinstance(value, decimal.Decimal):
        integral = _integral(value)
        if integral is not None:
            return integral
        if not value.is_finite():
            return value
        value = float(value)  # then as any float: rounding may make it integral
    if math.isfinite(value):
        # The shortest repr is the number as written: 1e30 is 10**30, not int(1e30).
        integral = _integral(decimal.Decimal(repr(value)))
        if integral is not None:
            return integral
    return value


def _integral(value: decimal.Decimal) -> int | None:
    """The exact ``int`` of an integral finite ``value`` (``-0`` is ``0``), else None."""
    if not value.is_finite() or value != value.to_integral_value():
        return None
    if value and value.adjusted() >= _MAX_INT_DIGITS:
        return None
    return int(value)


def extract_business_key(detail: Mapping[str, Any], expression: str) -> list[Any]:
    """Evaluate ``expression`` (JMESPath) over the event detail and return the key as a list,
    in canonical form.

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
        # Which parts, by position, never their values: the other parts are row data (an
        # email), and this reason is stored, dead-lettered and logged.
        empty = [str(index) for index, part in enumerate(parts, 1) if _is_empty(part)]
        which = f"part {', '.join(empty)} of {len(parts)}" if empty else "no parts"
        raise MissingIdempotencyKeyError(
            f"business key {expression!r} has a missing or empty part: {which}"
        )
    return [canonical(part) for part in parts]


def split_replay_generation(detail: Mapping[str, Any]) -> tuple[dict[str, Any], int | None]:
    """``(detail without replay_generation, generation or None)``. Raises
    ``InvalidReplayGenerationError`` unless the field is absent or an int >= 1."""
    rest = {name: value for name, value in detail.items() if name != REPLAY_GENERATION_FIELD}
    if REPLAY_GENERATION_FIELD not in detail:
        return rest, None
    value = detail[REPLAY_GENERATION_FIELD]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        shown = repr(value) if isinstance(value, int) else f"a {type(value).__name__}"
        raise InvalidReplayGenerationError(
            f"detail.{REPLAY_GENERATION_FIELD} must be an integer >= 1, got {shown}"
        )
    return rest, value


def redrive_marker(event: Mapping[str, Any]) -> str | None:
    """The dead-letter id an event carries when an operator moved it back from the DLQ, or
    None (no marker, or one this runtime did not write)."""
    marker = dead_letter_marker(event)
    return None if marker is None else str(marker["id"])


def dead_letter_marker(event: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The whole marker (``{"id", "error_code", ...}``) of an event an operator moved back
    from the DLQ, or None (no marker, or one this runtime did not write)."""
    marker = event.get(DEAD_LETTER_FIELD)
    if not isinstance(marker, Mapping):
        return None
    marker_id = marker.get("id")
    valid = isinstance(marker_id, str) and _DEAD_LETTER_ID.match(marker_id)
    return marker if valid else None


def key_fields(expression: str) -> frozenset[str]:
    """Every field name ``expression`` (``IDEMPOTENCY_KEY``, JMESPath) reads, at any depth:
    the detail fields a dead letter cut to fit its queue never drops. A name that also
    occurs deeper is kept at the top too: never dropping a key field matters more than the
    few bytes."""
    names: set[str] = set()
    pending = [jmespath.compile(expression).parsed]
    while pending:
        node = pending.pop()
        if node.get("type") == "field" and isinstance(node.get("value"), str):
            names.add(node["value"])
        pending.extend(child for child in node.get("children", []) if isinstance(child, dict))
    return frozenset(names)


def record_key(
    business_key: list[Any],
    *,
    prompt_version: str,
    model_id: str,
    fingerprint: str,
    replay_generation: int | None = None,
    redrive_of: str | None = None,
) -> RecordKey:
    """THE record key: every record, budget and dead-letter id is derived from this value."""
    key = RecordKey(
        business_key=business_key,
        prompt_version=prompt_version,
        model_id=model_id,
        fingerprint=fingerprint,
    )
    if replay_generation is not None:
        key["replay_generation"] = replay_generation
    if redrive_of is not None:
        key["redrive_of"] = redrive_of
    return key


def _is_empty(part: Any) -> bool:
    if part is None:
        return True
    if isinstance(part, str):
        return not part.strip()
    if isinstance(part, list | dict):
        return not part
    # Numbers and booleans are real values, including 0 and False.
    return False


def dead_key_of_life(key: Mapping[str, Any], first_seen: float | None) -> dict[str, Any]:
    """What the dead letter of ``key``'s outcome is identified by (its ``dead_letter_id``):
    the key and the life the outcome ends, its budget's ``first_seen`` (none: the key alone).

    A key whose memory expired comes back as a new life. Its dead letter must not carry the
    earlier life's id: an operator's redrive of it would be the earlier redrive's key,
    replayed without a request (and its DLQ message consumed with no new one) or, once that
    redrive's memory expired too, billed as the same key twice."""
    if first_seen is None:
        return dict(key)
    return {**key, "life": f"{first_seen:.3f}"}
