"""Batched, retrying EventBridge PutEvents."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_ENTRIES_PER_CALL = 10
MAX_REQUEST_BYTES = 256 * 1024
# Entry codes that mean "try again later"; anything else (e.g. a malformed detail) will
# fail the same way on every attempt, so retrying it only delays the error.
RETRYABLE_ERROR_CODES = frozenset(
    {
        "ThrottlingException",
        "InternalFailure",
        "InternalException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
    }
)


class EventPublishError(RuntimeError):
    """Some entries could not be published; raised so the whole upload is retried.

    ``failures`` holds ``(error_code, error_message)`` per entry that was not accepted.
    """

    def __init__(self, message: str, failures: list[tuple[str, str]]) -> None:
        super().__init__(message)
        self.failures = failures


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff for failed entries: full jitter, ``base_delay * 2**(attempt-1)`` capped.

    Defaults: 5 attempts in all, 0.2 s base delay, 5 s cap.
    """

    max_attempts: int = 5
    base_delay: float = 0.2
    max_delay: float = 5.0

    def delay(self, attempt: int, rng: Callable[[], float]) -> float:
        """Sleep before attempt ``attempt + 1``."""
        return rng() * min(self.max_delay, self.base_delay * 2 ** (attempt - 1))


def entry_size(entry: dict[str, Any]) -> int:
    """PutEvents size of one entry, computed as the EventBridge documentation describes."""
    size = 14 if "Time" in entry else 0
    for name in ("Source", "DetailType", "Detail"):
        size += len(entry.get(name, "").encode("utf-8"))
    size += sum(len(resource.encode("utf-8")) for resource in entry.get("Resources", []))
    return size


@dataclass
class EventPublisher:
    """Buffers entries and sends them in PutEvents calls of at most 10 entries / 256 KB.

    Call ``add`` per event and ``flush`` at the end. ``sleep`` and ``rng`` are injectable
    so tests need not wait.
    """

    client: Any
    bus_name: str
    source: str
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Callable[[float], None] = time.sleep
    rng: Callable[[], float] = random.random
    published: int = 0
    _batch: list[dict[str, Any]] = field(default_factory=list)
    _batch_bytes: int = 0

    def add(self, detail_type: str, detail: dict[str, Any]) -> None:
        """Queue one event; sends the current batch first when this one would not fit."""
        entry = {
            "EventBusName": self.bus_name,
            "Source": self.source,
            "DetailType": detail_type,
            "Detail": json.dumps(detail, ensure_ascii=False, separators=(",", ":")),
        }
        size = entry_size(entry)
        if size > MAX_REQUEST_BYTES:
            raise EventPublishError(
                f"event of {size} bytes exceeds the PutEvents limit",
                [("EntryTooLarge", detail_type)],
            )
        if len(self._batch) >= MAX_ENTRIES_PER_CALL or self._batch_bytes + size > MAX_REQUEST_BYTES:
            self.flush()
        self._batch.append(entry)
        self._batch_bytes += size

    def flush(self) -> None:
        """Send whatever is buffered."""
        if self._batch:
            self._send(self._batch)
            self.published += len(self._batch)
        self._batch = []
        self._batch_bytes = 0

    def _send(self, entries: list[dict[str, Any]]) -> None:
        pending = entries
        for attempt in range(1, self.retry.max_attempts + 1):
            response = self.client.put_events(Entries=pending)
            if not response.get("FailedEntryCount"):
                return
            # Response entries are positional: entry i answers request entry i.
            failed = [
                (entry, result)
                for entry, result in zip(pending, response["Entries"], strict=True)
                if result.get("ErrorCode")
            ]
            codes = [(r["ErrorCode"], r.get("ErrorMessage", "")) for _, r in failed]
            permanent = [code for code in codes if code[0] not in RETRYABLE_ERROR_CODES]
            if permanent:
                raise EventPublishError(
                    f"{len(permanent)} entries rejected with non-retryable errors", codes
                )
            if attempt == self.retry.max_attempts:
                raise EventPublishError(
                    f"{len(failed)} entries still failing after {attempt} attempts", codes
                )
            self.sleep(self.retry.delay(attempt, self.rng))
            pending = [entry for entry, _ in failed]
