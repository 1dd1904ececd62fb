"""Publishing operator retries: the classic EventBridge bus, or an EventBridge v2 bus.

``EVENT_BUS_KIND`` selects it: ``classic`` (default; ``events`` PutEvents on
``EVENT_BUS_NAME``) or ``v2`` (``eventbridgev2`` PutEvents on ``EVENT_BUS_ARN``, with
``SystemMetadata.DeduplicationId = "{upload_id}#{row_number}#r{generation}"``, so a
repeated publish of the same generation is suppressed by the bus too).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

BATCH = 10  # PutEvents entries per call
RETRYABLE_CODES = frozenset({"ThrottlingException", "InternalFailure", "InternalException"})
ATTEMPTS = 3


@dataclass(frozen=True)
class Entry:
    """One event to publish."""

    source: str
    detail_type: str
    detail: dict[str, Any]
    dedup_id: str


def dedup_id(upload_id: str, row_number: object, generation: int) -> str:
    """The v2 bus deduplication id of one retry generation of one row."""
    return f"{upload_id}#{row_number}#r{generation}"


class Publisher:
    """``publish(entries)`` -> one error string (or None when published) per entry."""

    def __init__(self, client: Any, *, bus_name: str = "", bus_arn: str = "") -> None:
        self._client = client
        self._bus_name = bus_name
        self._bus_arn = bus_arn

    @property
    def v2(self) -> bool:
        return bool(self._bus_arn)

    def _request(self, entries: list[Entry]) -> dict[str, Any]:
        if self.v2:
            return self._client.put_events(
                EventBusArn=self._bus_arn,
                Entries=[
                    {
                        "Source": e.source,
                        "DetailType": e.detail_type,
                        "Detail": json.dumps(e.detail, ensure_ascii=False),
                        "SystemMetadata": {"DeduplicationId": e.dedup_id},
                    }
                    for e in entries
                ],
            )
        return self._client.put_events(
            Entries=[
                {
                    "EventBusName": self._bus_name,
                    "Source": e.source,
                    "DetailType": e.detail_type,
                    "Detail": json.dumps(e.detail, ensure_ascii=False),
                }
                for e in entries
            ]
        )

    def publish(self, entries: list[Entry]) -> list[str | None]:
        """Publish in batches of 10, re-sending only entries failed with a retryable code."""
        errors: list[str | None] = [None] * len(entries)
        for start in range(0, len(entries), BATCH):
            pending = list(range(start, min(start + BATCH, len(entries))))
            for attempt in range(ATTEMPTS):
                try:
                    response = self._request([entries[i] for i in pending])
                except (BotoCoreError, ClientError) as exc:
                    # The whole call failed (no such bus, denied, network): none went out.
                    for index in pending:
                        errors[index] = f"{type(exc).__name__}: {exc}"
                    break
                results = response.get("Entries", [])
                retry: list[int] = []
                for index, result in zip(pending, results, strict=False):
                    code = result.get("ErrorCode")
                    if not code:
                        errors[index] = None
                        continue
                    errors[index] = f"{code}: {result.get('ErrorMessage', '')}".strip(": ")
                    if code in RETRYABLE_CODES and attempt + 1 < ATTEMPTS:
                        retry.append(index)
                for index in pending[len(results) :]:
                    errors[index] = "NoResult: PutEvents returned fewer entries than sent"
                pending = retry
                if not pending:
                    break
        return errors
