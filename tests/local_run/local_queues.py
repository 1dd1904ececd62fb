"""The local engine's SQS queues on a test clock, shared by the queue and Lambda-fault tests
(the ``clock`` fixture is in conftest.py)."""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Any

from constructs_lib.local_engine.scheduling import Scheduler, WorkTracker
from constructs_lib.local_engine.sqs_queues import Invoke, LocalQueue, MappingPoller

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


def make_poller(
    queue: LocalQueue,
    invoke: Invoke,
    pool: Executor,
    tracker: WorkTracker,
    *,
    max_concurrency: int = 2,
    **kwargs: Any,
) -> MappingPoller:
    """``queue``'s event source mapping, as the step's: one record a batch, partial batch
    responses, ``max_concurrency`` invocations at once on ``pool``; ``kwargs`` add to it."""
    options: dict[str, Any] = {"name": "step", "batch_size": 1, **kwargs}
    return MappingPoller(
        queue,
        invoke,
        report_batch_item_failures=True,
        max_concurrency=max_concurrency,
        executor=pool,
        tracker=tracker,
        **options,
    )
