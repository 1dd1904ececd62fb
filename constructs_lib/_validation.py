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
    """Raise unless ``low <= value <= high``, comparing whole seconds."""
    if value.is_unresolved():
        return
    seconds = value.to_seconds()
    if not low.to_seconds() <= seconds <= high.to_seconds():
        raise PropValidationError(
            f"{owner}: {prop} must be between {low.to_human_string()} and "
            f"{high.to_human_string()}, got {value.to_human_string()}"
        )


def check_non_empty(owner: str, prop: str, value: str) -> None:
    """Raise when a required string prop is empty or only whitespace."""
    if _is_token(value):
        return
    if not isinstance(value, str) or not value.strip():
        raise PropValidationError(f"{owner}: {prop} must be a non-empty string, got {value!r}")
