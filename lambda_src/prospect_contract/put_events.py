"""PutEvents with retries, on a classic bus or an EventBridge v2 bus: the pipeline's one
implementation, used by the splitter, the viewer's retries and the upload ledger.

- A bus kind (``ClassicBus``, ``V2Bus``) knows its entry shape and its request limits:
  classic PutEvents takes 1-10 entries and 256 KB a call, v2 (``eventbridgev2``) 1-100
  entries and 1 MB.
- ``Batcher`` packs entries into requests within those limits.
- ``send_batch`` sends one request, reads every result entry (a 200 answer can still
  reject entries: ``FailedEntryCount``, ``Entries[i].ErrorCode``) and re-sends only the
  entries that failed with a retryable code, ThrottlingException or InternalFailure, after
  a jittered backoff, for a bounded number of rounds. A v2 entry answered
  ``SuccessCode: DEDUPLICATED`` is accepted, and counted apart.
- ``put_events`` does both for a list of events and answers per event.

Clients are passed in (boto3 ``events`` or ``eventbridgev2``), so this module needs only
the standard library. ``docs/contract.md`` §4.

Example::

    bus = ClassicBus(boto3.client("events"), "prospect-bus", EVENT_SOURCE)
    failures = put_events(bus, [Event(UPLOAD_COMPLETED, detail)])
    if failures[0] is not None:
        raise RuntimeError(failures[0].describe())
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

# Classic PutEvents: 1-10 entries and at most 256 KB per request.
CLASSIC_MAX_ENTRIES = 10
CLASSIC_MAX_REQUEST_BYTES = 256 * 1024
# eventbridgev2 PutEvents: 1-100 entries (botocore's model: PutEventsRequestEntryList max 100)
# and "the total size of all event entries in a request must not exceed 1 MB (1,048,576
# bytes)". We keep a margin because how the service sizes SystemMetadata is not documented.
V2_MAX_ENTRIES = 100
V2_MAX_REQUEST_BYTES = 1_000_000

#: The entry codes PutEvents documents as retryable. Any other code (MalformedDetail,
#: InvalidArgument, NotAuthorizedForSourceException, ...) fails the same way every time, so
#: re-sending the entry only delays the error.
RETRYABLE_ERROR_CODES = frozenset({"ThrottlingException", "InternalFailure"})
#: A v2 bus's answer to a DeduplicationId it accepted less than 300 s before.
DEDUPLICATED = "DEDUPLICATED"
#: Our codes, for an entry that was never sent or got no result entry back.
ENTRY_TOO_LARGE = "EntryTooLarge"
NO_RESULT = "NoResult"

Entry = dict[str, Any]


class PutEventsError(RuntimeError):
    """Entries were not accepted. ``failures`` holds ``(error_code, error_message)`` per
    entry that was not."""

    def __init__(self, message: str, failures: list[tuple[str, str]]) -> None:
        super().__init__(message)
        self.failures = failures


@dataclass(frozen=True)
class RetryPolicy:
    """Rounds and backoff for failed entries: full jitter, ``base_delay * 2**(round-1)``
    capped at ``max_delay``.

    Defaults: 5 rounds in all (the first send and 4 re-sends), 0.2 s base delay, 5 s cap.
    """

    max_attempts: int = 5
    base_delay: float = 0.2
    max_delay: float = 5.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")

    def delay(self, attempt: int, rng: Callable[[], float]) -> float:
        """Seconds to sleep before round ``attempt + 1``."""
        return rng() * min(self.max_delay, self.base_delay * 2.0 ** (attempt - 1))


def detail_json(detail: Mapping[str, Any]) -> str:
    """An entry's ``Detail``: compact JSON, non-ASCII kept (it counts towards the size)."""
    return json.dumps(detail, ensure_ascii=False, separators=(",", ":"))


def entry_size(entry: Mapping[str, Any]) -> int:
    """PutEvents size of one entry, computed as the EventBridge documentation describes.

    For a v2 entry the SystemMetadata ids are counted too (conservative: the v2 sizing
    rule is not documented beyond "total size of all event entries").
    """
    size = 14 if "Time" in entry else 0
    for name in ("Source", "DetailType", "Detail"):
        size += len(entry.get(name, "").encode("utf-8"))
    size += sum(len(resource.encode("utf-8")) for resource in entry.get("Resources", []))
    for value in entry.get("SystemMetadata", {}).values():
        size += len(value.encode("utf-8"))
    return size


class Bus(Protocol):
    """One kind of event bus: its request limits, its entry shape and its PutEvents call."""

    @property
    def max_entries(self) -> int:
        """Entries a request may carry."""

    @property
    def max_request_bytes(self) -> int:
        """Bytes (``entry_size``) a request may carry."""

    def entry(self, detail_type: str, detail: str, deduplication_id: str | None) -> Entry:
        """One PutEvents entry; ``detail`` is the JSON text."""

    def put(self, entries: list[Entry]) -> list[dict[str, Any]]:
        """Send ``entries``; the result entries, positionally matching the request."""


@dataclass(frozen=True)
class ClassicBus:
    """A classic custom bus (boto3 client ``events``), named by ``bus_name``.

    Classic PutEvents has no deduplication field: ``deduplication_id`` is ignored.
    """

    client: Any
    bus_name: str
    source: str
    max_entries: int = CLASSIC_MAX_ENTRIES
    max_request_bytes: int = CLASSIC_MAX_REQUEST_BYTES

    def entry(self, detail_type: str, detail: str, deduplication_id: str | None) -> Entry:
        return {
            "EventBusName": self.bus_name,
            "Source": self.source,
            "DetailType": detail_type,
            "Detail": detail,
        }

    def put(self, entries: list[Entry]) -> list[dict[str, Any]]:
        return list(self.client.put_events(Entries=entries).get("Entries", []))


@dataclass(frozen=True)
class V2Bus:
    """An EventBridge v2 bus (boto3 client ``eventbridgev2``), named by ``bus_arn``.

    An entry with a deduplication id carries ``SystemMetadata.DeduplicationId``: the bus
    answers a repeat within its 300 s window with ``SuccessCode: DEDUPLICATED`` instead of
    delivering it again.
    """

    client: Any
    bus_arn: str
    source: str
    max_entries: int = V2_MAX_ENTRIES
    max_request_bytes: int = V2_MAX_REQUEST_BYTES

    def entry(self, detail_type: str, detail: str, deduplication_id: str | None) -> Entry:
        entry: Entry = {"Source": self.source, "DetailType": detail_type, "Detail": detail}
        if deduplication_id is not None:
            entry["SystemMetadata"] = {"DeduplicationId": deduplication_id}
        return entry

    def put(self, entries: list[Entry]) -> list[dict[str, Any]]:
        response = self.client.put_events(EventBusArn=self.bus_arn, Entries=entries)
        return list(response.get("Entries", []))


@dataclass(frozen=True)
class EntryFailure:
    """One entry that was not accepted: its position (in the batch for ``send_batch``, in
    the events for ``put_events``), and the code and message it failed with last."""

    index: int
    error_code: str
    error_message: str

    @property
    def retryable(self) -> bool:
        """True for a code PutEvents documents as worth re-sending."""
        return self.error_code in RETRYABLE_ERROR_CODES

    def describe(self) -> str:
        """``"Code: message"``, or just the code."""
        return f"{self.error_code}: {self.error_message}".strip(": ")


@dataclass(frozen=True)
class BatchResult:
    """What ``send_batch`` did with one request's entries.

    ``failures`` are the entries still not accepted at the end. ``call_error`` is set when a
    PutEvents call itself raised (no such bus, access denied, the SDK's own retries spent):
    the entries still pending then are in ``failures`` under the exception's class name.
    """

    entries: int
    attempts: int
    deduplicated: int = 0
    failures: tuple[EntryFailure, ...] = ()
    call_error: Exception | None = None

    @property
    def accepted(self) -> int:
        """Entries the bus took, deduplicated ones included."""
        return self.entries - len(self.failures)

    def raise_for_failures(self) -> None:
        """Re-raise ``call_error``, or raise ``PutEventsError`` when an entry failed."""
        if self.call_error is not None:
            raise self.call_error
        if not self.failures:
            return
        codes = [(failure.error_code, failure.error_message) for failure in self.failures]
        permanent = [failure for failure in self.failures if not failure.retryable]
        if permanent:
            message = f"{len(permanent)} entries rejected with non-retryable errors"
        else:
            message = f"{len(self.failures)} entries still failing after {self.attempts} attempts"
        raise PutEventsError(message, codes)


DEFAULT_RETRY = RetryPolicy()


def send_batch(
    bus: Bus,
    entries: Sequence[Entry],
    *,
    retry: RetryPolicy = DEFAULT_RETRY,
    sleep: Callable[[float], None] = time.sleep,
    rng: Callable[[], float] = random.random,
) -> BatchResult:
    """Send one request's ``entries`` (within the bus's limits), re-sending only entries
    that failed with a retryable code, for at most ``retry.max_attempts`` rounds.

    Never raises for a rejected entry or a failed call: see ``BatchResult``.
    """
    if len(entries) > bus.max_entries:
        raise ValueError(f"{len(entries)} entries exceed the bus's {bus.max_entries} a call")
    pending = list(range(len(entries)))
    failures: dict[int, EntryFailure] = {}
    deduplicated = 0
    attempt = 0
    while pending:
        attempt += 1
        try:
            results = bus.put([entries[index] for index in pending])
        except Exception as exc:  # kept in the result; callers re-raise or report it
            for index in pending:
                failures[index] = EntryFailure(index, type(exc).__name__, str(exc))
            return _result(entries, attempt, deduplicated, failures, exc)
        retry_now: list[int] = []
        # Result entries are positional: entry i answers request entry i.
        for position, index in enumerate(pending):
            result = results[position] if position < len(results) else None
            if result is None:
                message = "PutEvents returned fewer entries than sent"
                failures[index] = EntryFailure(index, NO_RESULT, message)
            elif result.get("ErrorCode"):
                code, message = str(result["ErrorCode"]), str(result.get("ErrorMessage") or "")
                failures[index] = EntryFailure(index, code, message)
                if failures[index].retryable:
                    retry_now.append(index)
            else:
                failures.pop(index, None)
                if result.get("SuccessCode") == DEDUPLICATED:
                    deduplicated += 1
        pending = retry_now
        if pending and attempt == retry.max_attempts:
            break
        if pending:
            sleep(retry.delay(attempt, rng))
    return _result(entries, attempt, deduplicated, failures, None)


def _result(
    entries: Sequence[Entry],
    attempts: int,
    deduplicated: int,
    failures: dict[int, EntryFailure],
    call_error: Exception | None,
) -> BatchResult:
    ordered = tuple(failures[index] for index in sorted(failures))
    return BatchResult(len(entries), attempts, deduplicated, ordered, call_error)


@dataclass
class Batcher:
    """Packs entries into requests within ``bus``'s entry and byte limits.

    ``add`` returns the batch it had to close to make room (send it), ``take`` the batch
    still open. An entry larger than a whole request raises ``PutEventsError``
    (``EntryTooLarge``): no request could carry it.
    """

    bus: Bus
    _entries: list[Entry] = field(default_factory=list)
    _bytes: int = 0

    def add(self, entry: Entry) -> list[Entry] | None:
        size = entry_size(entry)
        if size > self.bus.max_request_bytes:
            raise PutEventsError(
                f"event of {size} bytes exceeds the PutEvents limit",
                [(ENTRY_TOO_LARGE, str(entry.get("DetailType", "")))],
            )
        full = None
        if self._entries and (
            len(self._entries) >= self.bus.max_entries
            or self._bytes + size > self.bus.max_request_bytes
        ):
            full = self.take()
        self._entries.append(entry)
        self._bytes += size
        return full

    def take(self) -> list[Entry]:
        batch, self._entries, self._bytes = self._entries, [], 0
        return batch


@dataclass(frozen=True)
class Event:
    """One event to publish: its detail type, its detail, and (v2 only) its dedup id."""

    detail_type: str
    detail: Mapping[str, Any]
    deduplication_id: str | None = None


def put_events(
    bus: Bus,
    events: Sequence[Event],
    *,
    retry: RetryPolicy = DEFAULT_RETRY,
    sleep: Callable[[float], None] = time.sleep,
    rng: Callable[[], float] = random.random,
) -> list[EntryFailure | None]:
    """Publish ``events`` in as few requests as the bus allows, each through
    ``send_batch``; per event, None when it was accepted, else its ``EntryFailure``.

    A failed call fails the entries of its own request only; later requests still go.
    """
    outcomes: list[EntryFailure | None] = [None] * len(events)
    batcher = Batcher(bus)
    indices: list[int] = []

    def send(batch: list[Entry], batch_indices: list[int]) -> None:
        result = send_batch(bus, batch, retry=retry, sleep=sleep, rng=rng)
        for failure in result.failures:
            index = batch_indices[failure.index]
            outcomes[index] = EntryFailure(index, failure.error_code, failure.error_message)

    for index, event in enumerate(events):
        entry = bus.entry(event.detail_type, detail_json(event.detail), event.deduplication_id)
        try:
            full = batcher.add(entry)
        except PutEventsError as too_large:
            outcomes[index] = EntryFailure(index, ENTRY_TOO_LARGE, str(too_large))
            continue
        if full:
            send(full, indices)
            indices = []
        indices.append(index)
    last = batcher.take()
    if last:
        send(last, indices)
    return outcomes
