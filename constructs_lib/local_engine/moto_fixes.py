"""Fixes for gaps between moto and the AWS services it emulates, applied for one run."""

from __future__ import annotations

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

# Re-entrant: a transaction's writes may go through the other patched methods.
_WRITE_LOCK = threading.RLock()


@contextmanager
def _serialized(cls: type, name: str) -> Iterator[None]:
    original = getattr(cls, name)

    @functools.wraps(original)
    def write(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _WRITE_LOCK:
            return original(self, *args, **kwargs)

    setattr(cls, name, write)
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
    """
    from moto.dynamodb.models import DynamoDBBackend

    with ExitStack() as stack:
        for name in DYNAMODB_WRITES:
            stack.enter_context(_serialized(DynamoDBBackend, name))
        yield
