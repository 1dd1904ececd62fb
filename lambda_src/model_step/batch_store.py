"""The rows and submissions of the batch path, in the step's idempotency table.

Every item lives :attr:`~.batch_table.TableItems.lifetime` after its last write (see
:mod:`.batch_table`): a row is rewritten each time it joins a submission, so it outlives
every batch it can still be answered by.

- **row** ``<prefix>#batch-row#<custom_id>``: one staged key. ``event`` (the EventBridge
  event, JSON: row data, hence the TTL), ``user_message``, ``payload`` (sha256 of the
  canonical detail: a different payload under a waiting key is a mismatch), ``state``
  (``staged``), ``submission`` (the submission that owns it now), ``staged_at``,
  ``claimed`` (an attempt of the key's budget is claimed and no batch result has used it
  yet: the row goes again without a new claim), ``apply_failures`` / ``apply_error`` (its
  result line failed to apply). Once the key's outcome is stored and notified the row is
  deleted (:meth:`BatchStore.mark_answered`); a row written ``answered`` by an earlier
  version reads the same as an absent one.
- **submission** ``<prefix>#batch-submission#<id>``: a group of rows that is sent as one
  batch. ``state`` ``pending`` -> ``creating`` (``started_at``, ``sent_count``: the create
  may be in flight or uncertain; ``unseen_since``: a reconciliation found no batch) ->
  ``created`` (``batch_ids``) -> ``done`` (or ``merging`` / ``split`` into others);
  ``custom_ids`` (comma-separated), ``count`` (the rows it owns, recounted at its flush:
  :meth:`BatchStore.recount`), ``first_waited``, ``not_before``, ``mergeable`` (False
  for the halves of a refused create). A submission of more than :data:`IDS_PER_ITEM` rows
  keeps its custom_ids in ``parts`` items ``<prefix>#batch-submission#<id>#part#<n>``
  (``custom_ids``), written before it and never changed, and holds ``parts`` instead.
- **index** ``<prefix>#batch-index``: ``open``, the string set of submissions not done.

The batches themselves are in :mod:`.batch_ledger`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator

from botocore.exceptions import ClientError

from . import clock
from .batch_table import (
    CONDITION_FAILED,
    Item,
    TableItems,
    conditional,
    custom_id_of,
    number,
    text,
)

__all__ = ["BatchStore", "Item", "custom_id_of", "number", "submission_made_at", "text"]

ROW = "#batch-row#"
SUBMISSION = "#batch-submission#"
INDEX = "#batch-index"
#: custom_ids one item lists: 34 bytes each with its comma, 340 KB of DynamoDB's 400 KB.
IDS_PER_ITEM = 10_000
PART = "#part#"
_BATCH_GET = 100
_STAGED = {":staged": {"S": "staged"}}
_STATE = {"#state": "state"}


def _listed(item: Item) -> list[str]:
    """The comma-separated ``custom_ids`` of a submission or part item (none when empty)."""
    ids = text(item, "custom_ids") or ""
    return ids.split(",") if ids else []


class BatchStore(TableItems):
    """Reads and conditional writes of rows and submissions (see the module docstring)."""

    # -- rows ------------------------------------------------------------------------------
    def stage_row(
        self, custom_id: str, event_json: str, user_message: str, submission: str, payload: str
    ) -> Item | None:
        """Stage a row unless a staged one is live: None when staged now (its attempt is
        claimed next), else the live staged item. An answered row is replaced: its record
        expired, the key is new."""
        now = clock.now()
        item = {
            **self._key(ROW, custom_id),
            "event": {"S": event_json},
            "user_message": {"S": user_message},
            "payload": {"S": payload},
            "state": {"S": "staged"},
            "submission": {"S": submission},
            "staged_at": {"N": f"{now:.3f}"},
            "claimed": {"BOOL": True},
            "expiration": self._expiration(),
        }
        try:
            self._client.put_item(
                TableName=self._table,
                Item=item,
                ConditionExpression=(
                    "attribute_not_exists(id) OR expiration < :now OR #state = :answered"
                ),
                ExpressionAttributeNames=_STATE,
                ExpressionAttributeValues={
                    ":now": {"N": str(int(now))},
                    ":answered": {"S": "answered"},
                },
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != CONDITION_FAILED:
                raise
            found: Item = error.response.get("Item") or {}
            return found
        return None

    def move_row(self, custom_id: str, old: str, new: str, *, claimed: bool | None = None) -> bool:
        """Give a staged row to submission ``new`` if ``old`` still owns it (and record
        whether its attempt is ``claimed``, when given); its lifetime starts again."""
        expression = "SET submission = :new"
        values: Item = {":new": {"S": new}, ":old": {"S": old}, **_STAGED}
        if claimed is not None:
            expression += ", claimed = :claimed REMOVE apply_failures, apply_error"
            values[":claimed"] = {"BOOL": claimed}
        return conditional(
            lambda: self._update(
                self._key(ROW, custom_id),
                expression,
                values,
                ConditionExpression="submission = :old AND #state = :staged",
                ExpressionAttributeNames=_STATE,
            )
        )

    def adopt_orphan(self, custom_id: str, old: str, new: str) -> bool:
        """Give a staged row to ``new`` if its owner ``old`` does not exist: one transaction,
        so an owner written meanwhile (a slow duplicate of the same invocation's rows)
        keeps it, and the row is never in two submissions that both send it."""
        update = {
            "TableName": self._table,
            "Key": self._key(ROW, custom_id),
            "UpdateExpression": "SET submission = :new, expiration = :exp",
            "ConditionExpression": "submission = :old AND #state = :staged",
            "ExpressionAttributeNames": _STATE,
            "ExpressionAttributeValues": {
                ":new": {"S": new},
                ":old": {"S": old},
                ":exp": self._expiration(),
                **_STAGED,
            },
        }
        check = {
            "TableName": self._table,
            "Key": self._key(SUBMISSION, old),
            "ConditionExpression": "attribute_not_exists(id)",
        }
        return conditional(
            lambda: self._client.transact_write_items(
                TransactItems=[{"ConditionCheck": check}, {"Update": update}]
            ),
            "TransactionCanceledException",
        )

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
                    expiration = number(item, "expiration")
                    if expiration is None or expiration >= now:
                        yield str(item["id"]["S"]).rsplit("#", 1)[-1], item
                keys = response.get("UnprocessedKeys", {}).get(self._table, {}).get("Keys", [])

    def close_claim(self, custom_id: str) -> bool:
        """A batch result used the row's claimed attempt: True for the first result only,
        so a result read again (or a second batch's, after an uncertain create) changes
        the key's budget once."""
        return conditional(
            lambda: self._update(
                self._key(ROW, custom_id),
                "SET claimed = :no",
                {":no": {"BOOL": False}, ":yes": {"BOOL": True}, **_STAGED},
                ConditionExpression=(
                    "#state = :staged AND (attribute_not_exists(claimed) OR claimed = :yes)"
                ),
                ExpressionAttributeNames=_STATE,
            )
        )

    def note_apply_failure(self, custom_id: str, code: str) -> int:
        """The row's result line failed to apply with ``code``: the failures so far (0 when
        the row is gone)."""
        try:
            response = self._update(
                self._key(ROW, custom_id),
                "SET apply_error = :code ADD apply_failures :one",
                {":code": {"S": code}, ":one": {"N": "1"}},
                ConditionExpression="attribute_exists(id)",
                ReturnValues="UPDATED_NEW",
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != CONDITION_FAILED:
                raise
            return 0
        return int(number(response.get("Attributes", {}), "apply_failures") or 0)

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
        self._update(
            self._key(INDEX),
            "ADD #open :one",
            {":one": {"SS": [submission]}},
            ExpressionAttributeNames={"#open": "open"},
        )
        listed: Item
        if len(custom_ids) > IDS_PER_ITEM:
            parts = range(0, len(custom_ids), IDS_PER_ITEM)
            for number_, start in enumerate(parts):
                self._client.put_item(
                    TableName=self._table,
                    Item={
                        **self._key(SUBMISSION, f"{submission}{PART}{number_}"),
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

    def recount(self, submission: str, custom_ids: list[str]) -> int:
        """The rows of ``custom_ids`` that a just-written pending ``submission`` owns, made
        its ``count`` when fewer. While it was unwritten, a concurrent copy of a row could
        adopt the row (:meth:`adopt_orphan`); read once it exists, none can any more. A
        count above its rows keeps a full batch of them apart (merges go by counts), so
        it would wait out ``BATCH_MAX_WAIT_SECONDS`` instead of going at once."""
        owned = sum(
            1
            for _, row in self.rows(custom_ids)
            if text(row, "submission") == submission and text(row, "state") == "staged"
        )
        if owned < len(custom_ids):
            conditional(
                lambda: self._update(
                    self._key(SUBMISSION, submission),
                    "SET #count = :count",
                    {":count": {"N": str(owned)}, ":pending": {"S": "pending"}},
                    ConditionExpression="#state = :pending",
                    ExpressionAttributeNames={"#count": "count", **_STATE},
                )
            )
        return owned

    def custom_ids(self, submission: str, item: Item) -> list[str]:
        """The custom_ids a submission lists, in order: from its item, or from its parts
        (consistent reads; they were written before the item and never change)."""
        parts = number(item, "parts")
        if parts is None:
            return _listed(item)
        ids: list[str] = []
        for part_number in range(int(parts)):
            part = self._get(self._key(SUBMISSION, f"{submission}{PART}{part_number}"))
            if part is None:  # written before the item, with the same lifetime
                raise RuntimeError(f"submission {submission} has lost part {part_number}")
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
        names = dict(_STATE)
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
        return conditional(
            lambda: self._update(
                self._key(SUBMISSION, submission),
                "SET " + ", ".join(sets),
                attributes,
                ConditionExpression="#state = :from",
                ExpressionAttributeNames=names,
            )
        )

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


def submission_made_at(submission: str) -> float:
    """The epoch second a submission id was made (0 for an id of another form)."""
    head = submission[:10]
    return float(head) if head.isdigit() else 0.0
