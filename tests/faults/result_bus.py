"""The step's result bus in the lab: a classic bus in moto, or a v2 bus the lab answers.

The runtime publishes its result events with boto3: the ``events`` client for a classic bus,
``eventbridgev2`` for a v2 bus.

- **Classic**: moto's EventBridge, a custom bus with a rule that delivers every event to an
  SQS queue, so :meth:`ResultBus.delivered` proves what moto really took. Classic PutEvents
  has no deduplication.
- **v2**: moto has no v2 service, so the lab answers ``eventbridgev2`` ``PutEvents`` as
  documented: an entry whose ``SystemMetadata.DeduplicationId`` was published on the bus in
  the last :data:`DEDUPLICATION_WINDOW_SECONDS` of the lab's clock gets ``SuccessCode:
  DEDUPLICATED`` and reaches no one; any other gets ``PUBLISHED`` and an ``EventId``.

Either bus can **refuse** (:attr:`ResultBus.refusal`): ``AccessDeniedException`` fails the
whole call (the publisher's role lost ``events:PutEvents``); ``ThrottlingException`` and
``InternalFailure`` fail every entry (``FailedEntryCount``), the retryable codes. A schedule
makes the bus refuse and recover; a persistent refusal lasts through the drain.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.awsrequest import AWSResponse

from . import backends
from .sqs_rules import ACCOUNT, REGION, moto_queue

#: EventBridge v2 drops a repeated DeduplicationId within this many seconds.
DEDUPLICATION_WINDOW_SECONDS = 300
#: Refusals a schedule can give the bus (see the module docstring).
REFUSALS = ("AccessDeniedException", "ThrottlingException", "InternalFailure")
BUS_KINDS = ("classic", "v2")


@dataclass(frozen=True)
class Accepted:
    """One event the bus took."""

    detail_type: str
    event_id: str
    detail: dict[str, Any]


@dataclass
class ResultBus:
    """One result bus (see the module docstring)."""

    kind: str
    arn: str
    clock: Callable[[], float]
    #: The bus's refusal now (None: it takes events).
    refusal: str | None = None
    #: Whether :attr:`refusal` outlasts the schedule (the drain does not lift it).
    persistent: bool = False
    refused_calls: int = 0
    deduplicated: int = 0
    #: The seen queue of a classic bus (its rule's target).
    seen_url: str | None = None
    _windows: dict[str, float] = field(default_factory=dict)

    @classmethod
    def create(cls, kind: str, prefix: str, events: Any, clock: Callable[[], float]) -> ResultBus:
        """A ``kind`` bus named after ``prefix``, made with the lab's own ``events`` client
        (its seen queue straight in moto: :mod:`.backends`)."""
        if kind == "v2":
            arn = f"arn:aws:events:{REGION}:{ACCOUNT}:event-busv2/{prefix}-results/{prefix}"
            return cls(kind, arn, clock)
        name = f"{prefix}-results"
        arn = events.create_event_bus(Name=name)["EventBusArn"]
        url, queue_arn = backends.create_queue(f"{prefix}-results-seen", {})
        events.put_rule(
            Name="all", EventBusName=name, EventPattern=json.dumps({"source": [prefix]})
        )
        events.put_targets(
            Rule="all", EventBusName=name, Targets=[{"Id": "seen", "Arn": queue_arn}]
        )
        return cls(kind, arn, clock, seen_url=url)

    @property
    def service(self) -> str:
        """The boto3 service the runtime publishes with."""
        return "eventbridgev2" if self.kind == "v2" else "events"

    def refuse(self, code: str | None, *, persistent: bool = False) -> None:
        self.refusal, self.persistent = code, persistent and code is not None

    # -- answering the runtime's PutEvents --------------------------------------------------
    def answer(self, params: Mapping[str, Any]) -> tuple[AWSResponse, dict[str, Any]] | None:
        """The bus's answer to a PutEvents with ``params``, or None to let moto answer."""
        entries = list(params.get("Entries") or [])
        if self.refusal == "AccessDeniedException":
            self.refused_calls += 1
            return AWSResponse(self.arn, 400, {}, None), {
                "Error": {
                    "Code": "AccessDeniedException",
                    "Message": "User is not authorized to perform: events:PutEvents",
                },
                "ResponseMetadata": {"HTTPStatusCode": 400},
            }
        if self.refusal is not None:
            self.refused_calls += 1
            failed = [{"ErrorCode": self.refusal, "ErrorMessage": "lab"} for _ in entries]
            return AWSResponse(self.arn, 200, {}, None), {
                "FailedEntryCount": len(failed),
                "Entries": failed,
                "ResponseMetadata": {"HTTPStatusCode": 200},
            }
        if self.kind != "v2":
            return None
        answers = [self._v2_entry(entry) for entry in entries]
        return AWSResponse(self.arn, 200, {}, None), {
            "FailedEntryCount": 0,
            "Entries": answers,
            "ResponseMetadata": {"HTTPStatusCode": 200},
        }

    def _v2_entry(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        dedup_id = str((entry.get("SystemMetadata") or {}).get("DeduplicationId") or "")
        now = self.clock()
        if dedup_id and self._windows.get(dedup_id, 0.0) > now:
            self.deduplicated += 1
            return {"SuccessCode": "DEDUPLICATED"}
        if dedup_id:
            self._windows[dedup_id] = now + DEDUPLICATION_WINDOW_SECONDS
        return {"EventId": str(uuid.uuid4()), "SuccessCode": "PUBLISHED"}

    @staticmethod
    def accepted(params: Mapping[str, Any], parsed: Mapping[str, Any]) -> list[Accepted]:
        """The events a PutEvents answer says the bus took (no error code; not
        DEDUPLICATED)."""
        taken = []
        entries = list(params.get("Entries") or [])
        for entry, answer in zip(entries, parsed.get("Entries") or [], strict=False):
            if answer.get("ErrorCode") or answer.get("SuccessCode") == "DEDUPLICATED":
                continue
            if not answer.get("EventId"):
                continue
            detail = json.loads(entry.get("Detail") or "{}")
            taken.append(Accepted(str(entry.get("DetailType")), answer["EventId"], detail))
        return taken

    def delivered(self) -> int:
        """Events moto delivered to the classic bus's rule (0 for a v2 bus), read from the
        seen queue itself: a schedule can outlast any queue's retention."""
        if self.seen_url is None:
            return 0
        return len(moto_queue(self.seen_url)._messages)
