"""EventBridge v2 buses (``AWS::EventsV2::EventBus`` + ``AWS::EventsV2::Subscriber``).

moto has no v2 service, so a botocore ``before-call`` hook answers the ``eventbridgev2``
client's ``PutEvents`` (after :mod:`.iam` has evaluated it) for every bus of the template:

- publish-side deduplication: an entry whose ``SystemMetadata.DeduplicationId`` was
  published on the same bus within the last 300 s of the run's clock is answered
  ``SuccessCode: DEDUPLICATED`` and delivered to no one; others get ``PUBLISHED`` and an
  ``EventId``;
- each subscriber's ``FilterConfiguration`` patterns (any pattern matches) choose the events
  it receives; its target is an SQS queue (the step's buffer queue) or a Lambda function
  (asynchronous invocation), with the engine's ``--duplicates`` copies, as at-least-once
  delivery may;
- delivery is made with the subscriber's role: when the role does not allow it
  (``sqs:SendMessage`` on the queue, ``lambda:InvokeFunction`` on the function), the
  delivery fails and is retried by the subscriber's ``RetryPolicy`` (``MaxRetryAttempts``,
  default 5; ``MaxEventAgeInSeconds``, default 300) with exponential backoff on the run's
  clock, then sent to ``OnFailureConfiguration.Arn`` (the event as the body, with
  ``ERROR_CODE`` / ``ERROR_MESSAGE`` attributes, like a classic rule's DLQ).

Not emulated: ``PutRawEvents``, transformers other than RAW, batching, ordering
(``EventGroupId``), retention and replay, and the v2 metrics.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.awsrequest import AWSResponse

from . import identity
from .call_hooks import before_call_hooks
from .event_patterns import EventPattern
from .iam import DENIED_KEY
from .intrinsics import LOCAL_ACCOUNT, LOCAL_REGION
from .scheduling import Scheduler, WorkTracker
from .targets import Target

#: EventBridge v2 drops a repeated DeduplicationId within this many seconds.
DEDUPLICATION_WINDOW_SECONDS = 300
DEFAULT_MAX_RETRY_ATTEMPTS = 5
DEFAULT_MAX_EVENT_AGE_SECONDS = 300
_PARAMS_KEY = "local_engine.eventbridgev2.params"


class DeliveryDenied(Exception):
    """The subscriber's role may not deliver to its target."""


@dataclass
class LocalSubscriber:
    """One subscriber: its patterns, its target, and how a failed delivery is retried.

    ``may_deliver()`` raises :class:`DeliveryDenied` when the role lacks the permission;
    ``on_failure(event, error)`` hands an undeliverable event to the on-failure queue.
    """

    name: str
    patterns: Sequence[EventPattern]
    target: Target
    max_retry_attempts: int = DEFAULT_MAX_RETRY_ATTEMPTS
    max_event_age_seconds: int = DEFAULT_MAX_EVENT_AGE_SECONDS
    may_deliver: Callable[[], None] = lambda: None
    on_failure: Callable[[Mapping[str, Any], Exception], None] | None = None

    def matches(self, event: Mapping[str, Any]) -> bool:
        """True when any of the filter's patterns matches."""
        return any(pattern.matches(event) for pattern in self.patterns)


@dataclass
class BusStats:
    """Counters of one v2 bus."""

    entries: int = 0  # PutEvents entries received
    published: int = 0
    deduplicated: int = 0
    deliveries: int = 0  # deliveries to subscribers' targets (copies counted once)
    delivery_retries: int = 0
    sent_to_on_failure: int = 0
    unmatched: int = 0


@dataclass
class LocalBusV2:
    """One v2 bus: its subscribers and its deduplication window."""

    name: str
    arn: str
    subscribers: list[LocalSubscriber] = field(default_factory=list)
    stats: BusStats = field(default_factory=BusStats)


class EventBusesV2:
    """The template's v2 buses and the hook that answers ``eventbridgev2`` PutEvents."""

    def __init__(
        self,
        *,
        seconds_per_minute: float,
        scheduler: Scheduler,
        tracker: WorkTracker,
    ) -> None:
        self.buses: dict[str, LocalBusV2] = {}
        self._scale = seconds_per_minute / 60.0
        self._scheduler = scheduler
        self._tracker = tracker
        self._seen: dict[tuple[str, str], float] = {}  # (bus arn, dedup id) -> local expiry
        self._lock = threading.Lock()

    def add(self, bus: LocalBusV2) -> None:
        """Keep ``bus`` (by ARN)."""
        self.buses[bus.arn] = bus

    @property
    def deduplicated(self) -> int:
        """Entries answered DEDUPLICATED on every bus."""
        return sum(bus.stats.deduplicated for bus in self.buses.values())

    # -- publishing ------------------------------------------------------------------------------
    def put_events(self, bus: LocalBusV2, entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The PutEvents answer for ``entries``; delivers the published ones."""
        results = []
        published: list[dict[str, Any]] = []
        now = time.monotonic()
        for entry in entries:
            dedup_id = (entry.get("SystemMetadata") or {}).get("DeduplicationId")
            with self._lock:
                bus.stats.entries += 1
                key = (bus.arn, str(dedup_id))
                if dedup_id and self._seen.get(key, 0.0) > now:
                    bus.stats.deduplicated += 1
                    results.append({"SuccessCode": "DEDUPLICATED"})
                    continue
                if dedup_id:
                    self._seen[key] = now + DEDUPLICATION_WINDOW_SECONDS * self._scale
                bus.stats.published += 1
            event_id = str(uuid.uuid4())
            results.append({"EventId": event_id, "SuccessCode": "PUBLISHED"})
            published.append(_envelope(entry, event_id))
        # Delivery is EventBridge's work, not the publisher's (whose thread this is).
        with identity.acting_as(None):
            for event in published:
                self._route(bus, event)
        return {"FailedEntryCount": 0, "Entries": results}

    def _route(self, bus: LocalBusV2, event: dict[str, Any]) -> None:
        matched = [s for s in bus.subscribers if s.matches(event)]
        if not matched:
            with self._lock:
                bus.stats.unmatched += 1
        for subscriber in matched:
            self._attempt(bus, subscriber, event, attempt=0, first=time.monotonic())

    def _attempt(
        self,
        bus: LocalBusV2,
        subscriber: LocalSubscriber,
        event: dict[str, Any],
        *,
        attempt: int,
        first: float,
    ) -> None:
        try:
            subscriber.may_deliver()
            subscriber.target.deliver(event)
        except DeliveryDenied as error:
            age = (time.monotonic() - first) / self._scale
            wait = min(2**attempt, 60)  # AWS seconds, exponential
            if attempt < subscriber.max_retry_attempts and (
                age + wait <= subscriber.max_event_age_seconds
            ):
                with self._lock:
                    bus.stats.delivery_retries += 1
                self._tracker.begin()

                def retry() -> None:
                    try:
                        self._attempt(bus, subscriber, event, attempt=attempt + 1, first=first)
                    except BaseException as exc:  # an emulator bug
                        self._tracker.fail(exc)
                    finally:
                        self._tracker.end()

                self._scheduler.call_later(wait * self._scale, retry)
                return
            with self._lock:
                bus.stats.sent_to_on_failure += 1
            if subscriber.on_failure is not None:
                subscriber.on_failure(event, error)
            return
        with self._lock:
            bus.stats.deliveries += 1

    # -- the hook --------------------------------------------------------------------------------
    def _before_call(self, model: Any, context: dict[str, Any], **_: Any) -> Any:
        if model.service_model.service_name != "eventbridgev2" or context.get(DENIED_KEY):
            return None
        params = context.get(_PARAMS_KEY) or {}
        arn = str(params.get("EventBusArn", ""))
        bus = self.buses.get(arn)
        if model.name != "PutEvents" or bus is None:
            code, message = (
                ("ResourceNotFoundException", f"Event bus {arn} does not exist.")
                if model.name == "PutEvents"
                else ("InvalidInputException", f"{model.name} is not emulated locally")
            )
            return AWSResponse(arn or "local", 400, {}, None), {
                "Error": {"Code": code, "Message": message},
                "ResponseMetadata": {"HTTPStatusCode": 400},
            }
        entries = params.get("Entries") or []
        size = len(json.dumps(entries, default=str).encode())
        if not 1 <= len(entries) or size > 1_048_576:
            return AWSResponse(arn, 400, {}, None), {
                "Error": {
                    "Code": "InvalidInputException",
                    "Message": f"PutEvents takes 1 or more entries and at most 1 MB ({size} B)",
                },
                "ResponseMetadata": {"HTTPStatusCode": 400},
            }
        parsed = self.put_events(bus, entries)
        parsed["ResponseMetadata"] = {"HTTPStatusCode": 200}
        return AWSResponse(arn, 200, {}, None), parsed

    @contextmanager
    def installed(self, *sessions: boto3.session.Session) -> Iterator[EventBusesV2]:
        """Answer ``eventbridgev2`` calls while open (every session, as iam does)."""

        with before_call_hooks(_PARAMS_KEY, self._before_call, *sessions):
            yield self


def _envelope(entry: Mapping[str, Any], event_id: str) -> dict[str, Any]:
    when = entry.get("Time")
    if isinstance(when, dt.datetime):
        stamp = when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    else:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "version": "0",
        "id": event_id,
        "detail-type": entry.get("DetailType", ""),
        "source": entry.get("Source", ""),
        "account": LOCAL_ACCOUNT,
        "time": stamp,
        "region": LOCAL_REGION,
        "resources": list(entry.get("Resources") or []),
        "detail": json.loads(entry.get("Detail") or "{}"),
    }
