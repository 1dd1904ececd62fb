"""An EventBridge event-pattern matcher for the operators CDK stacks use.

Supported: exact values (strings, numbers compared numerically, booleans, null), ``prefix``,
``suffix``, ``equals-ignore-case``, ``wildcard`` (``*`` only), ``numeric`` (one or two
comparisons), ``exists``, ``anything-but`` (a value, a list, or ``prefix``/``suffix``), and
``$or`` at any level. Semantics follow the EventBridge documentation:

- every key of the pattern must match (AND); a list of matchers matches if any one does (OR);
- when the event value is an array, the field matches if any element matches;
- a missing field matches only ``{"exists": false}``;
- ``numeric`` matches JSON numbers only (not strings, not booleans).

Unsupported operators raise :class:`PatternError` when the pattern is compiled, so a rule the
local run cannot evaluate is never silently treated as "no match".
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

_MISSING = object()
_NUMERIC_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "=": operator.eq,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}

Leaf = Callable[[Any], bool]  # called with the event value, or _MISSING


class PatternError(ValueError):
    """The pattern uses an operator or shape this matcher does not support."""


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _exact(expected: object) -> Leaf:
    def match(value: object) -> bool:
        if value is _MISSING:
            return False
        if _is_number(expected) and _is_number(value):
            return float(expected) == float(value)  # type: ignore[arg-type]
        # bool is an int in Python; EventBridge keeps true and 1 apart.
        return type(expected) is type(value) and expected == value

    return match


def _string_test(test: Callable[[str], bool]) -> Leaf:
    return lambda value: isinstance(value, str) and test(value)


def _numeric(spec: object) -> Leaf:
    if not isinstance(spec, list) or len(spec) not in (2, 4):
        raise PatternError(f"numeric needs [op, value] or [op, value, op, value], got {spec!r}")
    checks = []
    for index in range(0, len(spec), 2):
        op, bound = spec[index], spec[index + 1]
        if op not in _NUMERIC_OPERATORS or not _is_number(bound):
            raise PatternError(f"unsupported numeric comparison {op!r} {bound!r}")
        checks.append((_NUMERIC_OPERATORS[op], float(bound)))
    return lambda value: _is_number(value) and all(cmp(float(value), b) for cmp, b in checks)


def _wildcard(spec: object) -> Leaf:
    if not isinstance(spec, str):
        raise PatternError(f"wildcard needs a string, got {spec!r}")
    regex = re.compile(".*".join(re.escape(part) for part in spec.split("*")), re.DOTALL)
    return _string_test(lambda value: regex.fullmatch(value) is not None)


def _anything_but(spec: object) -> Leaf:
    if isinstance(spec, Mapping):
        if set(spec) - {"prefix", "suffix", "equals-ignore-case", "wildcard"}:
            raise PatternError(f"unsupported anything-but operand {spec!r}")
        inner = _compile_operator(spec)
    else:
        values = spec if isinstance(spec, list) else [spec]
        if any(isinstance(v, Mapping | list) for v in values):
            raise PatternError(f"unsupported anything-but operand {spec!r}")
        matchers = [_exact(v) for v in values]

        def inner(value: object) -> bool:
            return any(m(value) for m in matchers)

    return lambda value: value is not _MISSING and value is not None and not inner(value)


def _compile_operator(spec: Mapping[str, Any]) -> Leaf:
    if len(spec) != 1:
        raise PatternError(f"a matcher object has exactly one operator, got {dict(spec)!r}")
    ((name, argument),) = spec.items()
    if name == "prefix" and isinstance(argument, str):
        return _string_test(lambda value: value.startswith(argument))
    if name == "suffix" and isinstance(argument, str):
        return _string_test(lambda value: value.endswith(argument))
    if name == "equals-ignore-case" and isinstance(argument, str):
        folded = argument.casefold()
        return _string_test(lambda value: value.casefold() == folded)
    if name == "wildcard":
        return _wildcard(argument)
    if name == "numeric":
        return _numeric(argument)
    if name == "exists" and isinstance(argument, bool):
        return lambda value: (value is not _MISSING) is argument
    if name == "anything-but":
        return _anything_but(argument)
    raise PatternError(f"unsupported pattern operator {name!r} with {argument!r}")


def _compile_leaf_list(matchers: Sequence[Any], where: str) -> Leaf:
    if not matchers:
        raise PatternError(f"{where}: an empty list matches nothing")
    compiled = [
        _compile_operator(item) if isinstance(item, Mapping) else _exact(item) for item in matchers
    ]
    exists_false = [
        m for m, item in zip(compiled, matchers, strict=True) if item == {"exists": False}
    ]

    def match(value: object) -> bool:
        if isinstance(value, list):
            # An array field matches when any element matches; an empty array is "present".
            return any(m(element) for element in value for m in compiled)
        if value is _MISSING:
            return any(m(value) for m in exists_false)
        return any(m(value) for m in compiled)

    return match


Matcher = Callable[[Mapping[str, Any]], bool]


def _compile_object(pattern: Mapping[str, Any], where: str) -> Matcher:
    if not isinstance(pattern, Mapping):
        raise PatternError(f"{where}: a pattern level must be an object")
    parts: list[Matcher] = []
    for key, spec in pattern.items():
        path = f"{where}.{key}"
        if key == "$or":
            if not isinstance(spec, list) or len(spec) < 2:
                raise PatternError(f"{path}: $or needs a list of at least two patterns")
            branches = [_compile_object(branch, path) for branch in spec]
            parts.append(_any_of(branches))
        elif isinstance(spec, Mapping):
            nested = _compile_object(spec, path)
            parts.append(_level(key, nested))
        elif isinstance(spec, list):
            leaf = _compile_leaf_list(spec, path)
            parts.append(_field(key, leaf))
        else:
            raise PatternError(f"{path}: values in a pattern must be lists or objects")
    return lambda event: all(part(event) for part in parts)


def _any_of(branches: list[Matcher]) -> Matcher:
    return lambda event: any(branch(event) for branch in branches)


def _level(key: str, nested: Matcher) -> Matcher:
    # A missing (or non-object) level is an empty one: only "exists": false matches.
    return lambda event: nested(event[key] if isinstance(event.get(key), Mapping) else {})


def _field(key: str, leaf: Leaf) -> Matcher:
    return lambda event: leaf(event.get(key, _MISSING))


class EventPattern:
    """A compiled pattern. ``EventPattern(p).matches(event)``; compile errors raise
    :class:`PatternError`."""

    def __init__(self, pattern: Mapping[str, Any]) -> None:
        self.pattern = pattern
        self._match = _compile_object(pattern, "pattern")

    def matches(self, event: Mapping[str, Any]) -> bool:
        """True when ``event`` (an EventBridge event envelope) matches the pattern."""
        return isinstance(event, Mapping) and self._match(event)


def matches(pattern: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
    """One-shot form of :class:`EventPattern`."""
    return EventPattern(pattern).matches(event)
