"""IAM conditions as the local run's check evaluates them (:mod:`.iam`).

``StringEquals`` (plain, ``ForAllValues:`` or ``ForAnyValue:``) on the keys a call's request
context carries (``events:source``, ``events:detail-type``, ``bedrock:InferenceProfileArn``),
and ``StringEquals`` / ``StringLike`` on ``dynamodb:LeadingKeys`` with IAM's own semantics,
missing values included. Any other condition is assumed to hold by the caller, which lists it
as unevaluated.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

#: The condition key of the partition keys a DynamoDB request touches.
LEADING_KEYS = "dynamodb:LeadingKeys"

#: Condition operators evaluated here (with the request context a call carries).
_STRING_EQUALS = ("StringEquals", "ForAllValues:StringEquals", "ForAnyValue:StringEquals")
_STRING_LIKE = ("StringLike", "ForAllValues:StringLike", "ForAnyValue:StringLike")
#: Context keys the local run knows for the calls that carry them.
KNOWN_CONTEXT_KEYS = frozenset(
    {
        "events:source",
        "events:detail-type",
        # Bedrock (issue 22): set on the foundation-model check of an InvokeModel made
        # through an inference profile (local_engine.bedrock_iam).
        "bedrock:InferenceProfileArn",
    }
)
#: Keys evaluated with IAM's own semantics, missing values included (issue 34): a
#: DynamoDB call always says which partition keys it touches.
STRICT_CONTEXT_KEYS = frozenset({LEADING_KEYS})


def evaluable(condition: Mapping[str, Any]) -> bool:
    return all(
        (operator in _STRING_EQUALS and set(values) <= KNOWN_CONTEXT_KEYS | STRICT_CONTEXT_KEYS)
        or (operator in _STRING_LIKE and set(values) <= STRICT_CONTEXT_KEYS)
        for operator, values in condition.items()
    )


def condition_holds(condition: Mapping[str, Any], context: Mapping[str, list[str]]) -> bool:
    """StringEquals on a known key and StringEquals / StringLike on a strict key are
    evaluated; anything else is assumed to hold (and was listed in
    ``unevaluated_conditions``)."""
    for operator, values in condition.items():
        if operator not in _STRING_EQUALS + _STRING_LIKE:
            continue
        for key, expected in values.items():
            patterns = [str(p) for p in as_list(expected)]
            if key in STRICT_CONTEXT_KEYS:
                if not _strict_holds(operator, context.get(key, []), patterns):
                    return False
            elif operator in _STRING_EQUALS and key in context:
                if any(value not in patterns for value in context[key]):
                    return False
    return True


def _strict_holds(operator: str, values: Sequence[str], patterns: Sequence[str]) -> bool:
    """IAM's reading of one operator on a (multivalued) key, as the request carries it."""
    like = operator.endswith("StringLike")

    def matches(value: str) -> bool:
        return any(_string_like(value, p) if like else value == p for p in patterns)

    if operator.startswith("ForAllValues:"):
        return all(matches(value) for value in values)  # true for no values, as in IAM
    if operator.startswith("ForAnyValue:"):
        return any(matches(value) for value in values)
    return len(values) == 1 and matches(values[0])


def _string_like(value: str, pattern: str) -> bool:
    """IAM's StringLike: ``*`` any run, ``?`` one character, case-sensitive; the policy
    variables ``${*}``, ``${?}`` and ``${$}`` stand for those characters themselves."""
    regex = ""
    for token in re.findall(r"\$\{[*?$]\}|.", pattern, flags=re.DOTALL):
        if token == "*":
            regex += ".*"
        elif token == "?":
            regex += "."
        elif token.startswith("${"):
            regex += re.escape(token[2])
        else:
            regex += re.escape(token)
    return re.fullmatch(regex, value, flags=re.DOTALL) is not None


def as_list(value: Any) -> list[Any]:
    """A condition value (one value or a list) as a list."""
    return list(value) if isinstance(value, list) else [value]
