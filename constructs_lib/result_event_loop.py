"""Whether a step would receive its own result events: a loop that bills (issue 36).

A step with ``result_bus`` publishes each key's result on that bus, source its construct path
and detail-type ``Model Step Completed`` or ``Model Step Dead Lettered``. If it also
subscribes to that bus with an ``event_pattern`` those events match, every result comes back
as a new row, is answered (a billed request), and its result comes back again.

The check is EventBridge's matching, evaluated at synth on what is known of a result event:

- ``source`` and ``detail-type``: an absent field matches everything; a list matches when one
  of its values does (a string, ``prefix``, ``suffix``, ``equals-ignore-case``, ``wildcard``,
  ``anything-but`` and ``exists``). A value synth cannot read (a token) or an operator not
  listed never counts as a match.
- ``detail``: it can match unless it filters on a field the events never carry (a top-level
  field other than ``key``, ``result``, ``key_parts`` and ``replay_generation``, or an
  optional field ``result_fields`` leaves out); the values inside are assumed to match.
- A pattern that also filters on ``account``, ``region``, ``resources``, ``time``, ``id`` or
  ``version`` is not refused: synth cannot know those of an event.

So only a pattern that really matches is refused. Example::

    own_results_matched({"detail-type": ["Model Step Completed"]}, "Leads/Classify",
                        RESULT_DETAIL_TYPES, ResultFields.LABEL)   # ("Model Step Completed",)
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from typing import Any

from aws_cdk import Stack, Token
from aws_cdk import aws_events as events

from .alarms import is_default_bus
from .event_bus_v2 import EventBusV2Base
from .result_fields import ResultFields, fields_a_pattern_needs

#: Top-level fields a result event's detail may carry (``result_events.result_detail``).
RESULT_DETAIL_FIELDS = frozenset({"key", "result", "key_parts", "replay_generation"})
#: The string operators a ``source`` or ``detail-type`` filter may use (besides
#: ``anything-but`` and ``exists``).
STRING_OPERATORS = frozenset({"prefix", "suffix", "equals-ignore-case", "wildcard"})
#: Envelope fields synth cannot know of an event: a pattern on one is never refused.
UNKNOWN_AT_SYNTH = ("account", "region", "resources", "time", "id", "version")

Bus = events.IEventBus | EventBusV2Base | None


def own_results_matched(
    pattern: Mapping[str, Any],
    source: str,
    detail_types: Sequence[str],
    result_fields: ResultFields,
) -> tuple[str, ...]:
    """Which of a step's result ``detail_types`` (its events' source: ``source``, its
    construct path) ``pattern`` matches, as CloudFormation spells it (``detail-type``);
    empty: none."""
    if any(field in pattern for field in UNKNOWN_AT_SYNTH):
        return ()
    if not _field_matches(pattern.get("source"), source):
        return ()
    if not _detail_can_match(pattern.get("detail"), result_fields):
        return ()
    return tuple(
        detail_type
        for detail_type in detail_types
        if _field_matches(pattern.get("detail-type"), detail_type)
    )


def same_bus(subscribed: Bus, published: Bus) -> bool:
    """True when the bus a step subscribes to (``None``: the default bus) is surely the bus
    it publishes its results on (``None``: none)."""
    if published is None:
        return False
    if subscribed is published:
        return True
    if isinstance(subscribed, EventBusV2Base) or isinstance(published, EventBusV2Base):
        both_v2 = isinstance(subscribed, EventBusV2Base) and isinstance(published, EventBusV2Base)
        return both_v2 and _same_arn(subscribed, published)
    if subscribed is None or is_default_bus(published):
        return is_default_bus(subscribed) and is_default_bus(published)
    if _same_arn(subscribed, published):
        return True
    # Two handles on one named bus of this stack (an EventBus and from_event_bus_name).
    name, other = subscribed.event_bus_name, published.event_bus_name
    return (
        not Token.is_unresolved(name)
        and name == other
        and Stack.of(subscribed) is Stack.of(published)
    )


def describe_bus(bus: Bus) -> str:
    """A bus as the refusal names it: its construct path, or the default bus."""
    if bus is None:
        return "None (the default bus)"
    return repr(bus.node.path)


def _same_arn(first: Any, second: Any) -> bool:
    # One literal ARN, or one token (the same string is the same value once resolved).
    return bool(first.event_bus_arn == second.event_bus_arn)


def _field_matches(matchers: Sequence[Any] | None, value: str) -> bool:
    """EventBridge: an absent field matches; a list matches when one of its values does."""
    if matchers is None:
        return True
    if not isinstance(matchers, Sequence) or isinstance(matchers, str):
        return False
    return any(_matcher_matches(matcher, value) for matcher in matchers)


def _matcher_matches(matcher: Any, value: str) -> bool:
    if isinstance(matcher, str):
        return not Token.is_unresolved(matcher) and matcher == value
    if not isinstance(matcher, Mapping) or len(matcher) != 1:
        return False
    [(operator, operand)] = matcher.items()
    if operator == "exists":
        return operand is True
    if operator == "anything-but":
        return _anything_but_matches(operand, value)
    return _string_operator_matches(operator, operand, value)


def _string_operator_matches(operator: str, operand: Any, value: str) -> bool:
    if isinstance(operand, Mapping) and set(operand) == {"equals-ignore-case"}:
        # {"prefix": {"equals-ignore-case": "x"}}, and the same for suffix.
        operand, value = operand["equals-ignore-case"], value.casefold()
        operand = operand.casefold() if isinstance(operand, str) else operand
    if not isinstance(operand, str) or Token.is_unresolved(operand):
        return False
    if operator == "prefix":
        return value.startswith(operand)
    if operator == "suffix":
        return value.endswith(operand)
    if operator == "equals-ignore-case":
        return value.casefold() == operand.casefold()
    if operator == "wildcard":
        # EventBridge's only wildcard is *; escape fnmatch's ? and [ first.
        escaped = operand.replace("[", "[[]").replace("?", "[?]")
        return fnmatch.fnmatchcase(value, escaped)
    return False


def _anything_but_matches(operand: Any, value: str) -> bool:
    """``anything-but``: a value, a list of values, or one string operator, negated."""
    if isinstance(operand, str):
        return not Token.is_unresolved(operand) and operand != value
    if isinstance(operand, Sequence):
        literal = all(isinstance(item, str) and not Token.is_unresolved(item) for item in operand)
        return literal and value not in operand
    if isinstance(operand, Mapping) and len(operand) == 1:
        [(operator, inner)] = operand.items()
        readable = isinstance(inner, str) and not Token.is_unresolved(inner)
        if operator not in STRING_OPERATORS or not readable:
            return False
        return not _string_operator_matches(operator, inner, value)
    return False


def _detail_can_match(detail: Any, result_fields: ResultFields) -> bool:
    """False when ``detail`` needs a field the step's result events never carry."""
    if detail is None:
        return True
    if not isinstance(detail, Mapping):  # a token synth cannot read
        return False
    if fields_a_pattern_needs(detail) & ~result_fields:
        return False
    for field, matchers in detail.items():
        if field in RESULT_DETAIL_FIELDS:
            continue
        # Absent from every result event: only {"exists": false} matches it ("$or" too
        # cannot be evaluated here, so it is not counted as a match).
        absent_ok = isinstance(matchers, list) and {"exists": False} in matchers
        if not absent_ok:
            return False
    return True
