"""``ModelDelivery``: how an :class:`~constructs_lib.IdempotentModelStep` sends its rows.

- :meth:`ModelDelivery.realtime` (the default): one Messages request per row, as soon as the
  row is read from the buffer queue.
- :meth:`ModelDelivery.batch`: rows are staged and sent as Anthropic Message Batches (50 %
  of the realtime price, up to 24 h to an answer) of at most ``max_requests`` requests and
  256 MB, at the latest ``max_wait`` after the first row waited. A schedule tick
  (``rate(1 minute)``, input ``{"model_step_batch": "tick"}``) collects ended batches.
  The record key, the idempotency record, the attempt budget and the stored result shape
  (plus ``"delivery": "batch"`` and ``"batch_id"``) are the realtime ones; see
  ``docs/runtime.md``, "Message Batches delivery".

Example::

    IdempotentModelStep(
        self,
        "Step",
        ...,
        delivery=ModelDelivery.batch(max_wait=Duration.minutes(5), max_requests=10_000),
    )
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration

from ._validation import check_duration_range, check_int_range

#: ``max_requests`` allowed: the Message Batches API takes at most 100,000 requests a batch.
MAX_REQUESTS_RANGE = (1, 100_000)
#: ``max_wait`` allowed (inclusive, whole seconds).
MAX_WAIT_RANGE = (Duration.seconds(1), Duration.hours(1))
#: Defaults of :meth:`ModelDelivery.batch`.
DEFAULT_MAX_WAIT = Duration.minutes(5)
DEFAULT_MAX_REQUESTS = 10_000
#: An SQS event source mapping takes at most 10,000 records a batch and a 300 s window.
MAPPING_MAX_BATCH_SIZE = 10_000
MAPPING_MAX_WINDOW_SECONDS = 300
#: Under batch delivery the function runs at least this long: one invocation stages up to
#: 10,000 rows, and a tick streams results until 30 s before its deadline.
BATCH_MIN_TIMEOUT = Duration.minutes(15)


@dataclass(frozen=True)
class ModelDelivery:
    """Realtime requests (default) or Message Batches. Build it with :meth:`realtime` or
    :meth:`batch`."""

    #: ``"realtime"`` or ``"batch"`` (the runtime's ``MODEL_DELIVERY``).
    kind: str = "realtime"
    #: Batch only: a staged row is sent at the latest this long after it was enqueued.
    max_wait: Duration | None = None
    #: Batch only: requests per Message Batch, at most.
    max_requests: int | None = None

    @classmethod
    def realtime(cls) -> ModelDelivery:
        """One Messages request per row (the default)."""
        return cls("realtime")

    @classmethod
    def batch(
        cls, *, max_wait: Duration = DEFAULT_MAX_WAIT, max_requests: int = DEFAULT_MAX_REQUESTS
    ) -> ModelDelivery:
        """Message Batches delivery.

        :param max_wait: a staged row is submitted at the latest this long after it was
            first enqueued, 1 second to 1 hour. Default 5 minutes. The buffer queue's
            batching window is ``min(max_wait, 300 s)``.
        :param max_requests: requests per Message Batch, at most; 1 to 100,000 (the API's
            limit). Default 10,000. The buffer queue's batch size is
            ``min(max_requests, 10,000)``.

        Raises ``PropValidationError`` naming the prop, the value and the range.
        """
        owner = "ModelDelivery.batch"
        check_int_range(owner, "max_requests", max_requests, *MAX_REQUESTS_RANGE)
        check_duration_range(owner, "max_wait", max_wait, *MAX_WAIT_RANGE)
        return cls("batch", max_wait, max_requests)

    @property
    def is_batch(self) -> bool:
        """True for Message Batches delivery."""
        return self.kind == "batch"

    @property
    def mapping_batch_size(self) -> int:
        """The buffer queue mapping's batch size: 1 realtime, else
        ``min(max_requests, 10,000)``."""
        if not self.is_batch or self.max_requests is None:
            return 1
        return min(self.max_requests, MAPPING_MAX_BATCH_SIZE)

    @property
    def mapping_batching_window(self) -> Duration | None:
        """The buffer queue mapping's batching window: none realtime, else
        ``min(max_wait, 300 s)``, at least 1 s (a batch size above 10 needs one)."""
        if not self.is_batch or self.max_wait is None:
            return None
        seconds = int(self.max_wait.to_seconds())
        return Duration.seconds(max(1, min(seconds, MAPPING_MAX_WINDOW_SECONDS)))

    def function_timeout(self, timeout: Duration) -> Duration:
        """The function's timeout: ``timeout`` realtime; under batch delivery at least
        :data:`BATCH_MIN_TIMEOUT` (15 minutes)."""
        if not self.is_batch or timeout.is_unresolved():
            return timeout
        if timeout.to_seconds() >= BATCH_MIN_TIMEOUT.to_seconds():
            return timeout
        return BATCH_MIN_TIMEOUT

    def environment(self) -> dict[str, str]:
        """The runtime's batch variables (none for realtime: its default)."""
        from ._runtime_environment import runtime_environment as env

        if not self.is_batch or self.max_wait is None or self.max_requests is None:
            return {}
        return {
            env.MODEL_DELIVERY: "batch",
            env.BATCH_MAX_REQUESTS: str(self.max_requests),
            env.BATCH_MAX_WAIT_SECONDS: str(int(self.max_wait.to_seconds())),
        }
