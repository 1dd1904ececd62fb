"""EventBridge locally: rules matched with :mod:`.event_patterns`, and capture of what the
handlers publish.

Capture is a botocore hook on the real ``PutEvents`` call to moto, not a moto rule with an
SQS target: moto answers the call (so a malformed entry is rejected as EventBridge would
reject it), and the hook routes exactly the entries moto accepted, synchronously, in
order, with the ``EventId`` moto assigned, and with no queue to poll or drain.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
import botocore.handlers

from . import identity
from .event_patterns import EventPattern
from .intrinsics import LOCAL_ACCOUNT, LOCAL_REGION
from .targets import Target

DEFAULT_BUS = "default"
_ENTRIES_KEY = "local_run.put_events.entries"


@dataclass(frozen=True)
class LocalRule:
    """A rule with its bus (physical name), compiled pattern and targets."""

    name: str
    bus: str
    pattern: EventPattern
    targets: Sequence[Target]


def bus_name(value: str | None) -> str:
    """A bus name from a name or an ARN; None is the default bus."""
    if not value:
        return DEFAULT_BUS
    return value.rsplit("/", 1)[-1] if value.startswith("arn:") else value


def event_envelope(entry: Mapping[str, Any], event_id: str) -> dict[str, Any]:
    """The event a rule target receives for one accepted PutEvents entry."""
    return {
        "version": "0",
        "id": event_id,
        "detail-type": entry.get("DetailType", ""),
        "source": entry.get("Source", ""),
        "account": LOCAL_ACCOUNT,
        "time": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": LOCAL_REGION,
        "resources": list(entry.get("Resources") or []),
        "detail": json.loads(entry.get("Detail") or "{}"),
    }


class EventRouter:
    """Matches events against every rule of their bus and hands them to the targets."""

    def __init__(self, rules: Sequence[LocalRule]) -> None:
        self.rules = list(rules)
        self._lock = threading.Lock()
        self.published: dict[str, int] = {}  # events seen, by detail-type
        self.unmatched: dict[str, int] = {}  # events no rule matched, by detail-type

    def put(self, bus: str, event: Mapping[str, Any]) -> list[str]:
        """Route ``event`` on ``bus``; returns the names of the targets it went to."""
        detail_type = str(event.get("detail-type", ""))
        delivered = []
        # Delivery is EventBridge's work, not the publisher's (whose thread this may be).
        with identity.acting_as(None):
            for rule in self.rules:
                if rule.bus == bus and rule.pattern.matches(event):
                    for target in rule.targets:
                        target.deliver(event)
                        delivered.append(target.name)
        with self._lock:
            self.published[detail_type] = self.published.get(detail_type, 0) + 1
            if not delivered:
                self.unmatched[detail_type] = self.unmatched.get(detail_type, 0) + 1
        return delivered


@contextmanager
def capture_put_events(router: EventRouter) -> Iterator[None]:
    """Route every entry moto accepts from ``PutEvents`` while the context is open.

    botocore copies ``BUILTIN_HANDLERS`` into each new session, so the hooks reach the
    clients handlers create during the run (handlers build their sessions lazily, on first
    invocation); boto3's default session, if it exists already, gets them registered too.
    """

    def remember_entries(params: Mapping[str, Any], context: dict[str, Any], **_: Any) -> None:
        context[_ENTRIES_KEY] = list(params.get("Entries") or [])

    def route_accepted(
        http_response: Any, parsed: Mapping[str, Any], context: dict[str, Any], **_: Any
    ) -> None:
        if getattr(http_response, "status_code", 500) != 200:
            return
        entries = context.get(_ENTRIES_KEY) or []
        # Response entries are positional; an accepted one has an EventId and no ErrorCode.
        for entry, result in zip(entries, parsed.get("Entries") or [], strict=False):
            if result.get("EventId") and not result.get("ErrorCode"):
                router.put(
                    bus_name(entry.get("EventBusName")), event_envelope(entry, result["EventId"])
                )

    hooks = [
        ("before-parameter-build.events.PutEvents", remember_entries),
        ("after-call.events.PutEvents", route_accepted),
    ]
    botocore.handlers.BUILTIN_HANDLERS.extend(hooks)
    default_session = boto3.DEFAULT_SESSION
    if default_session is not None:
        for event_name, hook in hooks:
            default_session.events.register(event_name, hook)
    try:
        yield
    finally:
        for entry in hooks:
            botocore.handlers.BUILTIN_HANDLERS.remove(entry)
        if default_session is not None:
            for event_name, hook in hooks:
                default_session.events.unregister(event_name, hook)
