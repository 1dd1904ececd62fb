"""The items of the Message Batches delivery, in the step's idempotency table.

Every item is keyed under the step's record prefix and carries ``expiration`` (the table's
TTL attribute): ``IDEMPOTENCY_EXPIRES_AFTER_SECONDS`` plus :data:`BATCH_RETENTION_SECONDS`,
so a row outlives a batch that takes its full 24 h and its collection.

- **row** ``<prefix>#batch-row#<custom_id>``: one staged key. ``event`` (the EventBridge
  event, JSON: row data, hence the TTL), ``user_message``, ``state`` (``staged``),
  ``submission`` (the submission that owns it now), ``staged_at``. Once the key's outcome is
  stored and notified the row is deleted (:meth:`BatchStore.mark_answered`); a row written
  ``answered`` by an earlier version reads the same as an absent one.
- **submission** ``<prefix>#batch-submission#<id>``: a group of rows that is sent as one
  Message Batch. ``state`` ``pending`` → ``creating`` (``started_at``, ``sent_count``: the
  create may be in flight or uncertain) → ``created`` (``batch_ids``) → ``done`` (or
  ``merging`` / ``split`` into others); ``custom_ids`` (comma-separated), ``first_waited``,
  ``not_before``, ``mergeable`` (False for the halves of a refused create). A submission
  of more than :data:`IDS_PER_ITEM` rows keeps its custom_ids in ``parts`` items
  ``<prefix>#batch-submission#<id>#part#<n>`` (``custom_ids``), written before it and
  never changed, and holds ``parts`` (their number) instead.
- **batch** ``<prefix>#batch#<batch id>``: a created or adopted batch: ``submissions``
  (string set), ``created_at``, ``lines_done`` (the results-stream checkpoint),
  ``collected``, ``adopted`` (found by a reconciliation, not answered by a create).
- **index** ``<prefix>#batch-index``: ``open``, the string set of submissions not done.
- **lease** ``<prefix>#batch-lease``: one tick at a time reconciles and collects.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from botocore.exceptions import ClientError

from . import clock

ROW = "#batch-row#"
SUBMISSION = "#batch-submission#"
BATCH = "#batch#"
INDEX = "#batch-index"
LEASE = "#batch-lease"
#: Extra lifetime of the batch items over the record expiry: a batch's 24 h plus a day.
BATCH_RETENTION_SECONDS = 2 * 86_400
#: custom_ids one item lists: 34 bytes each with its comma, 340 KB of DynamoDB's 400 KB.
IDS_PER_ITEM = 10_000
PART = "#part#"
_BATCH_GET = 100

Item = dict[str, Any]


def custom_id_of(record_id: str) -> str:
    """The ``custom_id`` of a record: ``k`` + 32 url-safe base64 characters of its sha256
    (``[a-zA-Z0-9_-]``, 33 characters, so well within the API's 64). Distinct record keys
    give distinct custom_ids, so they are unique within any batch."""
    digest = hashlib.sha256(record_id.encode()).digest()[:24]
    return "k" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _s(item: Item, name: str) -> str | None:
    value = item.get(name)
    return None if value is None else str(value.get("S"))


def _listed(item: Item) -> list[str]:
    """The comma-separated ``custom_ids`` of a submission or part item (none when empty)."""
    text = _s(item, "custom_ids") or ""
    return text.split(",") if text else []


def _n(item: Item, name: str) -> float | None:
    value = item.get(name)
    return None if value is None else float(value["N"])


class BatchStore:
    """Reads and conditional writes of the batch items (see the module docstring)."""

    def __init__(self, client: Any, table: str, prefix: str, expires_after: int) -> None:
        self._client = client
        self._table = table
        self._prefix = prefix
        self._expires_after = expires_after + BATCH_RETENTION_SECONDS

    def _key(self, kind: str, name: str = "") -> Item:
        return {"id": {"S": self._prefix + kind + name}}

    def _expiration(self) -> Item:
        return {"N": str(int(clock.now()) + self._expires_after)}

    def _get(self, key: Item) -> Item | None:
        item: Item | None = self._client.get_item(
            TableName=self._table, Key=key, ConsistentRead=True
        ).get("Item")
        if item is None:
            return None
        expiration = _n(item, "expiration")
        return None if expiration is not None and expiration < clock.now() else item

    # -- rows ------------------------------------------------------------------------------
    def stage_row(
        self, custom_id: str, event_json: str, user_message: str, submission: str
    ) -> Item | None:
        """Stage a row unless a staged one is live: None when staged now, else the live
        staged item. An answered row is replaced: its record expired, the key is new."""
        try:
            self._client.put_item(
                TableName=self._table,
                Item={
                    **self._key(ROW, custom_id),
                    "event": {"S": event_json},
                    "user_message": {"S": user_message},
                    "state": {"S": "staged"},
                    "submission": {"S": submission},
                    "staged_at": {"N": f"{clock.now():.3f}"},
                    "expiration": self._expiration(),
                },
                ConditionExpression=(
                    "attribute_not_exists(id) OR expiration < :now OR #state = :answered"
                ),
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues={
                    ":now": {"N": str(int(clock.now()))},
                    ":answered": {"S": "answered"},
                },
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            found: Item = error.response.get("Item") or {}
            return found
        return None

    def move_row(self, custom_id: str, old: str, new: str) -> bool:
        """Give a staged row to submission ``new`` if ``old`` still owns it."""
        try:
            self._client.update_item(
                TableName=self._table,
                Key=self._key(ROW, custom_id),
                UpdateExpression="SET submission = :new",
                ConditionExpression="submission = :old AND #state = :staged",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues={
                    ":new": {"S": new},
                    ":old": {"S": old},
                    ":staged": {"S": "staged"},
                },
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            return False
        return True

    def adopt_orphan(self, custom_id: str, old: str, new: str) -> bool:
        """Give a staged row to ``new`` if its owner ``old`` does not exist: one transaction,
        so an owner written meanwhile (a slow duplicate of the same invocation's rows)
        keeps it, and the row is never in two submissions that both send it."""
        try:
            self._client.transact_write_items(
                TransactItems=[
                    {
                        "ConditionCheck": {
                            "TableName": self._table,
                            "Key": self._key(SUBMISSION, old),
                            "ConditionExpression": "attribute_not_exists(id)",
                        }
                    },
                    {
                        "Update": {
                            "TableName": self._table,
                            "Key": self._key(ROW, custom_id),
                            "UpdateExpression": "SET submission = :new",
                            "ConditionExpression": "submission = :old AND #state = :staged",
                            "ExpressionAttributeNames": {"#state": "state"},
                            "ExpressionAttributeValues": {
                                ":new": {"S": new},
                                ":old": {"S": old},
                                ":staged": {"S": "staged"},
                            },
                        }
                    },
                ]
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "TransactionCanceledException":
                raise
            return False
        return True

    def rows(self, custom_ids: Iterable[str]) -> Iterator[tuple[str, Item]]:
        """``(custom_id, item)`` of the live rows among ``custom_ids``, 100 reads a call."""
        names = list(dict.fromkeys(custom_ids))
        now = clock.now()
        for start in range(0, len(names), _BATCH_GET):
            keys = [self._key(ROW, name) for name in names[start : start + _BATCH_GET]]
            while keys:
                response = self._client.batch_get_item(
                    RequestItems={self._table: {"Keys": keys, "ConsistentRead": True}}
                )
                for item in response.get("Responses", {}).get(self._table, []):
                    expiration = _n(item, "expiration")
                    if expiration is None or expiration >= now:
                        yield str(item["id"]["S"]).rsplit("#", 1)[-1], item
                keys = response.get("UnprocessedKeys", {}).get(self._table, {}).get("Keys", [])

    def mark_answered(self, custom_id: str) -> None:
        """The key's outcome is stored and notified: the row is done, so it is deleted (its
        event and user message, row data, go with it). An absent row reads as answered
        everywhere: a duplicate replays the key's stored record, a collector skips it, and a
        key whose record has expired is staged afresh."""
        self._client.delete_item(TableName=self._table, Key=self._key(ROW, custom_id))

    # -- submissions -----------------------------------------------------------------------
    def new_submission_id(self) -> str:
        """A fresh submission id: the epoch second it was made (10 digits), then 22 random
        hex digits, so a tick can tell an index entry being written from an abandoned one."""
        return f"{int(clock.now()):010d}{uuid.uuid4().hex[:22]}"

    def put_submission(
        self,
        submission: str,
        custom_ids: list[str],
        first_waited: float,
        *,
        mergeable: bool = True,
    ) -> None:
        """List a submission in the index, then write its parts (more than
        :data:`IDS_PER_ITEM` rows), then write it pending. In this order: a crash before the
        last write leaves an index entry without an item (the tick drops it, and the rows,
        whose owner does not exist, are adopted by their redelivery), never an item no tick
        can find or one whose rows cannot be read."""
        self._client.update_item(
            TableName=self._table,
            Key=self._key(INDEX),
            UpdateExpression="ADD #open :one SET expiration = :exp",
            ExpressionAttributeNames={"#open": "open"},
            ExpressionAttributeValues={":one": {"SS": [submission]}, ":exp": self._expiration()},
        )
        listed: Item
        if len(custom_ids) > IDS_PER_ITEM:
            parts = range(0, len(custom_ids), IDS_PER_ITEM)
            for number, start in enumerate(parts):
                self._client.put_item(
                    TableName=self._table,
                    Item={
                        **self._key(SUBMISSION, f"{submission}{PART}{number}"),
                        "custom_ids": {"S": ",".join(custom_ids[start : start + IDS_PER_ITEM])},
                        "expiration": self._expiration(),
                    },
                )
            listed = {"parts": {"N": str(len(parts))}}
        else:
            listed = {"custom_ids": {"S": ",".join(custom_ids)}}
        self._client.put_item(
            TableName=self._table,
            Item={
                **self._key(SUBMISSION, submission),
                "state": {"S": "pending"},
                **listed,
                "count": {"N": str(len(custom_ids))},
                "first_waited": {"N": f"{first_waited:.3f}"},
                "mergeable": {"BOOL": mergeable},
                "expiration": self._expiration(),
            },
        )

    def custom_ids(self, submission: str, item: Item) -> list[str]:
        """The custom_ids a submission lists, in order: from its item, or from its parts
        (consistent reads; they were written before the item and never change)."""
        parts = _n(item, "parts")
        if parts is None:
            return _listed(item)
        ids: list[str] = []
        for number in range(int(parts)):
            part = self._get(self._key(SUBMISSION, f"{submission}{PART}{number}"))
            if part is None:  # written before the item, with the same lifetime
                raise RuntimeError(f"submission {submission} has lost part {number}")
            ids.extend(_listed(part))
        return ids

    def submission(self, submission: str) -> Item | None:
        """The live submission item."""
        return self._get(self._key(SUBMISSION, submission))

    def transition(
        self, submission: str, from_state: str, to_state: str, **values: str | float | list[str]
    ) -> bool:
        """Move a submission from ``from_state`` to ``to_state`` (setting ``values``); False
        when it is no longer in ``from_state`` (another invocation moved it)."""
        names = {"#state": "state"}
        attributes: Item = {":from": {"S": from_state}, ":to": {"S": to_state}}
        sets = ["#state = :to"]
        for index, (name, value) in enumerate(values.items()):
            names[f"#v{index}"] = name
            if isinstance(value, list):
                attributes[f":v{index}"] = {"SS": value} if value else {"NULL": True}
            elif isinstance(value, str):
                attributes[f":v{index}"] = {"S": value}
            else:
                attributes[f":v{index}"] = {"N": f"{value:.3f}"}
            sets.append(f"#v{index} = :v{index}")
        try:
            self._client.update_item(
                TableName=self._table,
                Key=self._key(SUBMISSION, submission),
                UpdateExpression="SET " + ", ".join(sets),
                ConditionExpression="#state = :from",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=attributes,
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            return False
        return True

    def open_submissions(self) -> list[str]:
        """Submissions listed as not done."""
        item = self._get(self._key(INDEX)) or {}
        return sorted(item.get("open", {}).get("SS", []))

    def close_submission(self, submission: str) -> None:
        """Take a done submission off the index."""
        self._client.update_item(
            TableName=self._table,
            Key=self._key(INDEX),
            UpdateExpression="DELETE #open :one",
            ExpressionAttributeNames={"#open": "open"},
            ExpressionAttributeValues={":one": {"SS": [submission]}},
        )

    # -- batches ---------------------------------------------------------------------------
    def record_batch(
        self, batch_id: str, submission: str, created_at: float, *, adopted: bool = False
    ) -> None:
        """Record that ``submission`` owns ``batch_id``: created it (the create answered),
        or ``adopted`` it [False] when reconciling an uncertain create. An adopted batch
        may be another workload's on the same API key (nothing in a batch names who made
        it), so it is marked, and never canceled (:meth:`adopted`)."""
        expression = (
            "ADD submissions :one SET created_at = if_not_exists(created_at, :created), "
            "lines_done = if_not_exists(lines_done, :zero), expiration = :exp"
        )
        values: Item = {
            ":one": {"SS": [submission]},
            ":created": {"N": f"{created_at:.3f}"},
            ":zero": {"N": "0"},
            ":exp": self._expiration(),
        }
        if adopted:
            expression += ", adopted = :yes"
            values[":yes"] = {"BOOL": True}
        self._client.update_item(
            TableName=self._table,
            Key=self._key(BATCH, batch_id),
            UpdateExpression=expression,
            ExpressionAttributeValues=values,
        )

    @staticmethod
    def adopted(record: Item) -> bool:
        """The batch item says its batch was adopted by a reconciliation."""
        return bool(record.get("adopted", {}).get("BOOL"))

    def batch(self, batch_id: str) -> Item | None:
        """The live batch item."""
        return self._get(self._key(BATCH, batch_id))

    def checkpoint(self, batch_id: str, lines_done: int, *, collected: bool = False) -> None:
        """Results up to line ``lines_done`` are applied (and, at the end, all of them)."""
        expression = "SET lines_done = :lines"
        values: Item = {":lines": {"N": str(lines_done)}}
        if collected:
            expression += ", collected = :yes"
            values[":yes"] = {"BOOL": True}
        self._client.update_item(
            TableName=self._table,
            Key=self._key(BATCH, batch_id),
            UpdateExpression=expression,
            ExpressionAttributeValues=values,
        )

    # -- the tick's lease ------------------------------------------------------------------
    def take_lease(self, seconds: float) -> str | None:
        """A lease for ``seconds``, or None while another tick holds one."""
        token = uuid.uuid4().hex
        now = clock.now()
        try:
            self._client.put_item(
                TableName=self._table,
                Item={
                    **self._key(LEASE),
                    "holder": {"S": token},
                    "until": {"N": f"{now + seconds:.3f}"},
                    "expiration": {"N": str(int(now + seconds) + 3600)},
                },
                ConditionExpression="attribute_not_exists(id) OR #until < :now",
                ExpressionAttributeNames={"#until": "until"},
                ExpressionAttributeValues={":now": {"N": f"{now:.3f}"}},
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            return None
        return token

    def release_lease(self, token: str) -> None:
        """Give the lease back (only the holder's own)."""
        try:
            self._client.delete_item(
                TableName=self._table,
                Key=self._key(LEASE),
                ConditionExpression="holder = :token",
                ExpressionAttributeValues={":token": {"S": token}},
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise


def submission_made_at(submission: str) -> float:
    """The epoch second a submission id was made (0 for an id of another form)."""
    head = submission[:10]
    return float(head) if head.isdigit() else 0.0


def text(item: Item, name: str) -> str | None:
    """A string attribute of an item."""
    return _s(item, name)


def number(item: Item, name: str) -> float | None:
    """A number attribute of an item."""
    return _n(item, name)
