"""The attempt budget of one record key, kept on an item of its own in the idempotency table.

SQS receive counts and message attributes belong to one message, so they cannot hold a key's
budget: two copies of an event, a redrive or a re-enqueued copy each start again from zero.
This item is keyed on the record (``<record id>#budget``), so every copy of the event reads
and writes the same numbers:

- ``attempts``: model requests claimed. A claim is made immediately before the request is
  sent, with a condition ``attempts < limit``, so the budget can never be overspent however
  many deliveries race; a 429/529 (not billed) gives its claim back.
- ``pending``: the token of a claim that has not reported back. A delivery that finds it set
  knows the previous attempt was interrupted after its request was sent (a Lambda kill,
  timeout or out-of-memory): that attempt stays spent, and its code is ``AttemptInterrupted``.
- ``first_seen``: when the step first saw the row; the rate-limit window starts there, never
  at the producer's ``time``.
- ``rate_limited``: 429/529 waits so far (the backoff exponent without ``retry-after``).
- ``requeues``: times the row came back from the redrive queue and was put back.
- ``counted``: set once by the delivery that first reports the key's dead letter, so a
  second DLQ message after a kill is never counted twice.

The item holds counters, codes and a hash-derived id only, never a row value. Its lifetime is
the key's memory lifetime (:mod:`.lifetime`, ``IDEMPOTENCY_EXPIRES_AFTER_SECONDS``): every
write sets its TTL attribute ``expiration`` that long after the write, and that lifetime is
longer than any path can hold a copy of the key, so a key that comes back still finds its
budget. ``first_seen`` is set once and never reset while the item lives; a re-enqueued copy
carries it (:func:`.lifetime.stamp`), so even an item that is gone restarts from the key's
real first-seen time (see :meth:`AttemptBudget.claim`). DynamoDB deletes expired items
lazily, so an item past its ``expiration`` is read as absent, as Powertools treats an expired
record.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from . import clock

BUDGET_SUFFIX = "#budget"
INTERRUPTED = "AttemptInterrupted"


@dataclass(frozen=True)
class BudgetState:
    """The budget item as read or written."""

    attempts: int = 0
    first_seen: float | None = None
    interrupted: bool = False
    last_error: str | None = None
    rate_limited: int = 0
    requeues: int = 0

    @property
    def exhaustion_code(self) -> str:
        """The code of a used-up budget: the last attempt's failure."""
        if self.interrupted or not self.last_error:
            return INTERRUPTED
        return self.last_error

    def age_seconds(self, now: float) -> float:
        """Seconds since the step first saw the row (0 when it never did)."""
        return 0.0 if self.first_seen is None else max(0.0, now - self.first_seen)

    @classmethod
    def from_item(cls, item: dict[str, Any] | None, now: float | None = None) -> BudgetState:
        """The state an item holds; an item past its ``expiration`` holds none."""
        item = item or {}
        if _expired(item, clock.now() if now is None else now):
            return cls()
        return cls(
            attempts=_number(item.get("attempts")),
            first_seen=float(item["first_seen"]["N"]) if "first_seen" in item else None,
            interrupted="pending" in item,
            last_error=item.get("last_error", {}).get("S"),
            rate_limited=_number(item.get("rate_limited")),
            requeues=_number(item.get("requeues")),
        )


@dataclass(frozen=True)
class Claim:
    """The answer to :meth:`AttemptBudget.claim`."""

    granted: bool
    #: Granted: the state after the claim (``attempts`` includes it; ``interrupted`` says
    #: whether the previous attempt never reported back). Denied: the state found.
    state: BudgetState


class AttemptBudget:
    """The budget item of one record (see the module docstring).

    ``lifetime`` is the key's memory lifetime in seconds: every write keeps the item that
    long after it. ``first_seen`` (epoch seconds), when the caller knows the key's first-seen
    time from a re-enqueued copy, is the time a new or expired item starts from instead of
    now, so a key's first-seen time never moves forward.
    """

    def __init__(
        self,
        client: Any,
        table_name: str,
        record_id: str,
        limit: int,
        lifetime: int,
        *,
        first_seen: float | None = None,
    ) -> None:
        self._client = client
        self._table = table_name
        self._key = {"id": {"S": record_id + BUDGET_SUFFIX}}
        self.limit = limit
        self._lifetime = lifetime
        self._first_seen = first_seen
        self._token: str | None = None

    def _start(self, now: float) -> str:
        """The ``first_seen`` a new lifetime of the item starts from."""
        first = now if self._first_seen is None else min(now, self._first_seen)
        return _n(first)

    def _expiry(self, now: float) -> dict[str, str]:
        return {"N": str(int(now) + self._lifetime)}

    def claim(self) -> Claim:
        """Spend one attempt unless ``limit`` are spent: one conditional UpdateItem."""
        now = clock.now()
        token = uuid.uuid4().hex
        try:
            response = self._client.update_item(
                TableName=self._table,
                Key=self._key,
                UpdateExpression=(
                    "SET #pending = :token, #first = if_not_exists(#first, :first), "
                    "#exp = :exp ADD #attempts :one"
                ),
                ConditionExpression="attribute_not_exists(#attempts) OR #attempts < :limit",
                ExpressionAttributeNames={
                    "#pending": "pending",
                    "#first": "first_seen",
                    "#exp": "expiration",
                    "#attempts": "attempts",
                },
                ExpressionAttributeValues={
                    ":token": {"S": token},
                    ":first": {"N": self._start(now)},
                    ":exp": self._expiry(now),
                    ":one": {"N": "1"},
                    ":limit": {"N": str(self.limit)},
                },
                ReturnValues="ALL_OLD",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as error:
            if _code(error) != "ConditionalCheckFailedException":
                raise
            found: dict[str, Any] | None = error.response.get("Item")
            if found and _expired(found, now):
                self._restart(now)  # a spent budget of an expired record: a new lifetime
                return self.claim()
            return Claim(False, BudgetState.from_item(found, now))
        old_item = response.get("Attributes") or {}
        if _expired(old_item, now):
            self._restart(now, attempts=1, token=token)
            old_item = {}
        old = BudgetState.from_item(old_item, now)
        self._token = token
        return Claim(
            True,
            BudgetState(
                attempts=old.attempts + 1,
                first_seen=old.first_seen
                if old.first_seen is not None
                else float(self._start(now)),
                interrupted=old.interrupted,
                last_error=old.last_error,
                rate_limited=old.rate_limited,
                requeues=old.requeues,
            ),
        )

    def report_failure(self, error_code: str) -> None:
        """The claimed attempt failed with ``error_code`` (it stays spent)."""
        self._update(
            "SET #last = :code, #exp = :exp REMOVE #pending",
            {":code": {"S": error_code}, ":exp": self._expiry(clock.now())},
        )

    def give_back(self) -> BudgetState:
        """The claimed attempt was not billed (429/529): return it and count the wait."""
        return self._update(
            "SET #exp = :exp ADD #attempts :minus, #rate :one REMOVE #pending",
            {":minus": {"N": "-1"}, ":one": {"N": "1"}, ":exp": self._expiry(clock.now())},
            returns=True,
        )

    def note_requeue(self) -> BudgetState:
        """The row came back from the redrive queue: count it (and start the window if the
        step never saw the row before)."""
        now = clock.now()
        current = self._client.get_item(TableName=self._table, Key=self._key, ConsistentRead=True)
        if _expired(current.get("Item") or {}, now):
            self._restart(now)
        return self._update(
            "SET #first = if_not_exists(#first, :first), #exp = :exp ADD #requeues :one",
            {":first": {"N": self._start(now)}, ":exp": self._expiry(now), ":one": {"N": "1"}},
            returns=True,
        )

    def read(self) -> BudgetState:
        """The current state (one consistent GetItem)."""
        response = self._client.get_item(TableName=self._table, Key=self._key, ConsistentRead=True)
        return BudgetState.from_item(response.get("Item"))

    def count_dead_letter_once(self) -> bool:
        """True for the first caller only: the key's dead letter is counted once, however many
        deliveries send it (a kill between the DLQ send and its record sends it again).

        The write carries this caller's token, and an error is retried once with the same
        token: a write that DynamoDB applied but whose answer was lost (a timeout) is then
        recognised as this caller's win, not as another delivery's."""
        token = uuid.uuid4().hex
        for attempt in (1, 2):
            now = clock.now()
            try:
                self._client.update_item(
                    TableName=self._table,
                    Key=self._key,
                    UpdateExpression="SET #counted = :token, #exp = :exp",
                    ConditionExpression=(
                        "attribute_not_exists(#counted) OR #counted = :token OR #exp < :now"
                    ),
                    ExpressionAttributeNames={"#counted": "counted", "#exp": "expiration"},
                    ExpressionAttributeValues={
                        ":token": {"S": token},
                        ":now": {"N": str(int(now))},
                        ":exp": self._expiry(now),
                    },
                )
            except ClientError as error:
                if _code(error) == "ConditionalCheckFailedException":
                    return False
                if attempt == 2:
                    raise
                continue
            return True
        return False  # not reached: the second attempt returns or raises

    def _restart(self, now: float, *, attempts: int = 0, token: str | None = None) -> None:
        """Start an expired item's lifetime again: only the fields a new claim sets, from the
        key's first-seen time when a copy carried it."""
        item: dict[str, Any] = {
            **self._key,
            "attempts": {"N": str(attempts)},
            "first_seen": {"N": self._start(now)},
            "expiration": self._expiry(now),
        }
        if token is not None:
            item["pending"] = {"S": token}
        self._client.put_item(TableName=self._table, Item=item)

    def _update(
        self, expression: str, values: dict[str, Any], *, returns: bool = False
    ) -> BudgetState:
        names = {
            "#pending": "pending",
            "#last": "last_error",
            "#attempts": "attempts",
            "#rate": "rate_limited",
            "#first": "first_seen",
            "#exp": "expiration",
            "#requeues": "requeues",
        }
        used = {name: attribute for name, attribute in names.items() if name in expression}
        response = self._client.update_item(
            TableName=self._table,
            Key=self._key,
            UpdateExpression=expression,
            ExpressionAttributeNames=used,
            ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW" if returns else "NONE",
        )
        return BudgetState.from_item(response.get("Attributes"))


def _expired(item: dict[str, Any], now: float) -> bool:
    expiration = item.get("expiration", {}).get("N")
    return expiration is not None and float(expiration) < now


def _number(attribute: dict[str, str] | None) -> int:
    return int(float(attribute["N"])) if attribute and "N" in attribute else 0


def _n(value: float) -> str:
    return f"{value:.3f}"


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))
