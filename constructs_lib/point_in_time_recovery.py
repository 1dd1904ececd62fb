"""Point-in-time recovery of the tables that hold personal data: on, off, or for how long.

DynamoDB's continuous backups keep every change of the last ``RecoveryPeriodInDays`` (1-35)
restorable, deletions included: an item that expired (TTL) or was deleted can be restored
from a backup for that many days after it went. That is the trade-off:

- **on, 35 days** (DynamoDB's own period, and the default here): an accidental delete, a
  bad deploy or a corrupting bug can be undone for five weeks, but a row's values outlive
  its TTL by up to 35 days in the backups;
- **a shorter period**: the values are gone from the backups sooner, and a mistake noticed
  later cannot be undone;
- **off**: nothing outlives its TTL or its deletion, and nothing can be restored. cdk-nag's
  ``AwsSolutions-DDB3`` and checkov's ``CKV_AWS_28`` are acknowledged, with that reason.

Accepted values: ``True`` (35 days), ``False`` (off), a ``Duration`` of whole days from 1 to
35, or (the reference app's ``point_in_time_recovery`` context) the same as text: ``on``,
``off``, ``true``, ``false`` or a number of days, ``0`` being off.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Duration, Validations
from aws_cdk import aws_dynamodb as dynamodb
from constructs import IConstruct

from ._validation import PropValidationError
from .checkov_acknowledgments import acknowledge_checkov

#: DynamoDB's range of ``RecoveryPeriodInDays``, and its default.
PERIOD_DAYS_RANGE = (1, 35)
DEFAULT_PERIOD_DAYS = 35
#: What a value may be, for the messages.
ALLOWED = (
    "True (35 days), False (off) or a Duration of whole days between 1 and 35 (Duration.days(7))"
)
OFF_REASON = (
    "point_in_time_recovery is off on purpose: this table holds personal data that must not "
    "outlive its TTL or its deletion in continuous backups"
)

PointInTimeRecovery = bool | Duration


def period_days(owner: str, prop: str, value: PointInTimeRecovery | None) -> int:
    """The recovery period in days for ``value`` (0: off; ``None``: the default, 35).
    Raises :class:`PropValidationError` naming ``owner``, ``prop`` and the value."""
    if value is None or value is True:
        return DEFAULT_PERIOD_DAYS
    if value is False:
        return 0
    low, high = PERIOD_DAYS_RANGE
    if not isinstance(value, Duration) or value.is_unresolved():
        raise PropValidationError(f"{owner}: {prop} must be {ALLOWED}, got {value!r}")
    seconds = value.to_seconds()
    days = seconds / 86_400
    if not days.is_integer() or not low <= days <= high:
        raise PropValidationError(
            f"{owner}: {prop} must be {ALLOWED}, got {value.to_human_string()}"
        )
    return int(days)


def period_from_context(owner: str, key: str, raw: object) -> int:
    """The recovery period in days of a context value (``on``, ``off``, ``true``,
    ``false``, or days 0-35; 0 is off). Raises :class:`PropValidationError` naming the key."""
    text = str(raw).strip().lower()
    if text in ("on", "true"):
        return DEFAULT_PERIOD_DAYS
    if text in ("off", "false", "0"):
        return 0
    low, high = PERIOD_DAYS_RANGE
    if isinstance(raw, bool) or not text.isdigit() or not low <= int(text) <= high:
        raise PropValidationError(
            f"{owner}: context {key} must be on, off or a number of days between {low} and "
            f"{high} (0 is off), got {raw!r}"
        )
    return int(text)


def specification(days: int) -> dynamodb.PointInTimeRecoverySpecification:
    """The table property for a period of ``days`` (0: off). The period is always written,
    so the template says how long backups keep a deleted item."""
    if days == 0:
        return dynamodb.PointInTimeRecoverySpecification(point_in_time_recovery_enabled=False)
    return dynamodb.PointInTimeRecoverySpecification(
        point_in_time_recovery_enabled=True, recovery_period_in_days=days
    )


def acknowledge_off(table: IConstruct, days: int) -> None:
    """With recovery off, acknowledge the two scanners' findings that ask for it."""
    if days:
        return
    Validations.of(table).acknowledge(Acknowledgment(id="AwsSolutions-DDB3", reason=OFF_REASON))
    acknowledge_checkov(table, "CKV_AWS_28", OFF_REASON)
