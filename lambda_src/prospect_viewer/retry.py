"""Re-publishing a dead-lettered model event."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from .store import FailureStore


class RetryRefused(Exception):
    """The failure cannot be retried; ``status``/``code`` go into the HTTP error."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


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


def retry_failure(
    store: FailureStore,
    events_client: Any,
    bus_name: str,
    allowed_source: str,
    upload_id: str,
    failure_id: str,
) -> dict[str, Any]:
    """Re-publish a kind "model" failure's original event and stamp ``retried_at``.

    Refuses (RetryRefused, 400) for missing items, non-model failures, items without a
    usable original event, and events whose Source is not ``allowed_source`` (the
    viewer must not become a way to inject arbitrary events into the bus).
    """
    item = store.get(upload_id, failure_id)
    if item is None:
        raise RetryRefused(400, "FailureNotFound", "no such failure")
    if item.get("kind") != "model":
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
    response = events_client.put_events(
        Entries=[
            {
                "EventBusName": bus_name,
                "Source": event["source"],
                "DetailType": event["detail-type"],
                "Detail": json.dumps(event["detail"], ensure_ascii=False),
            }
        ]
    )
    if response.get("FailedEntryCount"):
        entry = response["Entries"][0]
        raise RetryRefused(
            502,
            "PublishFailed",
            f"{entry.get('ErrorCode')}: {entry.get('ErrorMessage', '')}".strip(),
        )
    retried_at = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    store.mark_retried(upload_id, failure_id, retried_at)
    return {
        "retried": True,
        "upload_id": upload_id,
        "failure_id": failure_id,
        "event_id": response["Entries"][0].get("EventId"),
        "retried_at": retried_at,
    }
