"""Reading and updating the failures table, with opaque page tokens."""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from boto3.dynamodb.conditions import Key
from prospect_contract.expiry import expired
from prospect_contract.failures import KIND_SUMMARY

KEY_NAMES = ("upload_id", "failure_id")
# Fields sent to the browser; original_event stays server-side (it can be large).
PUBLIC_FIELDS = (
    "upload_id",
    "failure_id",
    "kind",
    "error_code",
    "reason",
    "row_number",
    "raw_row",
    "source_shape",
    "recorded_at",
    "retried_at",
    "retry_count",
    "replay_generation",
)
# Bound the DynamoDB reads behind one page so a sparse filter cannot make a request
# scan the whole table; the caller gets a shorter page and a token to continue.
MAX_READS_PER_PAGE = 10


class InvalidPageToken(ValueError):
    """The page token is malformed or was issued for different filters."""


@dataclass(frozen=True)
class FailureFilter:
    """Which failures to list. Summary items are never listed.

    ``kind`` and ``error_code`` match exactly (error_code case-insensitively).
    ``reason`` matches an item whose error_code equals it or whose reason contains it,
    both case-insensitively. Empty strings mean "no filter".
    """

    upload_id: str = ""
    reason: str = ""
    kind: str = ""
    error_code: str = ""

    def matches(self, item: dict[str, Any]) -> bool:
        """True when ``item`` is a failure that passes this filter."""
        if item.get("kind") == KIND_SUMMARY:
            return False
        if self.kind and str(item.get("kind", "")) != self.kind:
            return False
        code = str(item.get("error_code", "")).lower()
        if self.error_code and code != self.error_code.lower():
            return False
        if not self.reason:
            return True
        wanted = self.reason.lower()
        return code == wanted or wanted in str(item.get("reason", "")).lower()

    def key(self) -> list[str]:
        """What a page token is bound to."""
        return [self.upload_id, self.reason, self.kind, self.error_code]


def _plain(value: object) -> object:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def plain(value: object) -> object:
    """A DynamoDB value as JSON: Decimals become int or float, maps and lists recursively."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | set | tuple):
        return [plain(v) for v in value]
    return _plain(value)


def public_view(item: dict[str, Any]) -> dict[str, Any]:
    """JSON-safe subset of an item for the browser (no ``retryable``: see retry.py)."""
    return {name: _plain(item[name]) for name in PUBLIC_FIELDS if name in item}


def encode_page_token(key: dict[str, Any], flt: FailureFilter) -> str:
    """Opaque token: the last key read, bound to the filters it was issued for."""
    payload = {"k": {name: str(key[name]) for name in KEY_NAMES}, "f": flt.key()}
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


def decode_page_token(token: str, flt: FailureFilter) -> dict[str, str]:
    """Inverse of ``encode_page_token``; raises InvalidPageToken."""
    try:
        padded = token + "=" * (-len(token) % 4)
        payload = json.loads(base64.urlsafe_b64decode(padded.encode()))
        key = payload["k"]
        issued_for = payload["f"]
    except (binascii.Error, ValueError, KeyError, TypeError) as exc:
        raise InvalidPageToken("page_token is not valid") from exc
    if issued_for != flt.key():
        raise InvalidPageToken("page_token was issued for different filters")
    if not isinstance(key, dict) or sorted(key) != sorted(KEY_NAMES):
        raise InvalidPageToken("page_token is not valid")
    if not all(isinstance(key[name], str) and key[name] for name in KEY_NAMES):
        raise InvalidPageToken("page_token is not valid")
    if flt.upload_id and key["upload_id"] != flt.upload_id:
        raise InvalidPageToken("page_token was issued for different filters")
    return key


class FailureStore:
    """Failures-table access: Query when an upload is given, else Scan. A failure past its
    ``expires_at`` is absent from every answer, though DynamoDB may not have deleted it yet
    (issue 34)."""

    def __init__(self, table: Any, page_size: int, clock: Callable[[], float] = time.time) -> None:
        """``clock()``: epoch seconds, compared with each item's ``expires_at``."""
        self._table = table
        self._page_size = page_size
        self._clock = clock

    def _shown(self, flt: FailureFilter, item: dict[str, Any]) -> bool:
        return flt.matches(item) and not expired(item, self._clock())

    def _read(self, flt: FailureFilter, start: dict[str, Any] | None, limit: int) -> dict:
        params: dict[str, Any] = {"Limit": limit}
        if start:
            params["ExclusiveStartKey"] = start
        if flt.upload_id:
            return self._table.query(
                KeyConditionExpression=Key("upload_id").eq(flt.upload_id), **params
            )
        return self._table.scan(**params)

    def page(
        self, flt: FailureFilter, token: str | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of matching failures and the token of the next page (None at the end)."""
        start: dict[str, Any] | None = decode_page_token(token, flt) if token else None
        items: list[dict[str, Any]] = []
        for _ in range(MAX_READS_PER_PAGE):
            response = self._read(flt, start, self._page_size)
            read = response.get("Items", [])
            for index, item in enumerate(read):
                if not self._shown(flt, item):
                    continue
                items.append(item)
                if len(items) == self._page_size:
                    more = index < len(read) - 1 or "LastEvaluatedKey" in response
                    return items, encode_page_token(item, flt) if more else None
            start = response.get("LastEvaluatedKey")
            if not start:
                return items, None
        assert start is not None  # the loop returns when the table is exhausted
        return items, encode_page_token(start, flt)

    def iter_all(self, flt: FailureFilter, read_size: int = 200) -> Iterator[dict[str, Any]]:
        """Every matching failure, read lazily page by page (Query for an upload, else Scan).

        A consumer that stops early (the export at its size cap) stops the reads too.
        """
        start: dict[str, Any] | None = None
        while True:
            response = self._read(flt, start, read_size)
            yield from (item for item in response.get("Items", []) if self._shown(flt, item))
            start = response.get("LastEvaluatedKey")
            if not start:
                return

    def get(self, upload_id: str, failure_id: str) -> dict[str, Any] | None:
        """The item, or None when absent (consistent read: a retry must see the latest)."""
        response = self._table.get_item(
            Key={"upload_id": upload_id, "failure_id": failure_id}, ConsistentRead=True
        )
        item: dict[str, Any] | None = response.get("Item")
        return None if item is None or expired(item, self._clock()) else item

    def claim_generation(
        self, upload_id: str, failure_id: str, expected: int, new: int, retried_at: str
    ) -> bool:
        """Move ``replay_generation`` from ``expected`` to ``new``; False if it moved already.

        The condition is what makes a double press publish once: of two presses that saw
        the same generation, exactly one claim succeeds. Also stamps ``retried_at`` and
        counts ``retry_count``. Never creates an item.
        """
        if expected:
            condition = "attribute_exists(failure_id) AND replay_generation = :expected"
        else:
            condition = (
                "attribute_exists(failure_id) AND "
                "(attribute_not_exists(replay_generation) OR replay_generation = :expected)"
            )
        try:
            self._table.update_item(
                Key={"upload_id": upload_id, "failure_id": failure_id},
                UpdateExpression="SET replay_generation = :new, retried_at = :at "
                "ADD retry_count :one",
                ConditionExpression=condition,
                ExpressionAttributeValues={
                    ":expected": expected,
                    ":new": new,
                    ":at": retried_at,
                    ":one": 1,
                },
            )
        except self._table.meta.client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def release_generation(
        self, upload_id: str, failure_id: str, claimed: int, previous: dict[str, Any]
    ) -> None:
        """Undo a claim whose event could not be published (only if still ours).

        ``previous`` is the item as read before the claim; its generation and
        ``retried_at`` are restored so the failure shows as not retried.
        """
        values: dict[str, Any] = {
            ":claimed": claimed,
            ":prev": int(previous.get("replay_generation") or 0),
            ":minus": -1,
        }
        if previous.get("retried_at"):
            values[":at"] = previous["retried_at"]
            update = "SET replay_generation = :prev, retried_at = :at ADD retry_count :minus"
        else:
            update = "SET replay_generation = :prev REMOVE retried_at ADD retry_count :minus"
        try:
            self._table.update_item(
                Key={"upload_id": upload_id, "failure_id": failure_id},
                UpdateExpression=update,
                ConditionExpression="replay_generation = :claimed",
                ExpressionAttributeValues=values,
            )
        except self._table.meta.client.exceptions.ConditionalCheckFailedException:
            pass  # someone claimed a later generation meanwhile; theirs stands
