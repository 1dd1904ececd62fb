"""Publishing operator retries onto the row bus: the classic bus, or an EventBridge v2 bus.

``EVENT_BUS_KIND`` selects it: ``classic`` (default; ``events`` PutEvents on
``EVENT_BUS_NAME``) or ``v2`` (``eventbridgev2`` PutEvents on ``EVENT_BUS_ARN``, with
``SystemMetadata.DeduplicationId = "{upload_id}#{row_number}#r{generation}"``, so a
repeated publish of the same generation is suppressed by the bus too). Requests, limits and
retries are ``prospect_contract.put_events``'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from prospect_contract.put_events import Bus, Event, RetryPolicy, V2Bus, put_events

#: An operator waits for the answer, and the function has 30 s: three rounds, with at most
#: a second of backoff between them.
RETRY = RetryPolicy(max_attempts=3, base_delay=0.2, max_delay=1.0)


class Publisher:
    """``publish(events)`` -> one error string (or None when published) per event."""

    def __init__(self, bus: Bus, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.bus = bus
        self._sleep = sleep

    @property
    def v2(self) -> bool:
        """True on an EventBridge v2 bus (entries carry a deduplication id)."""
        return isinstance(self.bus, V2Bus)

    def publish(self, events: Sequence[Event]) -> list[str | None]:
        """Publish in as few calls as the bus allows, re-sending only entries that failed
        with a retryable code; ``"Code: message"`` for each event that was not accepted."""
        failures = put_events(self.bus, events, retry=RETRY, sleep=self._sleep)
        return [None if failure is None else failure.describe() for failure in failures]
