"""Synth-time checks on construct props.

Every message names the construct, the prop, the value it got and what is
allowed, so ``cdk synth`` points at the exact line to fix.
"""

from __future__ import annotations

from aws_cdk import Duration, Token


class PropValidationError(ValueError):
    """A construct prop is out of range or inconsistent with another prop."""


def _is_token(value: object) -> bool:
    return isinstance(value, (str, int, float)) and Token.is_unresolved(value)


def check_int_range(owner: str, prop: str, value: int, low: int, high: int) -> None:
    """Raise unless ``low <= value <= high`` (unresolved tokens are skipped)."""
    if _is_token(value):
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise PropValidationError(
            f"{owner}: {prop} must be an integer between {low} and {high}, got {value!r}"
        )
    if not low <= value <= high:
        raise PropValidationError(f"{owner}: {prop} must be between {low} and {high}, got {value}")


def check_duration_range(
    owner: str, prop: str, value: Duration, low: Duration, high: Duration
) -> None:
    """Raise unless ``value`` is a ``Duration`` of whole seconds with ``low <= value <=
    high`` (unresolved tokens are skipped). A fraction of a second (``Duration.millis(500)``)
    is refused here, by name, rather than by CDK's own ``to_seconds()`` later."""
    span = f"between {low.to_human_string()} and {high.to_human_string()}"
    if not isinstance(value, Duration):
        raise PropValidationError(f"{owner}: {prop} must be a Duration {span}, got {value!r}")
    if value.is_unresolved():
        return
    millis = value.to_milliseconds()
    if millis % 1000:
        raise PropValidationError(
            f"{owner}: {prop} must be a whole number of seconds {span}, got "
            f"{value.to_human_string()}"
        )
    if not low.to_milliseconds() <= millis <= high.to_milliseconds():
        raise PropValidationError(f"{owner}: {prop} must be {span}, got {value.to_human_string()}")


def check_non_empty(owner: str, prop: str, value: str) -> None:
    """Raise when a required string prop is empty or only whitespace."""
    if _is_token(value):
        return
    if not isinstance(value, str) or not value.strip():
        raise PropValidationError(f"{owner}: {prop} must be a non-empty string, got {value!r}")
