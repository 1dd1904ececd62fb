"""``ResultFields``: what an :class:`~constructs_lib.IdempotentModelStep`'s result events
carry besides ids, codes and usage (issue 34).

Every subscriber of the result bus sees every field an event carries, so an event carries
ids, not data, unless asked. Always: ``key`` (the key's record id,
``<construct path>#<hash>``, a pseudonym of the key: a reader who can guess a key's parts
and knows the step's prompt can recompute it, so it is not anonymous), the result's
``status``, ``request_id``, ``usage``, ``model``, ``prompt_version``, ``stop_reason``,
``completed_at``, ``error_code``, ``dead_letter_id``, ``delivery``, ``batch_id`` and
``replay_generation``. On request:

- ``LABEL`` (the default): ``result.label``, one of the step's ``allowed_labels``. Words
  you chose, never row text, but a fact about the row;
- ``KEY``: ``key_parts``, the business key's parts as the idempotency key selected them
  (an email, if the key is one);
- ``PARSED``: ``result.parsed``, what ``parse_answer`` returned: free text the model wrote
  about the row.

Example::

    IdempotentModelStep(
        self, "Classify", ...,
        result_bus=bus,
        # Its key parts are an upload id and a row number: ids, safe to publish.
        result_fields=ResultFields.LABEL | ResultFields.KEY,
    )
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any


class ResultFields(enum.Flag):
    """Fields a result event carries besides ids, codes and usage; combine with ``|``."""

    #: Ids, codes and usage only.
    NONE = 0
    #: ``result.label``: one of ``allowed_labels`` (the default).
    LABEL = enum.auto()
    #: ``key_parts``: the business key's parts.
    KEY = enum.auto()
    #: ``result.parsed``: ``parse_answer``'s value.
    PARSED = enum.auto()


#: What a step's result events carry when ``result_fields`` is not given.
DEFAULT_RESULT_FIELDS = ResultFields.LABEL

#: The runtime's name of each field (``RESULT_FIELDS``, ``model_step.environment``).
_RUNTIME_NAMES = {
    ResultFields.LABEL: "label",
    ResultFields.KEY: "key",
    ResultFields.PARSED: "parsed",
}


def runtime_value(fields: ResultFields) -> str:
    """``RESULT_FIELDS`` for ``fields``: ``"label,key"``, or ``"none"``."""
    names = [name for flag, name in _RUNTIME_NAMES.items() if flag in fields]
    return ",".join(names) or "none"


def fields_a_pattern_needs(detail: Mapping[str, Any] | None) -> ResultFields:
    """The optional fields a result-event ``detail`` pattern filters on: a pattern on a field
    the events do not carry would never match."""
    needed = ResultFields.NONE
    if not detail:
        return needed
    if "key_parts" in detail:
        needed |= ResultFields.KEY
    result = detail.get("result")
    if isinstance(result, Mapping):
        if "label" in result:
            needed |= ResultFields.LABEL
        if "parsed" in result:
            needed |= ResultFields.PARSED
    return needed


def describe(fields: ResultFields) -> str:
    """``ResultFields.LABEL | ResultFields.KEY``, as a user would write it."""
    names = [f"ResultFields.{flag.name}" for flag in _RUNTIME_NAMES if flag in fields]
    return " | ".join(names) or "ResultFields.NONE"
