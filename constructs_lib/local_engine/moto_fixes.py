"""Fixes for gaps between moto and the AWS services it emulates, applied for one run."""

from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

#: Every DynamoDB write moto serves, each a condition check followed by a store.
DYNAMODB_WRITES = (
    "put_item",
    "update_item",
    "delete_item",
    "transact_write_items",
    "batch_write_item",
)

#: The DynamoDB reads moto serves by walking its items (BatchGetItem and TransactGetItems go
#: through ``get_item``, one key at a time).
DYNAMODB_READS = ("get_item", "query", "scan")

# One lock for every write and read (reads too: see atomic_dynamodb_writes). Re-entrant: a
# transaction's writes may go through the other patched methods.
_DYNAMODB_LOCK = threading.RLock()


@contextmanager
def _serialized(cls: type, name: str) -> Iterator[None]:
    original = getattr(cls, name)

    @functools.wraps(original)
    def serialized(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _DYNAMODB_LOCK:
            return original(self, *args, **kwargs)

    setattr(cls, name, serialized)
    try:
        yield
    finally:
        setattr(cls, name, original)


@contextmanager
def atomic_dynamodb_writes() -> Iterator[None]:
    """Make moto's DynamoDB writes atomic across threads, as DynamoDB's are.

    moto evaluates a ``ConditionExpression`` and stores the item in two steps without a
    lock, so two threads can both "win" the same idempotency key and both call the model,
    two ledger transactions can both count the last row, and a transaction can read a table
    while another thread changes it ("dictionary changed size during iteration"). Real
    DynamoDB applies each conditional write and each transaction atomically; without this
    lock local runs and tests would report races the deployed stack cannot have.

    Reads take the same lock. moto changes a stored item's attributes in place, and its
    ``Query`` and ``Scan`` walk them (to size each page) and the table's items: a read
    beside a write in another thread failed with "dictionary changed size during
    iteration", and the caller saw a 500. DynamoDB's reads never fail for a concurrent
    write; two Prospect Viewer presses at once (its local server answers each request on
    its own thread) met this about once in fifty.
    """
    from moto.dynamodb.models import DynamoDBBackend

    with ExitStack() as stack:
        stack.enter_context(_item_level_transaction_rollback())
        for name in (*DYNAMODB_WRITES, *DYNAMODB_READS):
            stack.enter_context(_serialized(DynamoDBBackend, name))
        yield


class _CopyWithoutTables:
    """The ``copy`` module as moto's DynamoDB backend sees it while
    :func:`_item_level_transaction_rollback` is open: a table is returned as it is."""

    def __init__(self, table_type: type) -> None:
        self._table_type = table_type

    def deepcopy(self, value: Any, memo: Any = None) -> Any:
        if isinstance(value, self._table_type):
            return value
        return copy.deepcopy(value, memo)

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)


@contextmanager
def _item_level_transaction_rollback() -> Iterator[None]:
    """Back up only the items a transaction writes, not every table it names.

    moto 5.2 deep-copies each table a ``TransactWriteItems`` names before it starts, so that
    it can roll back. With thousands of rows that is most of a local run's time and memory:
    2,000 rows with faults took over 10 minutes and 12 GB, because every row's ledger
    transaction copied the tables of all the rows. So the table copy is skipped, and the
    items the transaction writes are copied instead and put back if it is cancelled. It
    runs under ``_DYNAMODB_LOCK``, so no other write can come between the copy and the put-back.
    """
    import moto.dynamodb.models as backend_module
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table

    original = DynamoDBBackend.transact_write_items

    @functools.wraps(original)
    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> Any:
        backups = [_backup(self, entry) for entry in transact_items]
        try:
            return original(self, transact_items)
        except BaseException:
            for backup in reversed(backups):
                if backup is not None:
                    _restore(*backup)
            raise

    # The backend module's own name for the copy module (it does `import copy`).
    copy_module = getattr(backend_module, "copy")  # noqa: B009
    setattr(backend_module, "copy", _CopyWithoutTables(Table))  # noqa: B010
    DynamoDBBackend.transact_write_items = transact_write_items
    try:
        yield
    finally:
        DynamoDBBackend.transact_write_items = original
        setattr(backend_module, "copy", copy_module)  # noqa: B010


def _backup(backend: Any, entry: dict[str, Any]) -> tuple[Any, Any, Any, Any] | None:
    """``(table, hash value, range value, a copy of the item or None)`` for one write."""
    try:
        _, operation = next(iter(entry.items()))
        table = backend.tables[operation["TableName"]]
        if "Item" in operation:
            attributes = operation["Item"]
            key = {table.hash_key_attr: attributes[table.hash_key_attr]}
            if table.range_key_attr is not None:
                key[table.range_key_attr] = attributes[table.range_key_attr]
        else:
            key = operation["Key"]
        hash_value, range_value = backend.get_keys_value(table, key)
        item = table.get_item(hash_value, range_value)
    except Exception:  # a malformed entry: moto rejects it before writing anything
        return None
    return table, hash_value, range_value, copy.deepcopy(item)


def _restore(table: Any, hash_value: Any, range_value: Any, item: Any) -> None:
    if item is None:
        table.delete_item(hash_value, range_value)
    elif range_value:
        table.items[hash_value][range_value] = item
    else:
        table.items[hash_value] = item
