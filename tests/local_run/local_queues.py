"""The local engine's SQS queues on a test clock, shared by the queue and Lambda-fault tests
(the ``clock`` fixture is in conftest.py)."""

from __future__ import annotations

from typing import Any

from constructs_lib.local_engine.scheduling import Scheduler, WorkTracker
from constructs_lib.local_engine.sqs_queues import LocalQueue

URL = "https://sqs.us-east-1.amazonaws.com/123456789012/"
ARN = "arn:aws:sqs:us-east-1:123456789012:"
MINUTE = 0.2  # local seconds per minute of AWS time


def make_queue(clock: tuple[Scheduler, WorkTracker], name: str, **kwargs: Any) -> LocalQueue:
    """A queue ``name`` on ``clock`` (the fixture's scheduler and tracker), a minute = MINUTE."""
    scheduler, tracker = clock
    return LocalQueue(
        name,
        URL + name,
        ARN + name,
        seconds_per_minute=MINUTE,
        scheduler=scheduler,
        tracker=tracker,
        **kwargs,
    )
