"""Operator retry: re-publish a dead-lettered row event with a new replay generation.

Contract (shared with the model-step runtime): the re-published detail carries
``replay_generation`` = previous generation + 1. The runtime joins it to the row's
idempotency key, so one generation makes exactly one new model request and the same
generation delivered twice replays. The viewer moves the failure item's
``replay_generation`` with a conditional UpdateItem *before* publishing: of two
presses that saw the same generation, one claims it and publishes, the other is told
the failure was already retried (409). A publish that fails gives the claim back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prospect_contract.events import REPLAY_GENERATION, ROW_VALIDATED, retry_deduplication_id
from prospect_contract.failures import KIND_MODEL
from prospect_contract.put_events import Event
from prospect_contract.rows import RowReader

from .publish import Publisher
from .store import FailureFilter, FailureStore

# Only row events the model step consumes are ever re-published; anything else a
# recorder filed (e.g. an upload summary that reached a DLQ) is not retryable.
RETRYABLE_DETAIL_TYPES = frozenset({ROW_VALIDATED})
RETRYABLE_KINDS = frozenset({KIND_MODEL})
# "Retry all retryable" claims and publishes at most this many rows per request (the
# Lambda has 30 s); the page repeats the request while the answer says ``more``.
MAX_BULK_RETRY = 100


#: A retry of a row whose values expired with its upload (``upload_retention_days``).
ROW_EXPIRED = "RowExpired"
ROW_EXPIRED_MESSAGE = (
    "the row's values expired with its upload (upload_retention_days); upload the file again"
)


def _row_number(item: dict[str, Any], event: dict[str, Any]) -> int:
    """The row a retryable failure is about (its event's detail, else the item's)."""
    number = event["detail"].get("row_number", item.get("row_number"))
    try:
        return int(number)
    except (TypeError, ValueError) as exc:
        raise RetryRefused(400, "NoRowNumber", "the stored event names no row") from exc


class RetryRefused(Exception):
    """The failure cannot be retried; ``status``/``code`` go into the HTTP error."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def utc_now() -> str:
    """ISO-8601 UTC with milliseconds and ``Z`` (the recorder's ``recorded_at`` format)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def generation_of(item: dict[str, Any]) -> int:
    """The item's current replay generation (0 when never retried)."""
    try:
        return max(int(item.get(REPLAY_GENERATION) or 0), 0)
    except (TypeError, ValueError):
        return 0


def _original_event(item: dict[str, Any]) -> dict[str, Any]:
    try:
        event = json.loads(item.get("original_event") or "")
    except (json.JSONDecodeError, TypeError) as exc:
        raise RetryRefused(400, "NoOriginalEvent", "the failure has no stored event") from exc
    if not (
        isinstance(event, dict)
        and isinstance(event.get("source"), str)
        and isinstance(event.get("detail-type"), str)
        and isinstance(event.get("detail"), dict)
    ):
        raise RetryRefused(400, "NoOriginalEvent", "the stored event lacks source/detail")
    return event


def retryable_event(item: dict[str, Any], allowed_source: str) -> dict[str, Any]:
    """The item's original event if it may be re-published; else raises RetryRefused (400).

    Retryable: a kind "model" failure whose stored event has Source ``allowed_source``
    AND a detail-type in RETRYABLE_DETAIL_TYPES (the viewer must not become a way to
    inject arbitrary events into the bus).
    """
    if item.get("kind") not in RETRYABLE_KINDS:
        raise RetryRefused(
            400,
            "NotRetryable",
            f"{item.get('kind')} failures cannot be retried; fix the row and upload again",
        )
    event = _original_event(item)
    if event["source"] != allowed_source:
        raise RetryRefused(
            400, "SourceNotAllowed", f"events from {event['source']!r} are not retried"
        )
    if event["detail-type"] not in RETRYABLE_DETAIL_TYPES:
        raise RetryRefused(
            400,
            "DetailTypeNotAllowed",
            f"{event['detail-type']!r} events are not retried",
        )
    return event


def is_retryable(item: dict[str, Any], allowed_source: str) -> bool:
    """True when ``retryable_event`` would accept the item."""
    try:
        retryable_event(item, allowed_source)
    except RetryRefused:
        return False
    return True


def retried_since_recorded(item: dict[str, Any]) -> bool:
    """True when the item was retried after its last sighting by the recorder."""
    retried_at = str(item.get("retried_at") or "")
    return bool(retried_at) and retried_at >= str(item.get("recorded_at") or "")


@dataclass(frozen=True)
class _Claim:
    item: dict[str, Any]
    generation: int
    entry: Event


def _claim(
    store: FailureStore, item: dict[str, Any], event: dict[str, Any], expected: int, at: str
) -> _Claim | None:
    detail = dict(event["detail"])
    previous = max(expected, generation_of(detail))
    generation = previous + 1
    if not store.claim_generation(item["upload_id"], item["failure_id"], expected, generation, at):
        return None
    detail[REPLAY_GENERATION] = generation
    row = detail.get("row_number", item.get("row_number", item["failure_id"]))
    entry = Event(
        detail_type=event["detail-type"],
        detail=detail,
        deduplication_id=retry_deduplication_id(str(item["upload_id"]), row, generation),
    )
    return _Claim(item, generation, entry)


def retry_failure(
    store: FailureStore,
    publisher: Publisher,
    allowed_source: str,
    upload_id: str,
    failure_id: str,
    expected_generation: int,
    rows: RowReader | None = None,
) -> dict[str, Any]:
    """Retry one failure the operator saw at ``expected_generation``.

    400 when the failure is missing or not retryable; 410 ``RowExpired`` when ``rows``
    (RowsTable) no longer holds the row's values (they expire with the upload, so the
    classifier could only record ``RowNotFound``); 409 ``AlreadyRetried`` when its
    generation is no longer the one the page showed (another press, another tab, or
    "Retry all" got there first); 502 when the bus refused the event.
    """
    item = store.get(upload_id, failure_id)
    if item is None:
        raise RetryRefused(400, "FailureNotFound", "no such failure")
    event = retryable_event(item, allowed_source)
    if rows is not None and rows.get(upload_id, _row_number(item, event)) is None:
        raise RetryRefused(410, ROW_EXPIRED, ROW_EXPIRED_MESSAGE)
    current = generation_of(item)
    conflict = RetryRefused(
        409,
        "AlreadyRetried",
        f"already retried (generation {current}); reload to see its state",
    )
    if current != expected_generation:
        raise conflict
    retried_at = utc_now()
    claim = _claim(store, item, event, current, retried_at)
    if claim is None:
        raise conflict
    [error] = publisher.publish([claim.entry])
    if error is not None:
        store.release_generation(upload_id, failure_id, claim.generation, item)
        raise RetryRefused(502, "PublishFailed", error)
    return {
        "retried": True,
        "upload_id": upload_id,
        "failure_id": failure_id,
        "replay_generation": claim.generation,
        "retried_at": retried_at,
    }


Pending = list[tuple[dict[str, Any], dict[str, Any]]]


def _pending_rows(
    store: FailureStore,
    allowed_source: str,
    upload_id: str,
    limit: int,
    rows: RowReader | None,
) -> tuple[Pending, int, bool]:
    """Up to ``limit`` (failure, event) pairs of rows to retry, how many rows were skipped
    because their values expired (checked in chunks, so expired rows never fill the
    batch), and whether another retryable row is left."""
    pending: Pending = []
    chunk: Pending = []
    expired = 0

    def keep_live() -> None:
        nonlocal expired
        live = _live(chunk, upload_id, rows)
        expired += len(chunk) - len(live)
        pending.extend(live)
        chunk.clear()

    for item in store.iter_all(FailureFilter(upload_id=upload_id)):
        if retried_since_recorded(item) or not is_retryable(item, allowed_source):
            continue
        if len(pending) == limit:
            return pending, expired, True
        chunk.append((item, retryable_event(item, allowed_source)))
        if len(pending) + len(chunk) == limit:
            keep_live()
    keep_live()
    return pending, expired, False


def _live(pairs: Pending, upload_id: str, rows: RowReader | None) -> Pending:
    """The pairs whose row ``rows`` still holds (all of them without ``rows``)."""
    if rows is None:
        return list(pairs)
    keys = [(upload_id, _row_number(item, event)) for item, event in pairs]
    found = rows.get_many(keys)
    return [pair for pair, key in zip(pairs, keys, strict=True) if key in found]


def retry_upload(
    store: FailureStore,
    publisher: Publisher,
    allowed_source: str,
    upload_id: str,
    limit: int | None = None,
    rows: RowReader | None = None,
) -> dict[str, Any]:
    """ "Retry all retryable" for one upload: one new generation per pending row.

    Pending = retryable and not retried since the recorder last filed it. So a second
    press finds nothing left (``retried`` 0), and a row whose retry failed again (the
    recorder re-files it with a newer ``recorded_at``) is pending again. Two presses at
    once race per item on the conditional claim: each row is published once. A row whose
    values ``rows`` no longer holds is not retried; the answer counts it in ``expired``.
    """
    limit = limit or MAX_BULK_RETRY
    pending, expired, more = _pending_rows(store, allowed_source, upload_id, limit, rows)
    retried_at = utc_now()
    claims: list[_Claim] = []
    conflicts = 0
    for item, event in pending:
        claim = _claim(store, item, event, generation_of(item), retried_at)
        if claim is None:
            conflicts += 1
        else:
            claims.append(claim)
    errors = publisher.publish([claim.entry for claim in claims])
    failed = []
    for claim, error in zip(claims, errors, strict=True):
        if error is not None:
            store.release_generation(
                upload_id, claim.item["failure_id"], claim.generation, claim.item
            )
            failed.append({"failure_id": claim.item["failure_id"], "error": error})
    return {
        "upload_id": upload_id,
        "retried": len(claims) - len(failed),
        "already_retried": conflicts,
        "expired": expired,
        "failed": failed,
        "more": more,
        "retried_at": retried_at,
    }
