"""Fixes for gaps between moto and the AWS services it emulates, applied for one run."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_PUT_ITEM_LOCK = threading.Lock()


@contextmanager
def atomic_conditional_put_item() -> Iterator[None]:
    """Make moto's DynamoDB PutItem atomic across threads, as DynamoDB's is.

    moto evaluates a ``ConditionExpression`` and stores the item in two steps without a
    lock, so two threads can both "win" the same idempotency key and both call the model.
    Real DynamoDB applies a conditional write atomically; without this lock the local run
    would report duplicate model requests that the deployed stack cannot make.
    """
    from moto.dynamodb.models import DynamoDBBackend

    original = DynamoDBBackend.put_item

    @functools.wraps(original)
    def put_item(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _PUT_ITEM_LOCK:
            return original(self, *args, **kwargs)

    DynamoDBBackend.put_item = put_item  # type: ignore[method-assign]
    try:
        yield
    finally:
        DynamoDBBackend.put_item = original  # type: ignore[method-assign]
