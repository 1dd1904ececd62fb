"""The batch path's items in the step's idempotency table: keys, lifetimes, attribute reads.

Every item is keyed under the step's record prefix and carries ``expiration`` (the table's
TTL attribute), set :attr:`TableItems.lifetime` seconds after each write, so an item lives
as long as it is in use and then a lifetime more; an item past its ``expiration`` reads as
absent (DynamoDB deletes expired items lazily).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from . import clock

Item = dict[str, Any]
CONDITION_FAILED = "ConditionalCheckFailedException"


def custom_id_of(record_id: str) -> str:
    """The ``custom_id`` of a record: ``k`` + 32 url-safe base64 characters of its sha256
    (``[a-zA-Z0-9_-]``, 33 characters, so well within the API's 64). Distinct record keys
    give distinct custom_ids, so they are unique within any batch."""
    digest = hashlib.sha256(record_id.encode()).digest()[:24]
    return "k" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def text(item: Item, name: str) -> str | None:
    """A string attribute of an item."""
    value = item.get(name)
    return None if value is None else str(value.get("S"))


def number(item: Item, name: str) -> float | None:
    """A number attribute of an item."""
    value = item.get(name)
    return None if value is None else float(value["N"])


def flag(item: Item, name: str) -> bool:
    """A boolean attribute of an item (absent: False)."""
    return bool(item.get(name, {}).get("BOOL"))


def strings(item: Item, name: str) -> list[str]:
    """A string-set attribute of an item (absent: empty), sorted."""
    return sorted(item.get(name, {}).get("SS", []))


def conditional(write: Callable[[], Any], code: str = CONDITION_FAILED) -> bool:
    """Run a conditional write: True when it applied, False when its condition failed
    (``code``); any other error is raised."""
    try:
        write()
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != code:
            raise
        return False
    return True


class TableItems:
    """Reads and writes of one kind of batch item (see the module docstring)."""

    def __init__(self, client: Any, table: str, prefix: str, lifetime: int) -> None:
        self._client = client
        self._table = table
        self._prefix = prefix
        #: Seconds an item lives after its last write.
        self.lifetime = lifetime

    def _key(self, kind: str, name: str = "") -> Item:
        return {"id": {"S": self._prefix + kind + name}}

    def _expiration(self, at: float | None = None) -> Item:
        """The TTL value of an item written now (or kept until ``at``, if later)."""
        until = clock.now() + self.lifetime
        return {"N": str(int(max(until, at or 0.0)))}

    def _get(self, key: Item) -> Item | None:
        item: Item | None = self._client.get_item(
            TableName=self._table, Key=key, ConsistentRead=True
        ).get("Item")
        if item is None:
            return None
        expiration = number(item, "expiration")
        return None if expiration is not None and expiration < clock.now() else item

    def _update(self, key: Item, expression: str, values: Item, **extra: Any) -> Any:
        """An UpdateItem that also moves the item's expiration to a lifetime from now."""
        names = dict(extra.pop("ExpressionAttributeNames", {}))
        names["#expiration"] = "expiration"
        head, _, rest = expression.partition(" ")
        if head == "SET":
            expression = f"SET #expiration = :expiration, {rest}"
        else:
            expression = f"SET #expiration = :expiration {expression}"
        return self._client.update_item(
            TableName=self._table,
            Key=key,
            UpdateExpression=expression,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues={**values, ":expiration": self._expiration()},
            **extra,
        )
