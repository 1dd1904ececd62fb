"""Botocore event hooks that make PutEvents report failed entries, at the AWS boundary.

The dropped entries are removed from the request before moto sees it, and re-inserted
into the parsed response as failed, so a "failed" entry is really not delivered: a
retry that resends it is the only way it can reach the bus.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3


class FlakyPutEvents:
    """Fail entries chosen by ``pick(call_number, entries) -> set of indices``."""

    def __init__(
        self,
        pick: Callable[[int, list[dict[str, Any]]], set[int]],
        error_code: str = "ThrottlingException",
    ) -> None:
        self.pick = pick
        self.error_code = error_code
        self.calls = 0
        self.failed_entries = 0
        self._dropped: list[int] | None = None
        self._original_count = 0
        self._all_failed: int | None = None

    def install(self, session: boto3.session.Session) -> FlakyPutEvents:
        """Register on ``session``; clients created from it afterwards get the hooks."""
        session.events.register("before-parameter-build.eventbridge.PutEvents", self._before)
        session.events.register("before-call.eventbridge.PutEvents", self._short_circuit)
        session.events.register("after-call.eventbridge.PutEvents", self._after)
        return self

    def _before(self, params: dict[str, Any], **_: Any) -> None:
        self.calls += 1
        entries = params["Entries"]
        drop = {i for i in self.pick(self.calls, entries) if 0 <= i < len(entries)}
        if not drop:
            self._dropped = None
            return
        self.failed_entries += len(drop)
        if len(drop) == len(entries):
            # Nothing to deliver: answer without calling moto (PutEvents needs 1+ entries).
            self._dropped, self._all_failed = None, len(entries)
            return
        self._dropped = sorted(drop)
        self._original_count = len(entries)
        params["Entries"] = [entry for i, entry in enumerate(entries) if i not in drop]

    def _short_circuit(self, **_: Any) -> tuple[Any, dict[str, Any]] | None:
        if self._all_failed is None:
            return None
        count, self._all_failed = self._all_failed, None
        failed = {"ErrorCode": self.error_code, "ErrorMessage": "injected by test"}
        return _Http200(), {"FailedEntryCount": count, "Entries": [dict(failed)] * count}

    def _after(self, parsed: dict[str, Any], **_: Any) -> None:
        if self._dropped is None:
            return
        delivered = iter(parsed["Entries"])
        parsed["Entries"] = [
            {"ErrorCode": self.error_code, "ErrorMessage": "injected by test"}
            if i in self._dropped
            else next(delivered)
            for i in range(self._original_count)
        ]
        parsed["FailedEntryCount"] = sum(1 for e in parsed["Entries"] if e.get("ErrorCode"))
        self._dropped = None


class _Http200:
    """Stands in for the HTTP response when the call is answered without moto."""

    status_code = 200
    headers: dict[str, str] = {}
