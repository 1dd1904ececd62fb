"""RowsTable: the one copy of an uploaded row's values outside the upload bucket.

Row events, dead letters and failure records carry ids and codes only (``upload_id``,
``row_number``, ``error_code``; issue 18). The values live here, one item per data row
(pk ``upload_id`` S, sk ``row_number`` N), written by the splitter before the row's event is
published, and read where they are needed: the classifier's prompt and the viewer's page.
Every item expires (TTL ``expires_at``) ``ROW_RETENTION_DAYS`` after it was written, the
stack's ``upload_retention_days``: the rows go when the CSV they came from goes.

Items: a valid row holds its trimmed fields (:data:`~.events.PROSPECT_FIELDS`); an invalid
row holds ``raw_row`` (the record re-serialised as CSV, at most :data:`RAW_ROW_MAX_CHARS`)
and its ``error_code``. The splitter's retry writes the same values again (a put converges).

Low-level DynamoDB clients only, passed in; no boto3 import (the CDK app imports
``prospect_contract``).
"""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .events import PROSPECT_FIELDS
from .expiry import expired

#: Environment variable of every function that reads or writes RowsTable.
ROWS_TABLE_ENV = "ROWS_TABLE_NAME"
#: Days a row is kept (the splitter's TTL); the stack sets it to ``upload_retention_days``.
ROW_RETENTION_DAYS_ENV = "ROW_RETENTION_DAYS"
DEFAULT_ROW_RETENTION_DAYS = 30
#: An invalid row's stored CSV text is cut here (a row is at most 7 fields of 1,000).
RAW_ROW_MAX_CHARS = 2000
#: BatchWriteItem takes 25 puts a call, BatchGetItem 100 keys.
WRITE_BATCH = 25
READ_BATCH = 100
#: Unprocessed items are retried this many times, backing off from 50 ms, before raising.
MAX_UNPROCESSED_ROUNDS = 8

RowKey = tuple[str, int]


class RowsUnprocessed(Exception):
    """DynamoDB kept answering part of a batch as unprocessed (throttled): the caller's
    retry (a split retried whole, a page reloaded) writes or reads them again."""


def csv_text(fields: Iterable[str], limit: int = RAW_ROW_MAX_CHARS) -> str:
    """``fields`` as one CSV record, cut to ``limit`` characters."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="").writerow(list(fields))
    return buffer.getvalue()[:limit]


def valid_row_item(
    upload_id: str, row_number: int, values: Mapping[str, str], expires_at: int
) -> dict[str, Any]:
    """The item of a valid row: its trimmed fields."""
    item = _key(upload_id, row_number)
    item.update({name: {"S": str(values.get(name, ""))} for name in PROSPECT_FIELDS})
    item["expires_at"] = {"N": str(expires_at)}
    return item


def invalid_row_item(
    upload_id: str, row_number: int, raw_row: str, error_code: str, expires_at: int
) -> dict[str, Any]:
    """The item of an invalid row: its CSV text (cut to RAW_ROW_MAX_CHARS) and code."""
    item = _key(upload_id, row_number)
    item["raw_row"] = {"S": raw_row[:RAW_ROW_MAX_CHARS]}
    item["error_code"] = {"S": error_code}
    item["expires_at"] = {"N": str(expires_at)}
    return item


def fields_of(item: Mapping[str, Any]) -> dict[str, str]:
    """A valid row's fields from its (low-level) item."""
    return {name: str((item.get(name) or {}).get("S", "")) for name in PROSPECT_FIELDS}


def display_text(item: Mapping[str, Any]) -> str:
    """What the viewer shows for a row: an invalid row's CSV text, else its fields as CSV."""
    raw = item.get("raw_row")
    if isinstance(raw, Mapping) and "S" in raw:
        return str(raw["S"])
    return csv_text(fields_of(item).values())


def _key(upload_id: str, row_number: int) -> dict[str, Any]:
    return {"upload_id": {"S": str(upload_id)}, "row_number": {"N": str(int(row_number))}}


class RowWriter:
    """Buffers row items and writes them 25 to a BatchWriteItem call.

    :meth:`flush` returns once every buffered item is written, so a caller that publishes a
    row's event only after a flush never publishes a row the classifier cannot read.
    """

    def __init__(self, dynamodb: Any, table_name: str) -> None:
        self._dynamodb = dynamodb
        self._table_name = table_name
        self._pending: dict[RowKey, dict[str, Any]] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, item: dict[str, Any]) -> None:
        """Buffer one item (a later item for the same row replaces an unwritten one)."""
        key = (str(item["upload_id"]["S"]), int(item["row_number"]["N"]))
        self._pending[key] = item

    def flush(self) -> None:
        """Write every buffered item; raises :class:`RowsUnprocessed` when DynamoDB keeps
        some unprocessed, or the client's error."""
        items = list(self._pending.values())
        self._pending.clear()
        for start in range(0, len(items), WRITE_BATCH):
            requests = [
                {"PutRequest": {"Item": item}} for item in items[start : start + WRITE_BATCH]
            ]
            self._write(requests)

    def _write(self, requests: list[dict[str, Any]]) -> None:
        def write(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
            response = self._dynamodb.batch_write_item(RequestItems={self._table_name: requests})
            return list((response.get("UnprocessedItems") or {}).get(self._table_name) or [])

        _until_processed(write, requests, "row item(s)")


class RowReader:
    """Reads rows: one (GetItem, consistent) or many (BatchGetItem, 100 keys a call). A row
    past its ``expires_at`` is absent, though DynamoDB may not have deleted it yet (issue
    34): the classifier records ``RowNotFound``, the viewer shows no values and answers a
    retry ``RowExpired``, as they would a day later."""

    def __init__(
        self, dynamodb: Any, table_name: str, clock: Callable[[], float] = time.time
    ) -> None:
        """``clock()``: epoch seconds, compared with each item's ``expires_at``."""
        self._dynamodb = dynamodb
        self._table_name = table_name
        self._clock = clock

    def get(self, upload_id: str, row_number: int) -> dict[str, Any] | None:
        """The row's item, or None when it is not there (expired, or never written)."""
        response = self._dynamodb.get_item(
            TableName=self._table_name, Key=_key(upload_id, row_number), ConsistentRead=True
        )
        item = response.get("Item")
        return dict(item) if item and not expired(item, self._clock()) else None

    def get_many(self, keys: Iterable[RowKey]) -> dict[RowKey, dict[str, Any]]:
        """The items of ``keys`` that exist and have not expired, by key."""
        unique = list(dict.fromkeys((str(u), int(r)) for u, r in keys))
        found: dict[RowKey, dict[str, Any]] = {}
        now = self._clock()

        def read(keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
            response = self._dynamodb.batch_get_item(
                RequestItems={self._table_name: {"Keys": keys, "ConsistentRead": True}}
            )
            for item in (response.get("Responses") or {}).get(self._table_name) or []:
                if not expired(item, now):
                    found[(str(item["upload_id"]["S"]), int(item["row_number"]["N"]))] = item
            unprocessed = (response.get("UnprocessedKeys") or {}).get(self._table_name) or {}
            return list(unprocessed.get("Keys") or [])

        for start in range(0, len(unique), READ_BATCH):
            batch = [_key(u, r) for u, r in unique[start : start + READ_BATCH]]
            _until_processed(read, batch, "row key(s)")
        return found


def _until_processed(
    call: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
    pending: list[dict[str, Any]],
    what: str,
) -> None:
    """Call ``call`` with ``pending`` and then with what it answers unprocessed, backing off
    from 50 ms, at most MAX_UNPROCESSED_ROUNDS times; raises :class:`RowsUnprocessed`."""
    for round_ in range(MAX_UNPROCESSED_ROUNDS):
        pending = call(pending)
        if not pending:
            return
        time.sleep(0.05 * 2**round_)
    raise RowsUnprocessed(f"{len(pending)} {what} still unprocessed")
