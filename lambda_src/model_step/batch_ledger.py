"""The batches of the batch path, and the tick's lease, in the step's idempotency table.

- **batch** ``<prefix>#batch#<batch id>``: a created or adopted batch: ``submissions``
  (string set), ``created_at``, ``created`` (a create of this step answered with it),
  ``adopted`` (a reconciliation found it), ``collected`` (every result line is applied),
  ``lost`` (unknown or open past its bound: its rows went back), ``deleted`` (deleted at
  the provider); while calls about it fail: ``failures``, ``last_error``, ``retry_at``
  (its own schedule) and ``missing_since`` (the provider has answered "not found" since).
- **ledger** ``<prefix>#batch-ledger``: ``deleting``, the batches collected but not yet
  deleted at the provider; ``late``, the lost batches still looked at in case they end and
  answer after all (until their results are archived).
- **lease** ``<prefix>#batch-lease``: one tick at a time reconciles and collects.

A lost batch's item is kept until its results are archived at the provider (29 days after
its creation), however long the key's memory is.
"""

from __future__ import annotations

import uuid
from typing import Any

from . import batch_limits, clock
from .batch_table import Item, TableItems, conditional, flag, number, strings

BATCH = "#batch#"
LEDGER = "#batch-ledger"
LEASE = "#batch-lease"


class BatchLedger(TableItems):
    """Reads and writes of batch items, the ledger and the lease (see the module
    docstring)."""

    # -- batches ---------------------------------------------------------------------------
    def record_batch(
        self, batch_id: str, submission: str, created_at: float, *, adopted: bool = False
    ) -> None:
        """Record that ``submission`` owns ``batch_id``: created it (the create answered),
        or ``adopted`` it [False] when reconciling an uncertain create. An adopted batch
        may be another workload's on the same API key (nothing in a batch names who made
        it): unless a create of this step answered with it too, it is never canceled, and
        deleted only when every result was one of its submission's rows."""
        mark = "adopted" if adopted else "created"
        self._update(
            self._key(BATCH, batch_id),
            f"SET created_at = if_not_exists(created_at, :created), {mark} = :yes "
            "ADD submissions :one",
            {
                ":one": {"SS": [submission]},
                ":created": {"N": f"{created_at:.3f}"},
                ":yes": {"BOOL": True},
            },
        )

    @staticmethod
    def adopted(record: Item) -> bool:
        """The batch was only found by a reconciliation: no create of this step answered
        with it, so it may be another workload's."""
        return flag(record, "adopted") and not flag(record, "created")

    def batch(self, batch_id: str) -> Item | None:
        """The live batch item."""
        return self._get(self._key(BATCH, batch_id))

    def collected(self, batch_id: str, *, delete: bool) -> None:
        """Every result line of the batch is applied: it is done and, with ``delete``,
        listed for deletion at the provider (the list is written first, so a kill between
        the two writes leaves a batch to delete, never one forgotten)."""
        if delete:
            self._ledger("ADD deleting :one", batch_id)
        self._update(
            self._key(BATCH, batch_id),
            "SET collected = :yes REMOVE failures, retry_at, missing_since, last_error",
            {":yes": {"BOOL": True}},
        )

    def deleted(self, batch_id: str) -> None:
        """The provider deleted the batch (or never had it any more)."""
        self._update(self._key(BATCH, batch_id), "SET deleted = :yes", {":yes": {"BOOL": True}})
        self.not_deleting(batch_id)

    def not_deleting(self, batch_id: str) -> None:
        """Take the batch off the list of batches to delete (its item may be gone)."""
        self._ledger("DELETE deleting :one", batch_id)

    def note_failure(self, batch_id: str, code: str, retry_after: float | None) -> float:
        """A call about the batch failed with ``code``: count it and set when the batch is
        tried again (:func:`.batch_limits.backoff_seconds`); returns that time."""
        response = self._update(
            self._key(BATCH, batch_id),
            "SET last_error = :code ADD failures :one",
            {":code": {"S": code}, ":one": {"N": "1"}},
            ReturnValues="ALL_NEW",
        )
        failures = int(number(response.get("Attributes", {}), "failures") or 1)
        retry_at = clock.now() + batch_limits.backoff_seconds(failures, retry_after)
        self.defer(batch_id, retry_at)
        return retry_at

    def defer(self, batch_id: str, until: float) -> None:
        """Look at the batch again no sooner than ``until`` (its lifetime unchanged: a lost
        batch's is set by :meth:`lose`)."""
        self._client.update_item(
            TableName=self._table,
            Key=self._key(BATCH, batch_id),
            UpdateExpression="SET retry_at = :at",
            ConditionExpression="attribute_exists(id)",
            ExpressionAttributeValues={":at": {"N": f"{until:.3f}"}},
        )

    def note_missing(self, batch_id: str) -> float:
        """The provider answered "not found" for the batch: since when it has (this call
        sets it the first time)."""
        response = self._update(
            self._key(BATCH, batch_id),
            "SET missing_since = if_not_exists(missing_since, :now)",
            {":now": {"N": f"{clock.now():.3f}"}},
            ReturnValues="ALL_NEW",
        )
        return number(response.get("Attributes", {}), "missing_since") or clock.now()

    def note_seen(self, record: Item, batch_id: str) -> None:
        """The provider answered for the batch: its trouble, if any, is over."""
        if any(name in record for name in ("missing_since", "failures", "retry_at")):
            self._update(
                self._key(BATCH, batch_id),
                "REMOVE missing_since, failures, retry_at, last_error",
                {},
            )

    def lose(self, batch_id: str, created_at: float) -> None:
        """The batch is lost: done for its submission, and listed as late (looked at until
        its results would be archived, so the item is kept that long)."""
        keep = created_at + batch_limits.RESULTS_KEPT_SECONDS
        self._client.update_item(
            TableName=self._table,
            Key=self._key(BATCH, batch_id),
            UpdateExpression="SET lost = :yes, collected = :yes, expiration = :keep",
            ExpressionAttributeValues={":yes": {"BOOL": True}, ":keep": self._expiration(keep)},
        )
        self._ledger("ADD late :one", batch_id)

    def late_done(self, batch_id: str) -> None:
        """A late batch is read (or its results are archived): no more looks."""
        self._ledger("DELETE late :one", batch_id)

    def ledger(self) -> tuple[list[str], list[str]]:
        """``(deleting, late)`` batch ids."""
        item = self._get(self._key(LEDGER)) or {}
        return strings(item, "deleting"), strings(item, "late")

    def _ledger(self, expression: str, batch_id: str) -> None:
        if expression.startswith("DELETE"):
            self._client.update_item(
                TableName=self._table,
                Key=self._key(LEDGER),
                UpdateExpression=expression,
                ExpressionAttributeValues={":one": {"SS": [batch_id]}},
            )
            return
        self._update(self._key(LEDGER), expression, {":one": {"SS": [batch_id]}})

    # -- the tick's lease ------------------------------------------------------------------
    def take_lease(self, seconds: float) -> str | None:
        """A lease for ``seconds``, or None while another tick holds one."""
        token = uuid.uuid4().hex
        now = clock.now()
        item: dict[str, Any] = {
            **self._key(LEASE),
            "holder": {"S": token},
            "until": {"N": f"{now + seconds:.3f}"},
            "expiration": {"N": str(int(now + seconds) + 3600)},
        }
        taken = conditional(
            lambda: self._client.put_item(
                TableName=self._table,
                Item=item,
                ConditionExpression="attribute_not_exists(id) OR #until < :now",
                ExpressionAttributeNames={"#until": "until"},
                ExpressionAttributeValues={":now": {"N": f"{now:.3f}"}},
            )
        )
        return token if taken else None

    def release_lease(self, token: str) -> None:
        """Give the lease back (only the holder's own)."""
        conditional(
            lambda: self._client.delete_item(
                TableName=self._table,
                Key=self._key(LEASE),
                ConditionExpression="holder = :token",
                ExpressionAttributeValues={":token": {"S": token}},
            )
        )
