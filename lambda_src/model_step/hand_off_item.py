"""What a hand-off's record cannot hold: the failures of its side effect, and a publish's intent.

A hand-off record (suffix ``#dead-letter`` or ``#result-event``) is Powertools' record of a
side effect done once per key. Powertools keeps nothing of a failed or killed try, so the
item beside the record, ``<hand-off record id>#budget`` (the item that also counts a dead
letter once: :meth:`.budget.AttemptBudget.count_dead_letter_once`), keeps:

- ``failures``: deliveries whose side effect was refused. A DLQ send or a publish that keeps
  failing ends after :data:`MAX_HAND_OFF_FAILURES` of them (a coded dead letter, or the SQS
  redrive policy's own move to the DLQ), never in an unbounded cycle;
- ``intent`` and ``intent_at``: a result event about to be published, written BEFORE the
  publish (a token and the time). A delivery that finds one left behind (a kill after the
  publish, or a failure after which the event may have been accepted) knows an event may be
  out and reconciles (:mod:`.result_hand_off`) instead of publishing again.

Tokens, times and counters only; every write keeps the item the key's memory lifetime.

Example::

    item = HandOffItem(dynamodb, table, hand_off_record_id, lifetime=1_299_600)
    begun = item.begin()
    if begun.written:
        ...  # publish; on a certain refusal: item.clear(begun.intent.token); item.failed()
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from . import clock
from .budget import BUDGET_SUFFIX

#: Deliveries whose DLQ send or result event was refused before the hand-off gives up: about
#: five visibility timeouts of the buffer queue (or Lambda's 3 async tries on the direct
#: path, which end first): an outage of minutes is waited out, a revoked permission is not.
MAX_HAND_OFF_FAILURES = 5


@dataclass(frozen=True)
class Intent:
    """A publish some delivery was about to make: its token and when (epoch seconds)."""

    token: str
    at: float


@dataclass(frozen=True)
class Begun:
    """The answer to :meth:`HandOffItem.begin`."""

    #: True: ``intent`` is this caller's, written now. False: nothing was written, and
    #: ``intent`` is the one an earlier delivery left (or None: ``failures`` is spent).
    written: bool
    intent: Intent | None
    #: Deliveries refused so far.
    failures: int


class HandOffItem:
    """The item beside one hand-off record (see the module docstring)."""

    def __init__(self, client: Any, table_name: str, record_id: str, lifetime: int) -> None:
        self._client = client
        self._table = table_name
        self._key = {"id": {"S": record_id + BUDGET_SUFFIX}}
        self._lifetime = lifetime

    def begin(self) -> Begun:
        """Write this caller's intent, unless one is already there or the failures are
        spent: one conditional UpdateItem either way."""
        now = clock.now()
        intent = Intent(uuid.uuid4().hex, round(now, 3))
        try:
            response = self._client.update_item(
                TableName=self._table,
                Key=self._key,
                UpdateExpression="SET #intent = :token, #at = :at, #exp = :exp",
                ConditionExpression=(
                    "attribute_not_exists(#intent) AND "
                    "(attribute_not_exists(#failures) OR #failures < :max)"
                ),
                ExpressionAttributeNames=_NAMES,
                ExpressionAttributeValues={
                    ":token": {"S": intent.token},
                    ":at": {"N": f"{intent.at:.3f}"},
                    ":exp": self._expiry(now),
                    ":max": {"N": str(MAX_HAND_OFF_FAILURES)},
                },
                ReturnValues="ALL_OLD",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as error:
            if _code(error) != "ConditionalCheckFailedException":
                raise
            found = error.response.get("Item") or {}
            if not _expired(found, now):
                return Begun(False, _intent(found), _failures(found))
            # Left from an earlier lifetime of the key (DynamoDB deletes expired items
            # lazily): this lifetime starts with no intent and no failures.
            self._client.put_item(
                TableName=self._table,
                Item={
                    **self._key,
                    "intent": {"S": intent.token},
                    "intent_at": {"N": f"{intent.at:.3f}"},
                    "expiration": self._expiry(now),
                },
            )
            return Begun(True, intent, 0)
        return Begun(True, intent, _failures(response.get("Attributes") or {}))

    def clear(self, token: str) -> None:
        """Remove the intent ``token``, and only it: the publish was certainly refused."""
        try:
            self._client.update_item(
                TableName=self._table,
                Key=self._key,
                UpdateExpression="SET #exp = :exp REMOVE #intent, #at",
                ConditionExpression="#intent = :token",
                ExpressionAttributeNames={
                    name: _NAMES[name] for name in ("#intent", "#at", "#exp")
                },
                ExpressionAttributeValues={
                    ":token": {"S": token},
                    ":exp": self._expiry(clock.now()),
                },
            )
        except ClientError as error:
            if _code(error) != "ConditionalCheckFailedException":
                raise

    def failed(self) -> int:
        """Count one more refused delivery; returns the count."""
        response = self._client.update_item(
            TableName=self._table,
            Key=self._key,
            UpdateExpression="SET #exp = :exp ADD #failures :one",
            ExpressionAttributeNames={name: _NAMES[name] for name in ("#exp", "#failures")},
            ExpressionAttributeValues={":one": {"N": "1"}, ":exp": self._expiry(clock.now())},
            ReturnValues="UPDATED_NEW",
        )
        return _failures(response.get("Attributes") or {})

    def _expiry(self, now: float) -> dict[str, str]:
        return {"N": str(int(now) + self._lifetime)}


_NAMES = {
    "#intent": "intent",
    "#at": "intent_at",
    "#exp": "expiration",
    "#failures": "failures",
}


def _intent(item: dict[str, Any]) -> Intent | None:
    token = item.get("intent", {}).get("S")
    at = item.get("intent_at", {}).get("N")
    return None if token is None or at is None else Intent(str(token), float(at))


def _expired(item: dict[str, Any], now: float) -> bool:
    expiration = item.get("expiration", {}).get("N")
    return expiration is not None and float(expiration) < now


def _failures(item: dict[str, Any]) -> int:
    raw = item.get("failures", {}).get("N")
    return int(float(raw)) if raw is not None else 0


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))
