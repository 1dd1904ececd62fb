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
- ``requeues``: times the row came back from the redrive queue and was put back, counted
  once per redrive message (``requeued_message``: the last one counted), so the same message
  back after a failed ``on_outcome`` spends nothing.
- ``unbilled`` and the four token counts (``input_tokens``...): what the claimed attempts
  that failed cost, as each reports back: an attempt the provider did not bill (a 401, or
  Bedrock's ``ModelNotReadyException``) adds to ``unbilled``, an answer that was billed and
  still retried (``RetryableAnswerError``) adds its tokens. With ``attempts`` they give the
  key's billed requests and tokens so far (:meth:`BudgetState.billed_requests`), which the
  stored result carries, so a replay reports the key's totals with no extra write. An
  interrupted attempt counts as billed: its request was sent, and nobody saw its answer.
- ``settled_by``: the token of the delivery that settled the budget's last interrupted
  attempt (:meth:`AttemptBudget.settle_interrupted`), so a settle whose answer was lost is
  still counted once.
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

import dataclasses
import uuid
from collections.abc import Callable, Mapping
from typing import Any, cast

from botocore.exceptions import ClientError

from . import clock
from .budget_state import INTERRUPTED, TOKEN_FIELDS, BudgetState, Claim, expired
from .outcome import Usage, zero_usage

BUDGET_SUFFIX = "#budget"


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
                # Never on an expired item: an ADD would revive its old count with a new
                # expiration, and if this answer were lost, nobody would restart it.
                ConditionExpression=(
                    "attribute_not_exists(#attempts) OR (#attempts < :limit AND "
                    "(attribute_not_exists(#exp) OR #exp >= :now))"
                ),
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
                    ":now": {"N": _n(now)},
                },
                ReturnValues="ALL_OLD",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as error:
            if _code(error) != "ConditionalCheckFailedException":
                raise
            found: dict[str, Any] | None = error.response.get("Item")
            if found and expired(found, now):
                self._restart(now)  # an expired item, spent or not: a new lifetime
                return self.claim()
            return Claim(False, BudgetState.from_item(found, now))
        old = BudgetState.from_item(response.get("Attributes"), now)
        self._token = token
        first = old.first_seen if old.first_seen is not None else float(self._start(now))
        return Claim(True, dataclasses.replace(old, attempts=old.attempts + 1, first_seen=first))

    def report_failure(
        self,
        error_code: str,
        *,
        billed: bool = True,
        usage: Usage | None = None,
        cost_nanousd: int = 0,
    ) -> None:
        """The claimed attempt failed with ``error_code`` (it stays spent). ``billed``: the
        provider billed it (default True); ``usage``: the tokens of a billed answer that is
        retried anyway (default None: none), ``cost_nanousd`` what it cost (default 0). All
        join the key's totals in the same write."""
        expression = "SET #last = :code, #exp = :exp REMOVE #pending"
        values: dict[str, Any] = {":code": {"S": error_code}, ":exp": self._expiry(clock.now())}
        adds = [] if billed else ["#unbilled :one"]
        values.update({} if billed else {":one": {"N": "1"}})
        counts = {**cast(Mapping[str, int], usage or zero_usage()), "cost_nanousd": cost_nanousd}
        for name, count in counts.items():
            if count:
                adds.append(f"#{name} :{name}")
                values[f":{name}"] = {"N": str(count)}
        self._update(expression + (" ADD " + ", ".join(adds) if adds else ""), values)

    def settle_interrupted(self, token: str) -> bool:
        """Mark the interrupted attempt ``token`` as settled (its code ``AttemptInterrupted``
        kept as the last error): True for the one caller whose conditional write removed it,
        so a used-up budget's last interrupted attempt is counted once.

        The write carries this caller's own token (``settled_by``), and an error is retried
        once with it: a write that DynamoDB applied but whose answer was lost is then
        recognised as this caller's, not left for nobody to count."""
        return self._write_once(
            "SET #last = :code, #exp = :exp, #by = :mine REMOVE #pending",
            "#pending = :token OR #by = :mine",
            {
                "#last": "last_error",
                "#exp": "expiration",
                "#pending": "pending",
                "#by": "settled_by",
            },
            lambda now: {":code": {"S": INTERRUPTED}, ":token": {"S": token}},
        )

    def give_back(self) -> BudgetState:
        """The claimed attempt was not billed (429/529): return it and count the wait."""
        return self._update(
            "SET #exp = :exp ADD #attempts :minus, #rate :one REMOVE #pending",
            {":minus": {"N": "-1"}, ":one": {"N": "1"}, ":exp": self._expiry(clock.now())},
            returns=True,
        )

    def note_requeue(self, message_id: str) -> tuple[BudgetState, bool]:
        """The redrive message ``message_id`` brought the row back: count it once (and start
        the window if the step never saw the row before). Returns the state and whether this
        call counted it: the same message again (its delivery failed after this, e.g. in
        ``on_outcome``) is not another requeue."""
        now = clock.now()
        current = self._client.get_item(TableName=self._table, Key=self._key, ConsistentRead=True)
        if expired(current.get("Item") or {}, now):
            self._restart(now)
        try:
            response = self._client.update_item(
                TableName=self._table,
                Key=self._key,
                UpdateExpression=(
                    "SET #first = if_not_exists(#first, :first), #exp = :exp, #message = :message "
                    "ADD #requeues :one"
                ),
                ConditionExpression="attribute_not_exists(#message) OR #message <> :message",
                ExpressionAttributeNames={
                    "#first": "first_seen",
                    "#exp": "expiration",
                    "#message": "requeued_message",
                    "#requeues": "requeues",
                },
                ExpressionAttributeValues={
                    ":first": {"N": self._start(now)},
                    ":exp": self._expiry(now),
                    ":message": {"S": message_id},
                    ":one": {"N": "1"},
                },
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as error:
            if _code(error) != "ConditionalCheckFailedException":
                raise
            return BudgetState.from_item(error.response.get("Item"), now), False
        return BudgetState.from_item(response.get("Attributes"), now), True

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
        return self._write_once(
            "SET #counted = :mine, #exp = :exp",
            "attribute_not_exists(#counted) OR #counted = :mine OR #exp < :now",
            {"#counted": "counted", "#exp": "expiration"},
            lambda now: {":now": {"N": str(int(now))}},
        )

    def _write_once(
        self,
        update: str,
        condition: str,
        names: dict[str, str],
        values: Callable[[float], dict[str, Any]],
    ) -> bool:
        """One conditional UpdateItem that also sets this caller's own token (``:mine``) and
        the item's expiry (``:exp``): True when it applied, False when its condition failed.
        Any other error is retried once with the same token, so a write that DynamoDB applied
        but whose answer was lost is recognised as this caller's (``condition`` must accept
        ``:mine``). ``values``: the rest of the values, from the write's clock time."""
        mine = uuid.uuid4().hex
        for attempt in (1, 2):
            now = clock.now()
            try:
                self._client.update_item(
                    TableName=self._table,
                    Key=self._key,
                    UpdateExpression=update,
                    ConditionExpression=condition,
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues={
                        ":mine": {"S": mine},
                        ":exp": self._expiry(now),
                        **values(now),
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

    def _restart(self, now: float) -> None:
        """Start an expired item's lifetime again, with no attempt spent, from the key's
        first-seen time when a copy carried it."""
        item: dict[str, Any] = {
            **self._key,
            "attempts": {"N": "0"},
            "first_seen": {"N": self._start(now)},
            "expiration": self._expiry(now),
        }
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
            "#unbilled": "unbilled",
            "#cost_nanousd": "cost_nanousd",
            **{f"#{name}": name for name in TOKEN_FIELDS},
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


def _n(value: float) -> str:
    return f"{value:.3f}"


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))
