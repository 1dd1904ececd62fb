"""How long a local run may take to settle before it fails: derived from the work.

A fixed bound cannot fit runs whose work spans three orders of magnitude (3 rows or 20,000,
no rate limit or 30 requests a minute), so the default is computed from what the run must
do (see ``docs/local-run.md``, "How long a run may take"). It is the sum of four parts:

- ``STARTUP_SECONDS``: the splitter's first invocation, the drain and the slowest thread
  start on a loaded machine;
- **processing**: every receive the step's queues make, at ``WALL_SECONDS_PER_RECEIVE``
  each. There is one receive per copy of a row. A faulty or killed row may use every
  attempt. A throttled receive is repeated;
- **the rate limit**: the billed requests divided by the requests per minute, in minutes of
  the run's clock. This is capped at the maximum event age: a row the limit keeps waiting
  longer than that is dead-lettered, not waited for;
- **the tail**: the longest one row may stay in the step's queues after everything else is
  done. That is every receive its redrive chain allows (``maxReceiveCount`` times the
  visibility timeout, per queue), ``REDRIVE_ROUNDS`` times because the step sends a redriven
  row back to its buffer queue. It too is capped at the maximum event age. Functions without
  queues are covered by Lambda's async retry waits instead. Under batch faults a row may
  also wait out a lost or canceled batch once per attempt (``batch_tail_seconds``).

Pure arithmetic, no AWS: the CLI can show it, and a test can check it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .assembly import CloudAssembly, FunctionSpec

#: Engine start-up is outside the bound; this covers the first split and the final drain.
STARTUP_SECONDS = 60.0
#: Wall seconds one receive of a row costs across the pipeline (split, step, ledger, record),
#: with a 3x margin. On 2 cores at load 7-8, 2,000 rows x 2 copies took 0.04 s a receive
#: (173 s at --rate-limit 30; 242 s with faults, kills and throttles).
WALL_SECONDS_PER_RECEIVE = 0.12
#: The step sends a row its redrive queue hands it back to the buffer queue up to twice
#: (model_step.work.REDRIVE_REQUEUES): three passes through the queue chain at most.
REDRIVE_ROUNDS = 3
#: A throttle rate this high or higher is costed as this (a rate of 1 never runs anything,
#: and every row then ends by redrive after its receives, which the tail covers).
MAX_COSTED_THROTTLE_RATE = 0.9
#: Lambda's async retry waits (1 and 2 minutes), with the engine's 1.5x jitter at most.
ASYNC_RETRY_MINUTES = (1.0 + 2.0) * 1.5


@dataclass(frozen=True)
class RunWork:
    """What a run must do. Rates are in [0, 1], seconds are AWS seconds unless named wall."""

    rows: int
    duplicates: int = 1
    seconds_per_minute: float = 1.0
    rate_limit: int | None = None
    max_attempts: int = 3
    max_event_age_seconds: int = 86_400
    queue_horizon_seconds: float = 0.0
    fault_rate: float = 0.0
    kill_rate: float = 0.0
    throttle_rate: float = 0.0
    #: The longest a row may wait on batches that fail it (lost, canceled): the batch
    #: faults' own tail, AWS seconds (0 without them).
    batch_tail_seconds: float = 0.0


@dataclass(frozen=True)
class RunBound:
    """The derived bound and its parts, in wall seconds."""

    startup: float
    processing: float
    rate_limit: float
    tail: float

    @property
    def total(self) -> float:
        """The bound: the sum of the parts."""
        return self.startup + self.processing + self.rate_limit + self.tail

    def describe(self) -> str:
        """One line naming the parts, for the timeout error and the docs."""
        return (
            f"{self.total:.0f} s = {self.startup:.0f} s start + {self.processing:.0f} s of "
            f"receives + {self.rate_limit:.0f} s at the rate limit + {self.tail:.0f} s for the "
            "last row's redrives"
        )


def derive_run_bound(work: RunWork) -> RunBound:
    """The wall seconds ``work`` may take to settle (see the module docstring)."""
    to_wall = work.seconds_per_minute / 60.0
    failing = min(1.0, work.fault_rate + work.kill_rate)
    requests_per_row = 1.0 + failing * max(0, work.max_attempts - 1)
    throttled = min(work.throttle_rate, MAX_COSTED_THROTTLE_RATE)
    receives = work.rows * work.duplicates * requests_per_row / (1.0 - throttled)
    rate_minutes = 0.0
    if work.rate_limit:
        rate_minutes = min(
            work.rows * requests_per_row / work.rate_limit, work.max_event_age_seconds / 60.0
        )
    if work.queue_horizon_seconds > 0:
        tail = min(work.max_event_age_seconds, REDRIVE_ROUNDS * work.queue_horizon_seconds)
    else:
        tail = ASYNC_RETRY_MINUTES * 60.0
    tail += work.batch_tail_seconds
    return RunBound(
        startup=STARTUP_SECONDS,
        processing=receives * WALL_SECONDS_PER_RECEIVE,
        rate_limit=rate_minutes * work.seconds_per_minute,
        tail=tail * to_wall,
    )


def queue_horizon_seconds(assembly: CloudAssembly, function: FunctionSpec) -> float:
    """AWS seconds a message may spend in the queues that feed ``function`` and their redrive
    chains: per queue with a redrive policy, ``maxReceiveCount`` receives of one visibility
    timeout each (0 for a function no queue feeds)."""
    sources = [
        mapping.source_logical_id
        for mapping in assembly.event_source_mappings()
        if mapping.enabled and mapping.function_logical_id == function.logical_id
    ]
    return sum(_chain_seconds(assembly, sources))


def _chain_seconds(assembly: CloudAssembly, sources: Iterable[str]) -> Iterable[float]:
    seen: set[str] = set()
    pending = list(sources)
    while pending:
        logical_id = pending.pop()
        if logical_id in seen or logical_id not in assembly.resources:
            continue
        seen.add(logical_id)
        props = assembly.resources[logical_id].properties
        redrive = props.get("RedrivePolicy") or {}
        if not redrive:
            continue
        yield float(redrive["maxReceiveCount"]) * float(props.get("VisibilityTimeout", 30))
        target = (redrive.get("deadLetterTargetArn") or {}).get("Fn::GetAtt", [None])[0]
        if isinstance(target, str):
            pending.append(target)
