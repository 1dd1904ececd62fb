"""The long-horizon batch fault schedules against the Bedrock batch adapter (issue 37).

The same lab and per-key invariants as :mod:`.batch_schedules` (billed requests <=
``MAX_ATTEMPTS``, one stored outcome, nothing dropped, every dead letter alarmed), with the
step on ``MODEL_PROVIDER=bedrock``: its jobs go through boto3 over HTTP to the local Bedrock
control plane (:mod:`constructs_lib.local_engine.bedrock_batch_jobs`, SigV4 checked), their
input and output in moto's S3, on the lab's clock. A schedule draws:

- how each job ends (Completed, PartiallyCompleted, Failed, Stopped, Expired) and each
  record's answer (succeeded, or an ``errorCode`` of 400, 408, 424, 429, 500, 503);
- creates that fail before the job exists (a dropped connection, a throttle, the
  jobs-in-progress quota) or after (its answer lost, a 500 after it was made);
- kills before and after every bedrock and S3 call and every DynamoDB call of an
  invocation: around ``CreateModelInvocationJob``, a results read, a delete;
- jobs that stick open past their timeout (the tick stops them), operators that stop one,
  a recorder that is down, copies of rows, and time passing.

A handful of schedules run in ``make test`` (:data:`SCHEDULES`): the Message Batches
machine carries the long tail; this one proves the second adapter under the same core.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule
from model_step.bedrock_batch_wire import custom_id_of_record
from moto import mock_aws

from constructs_lib.local_engine.bedrock_batch_jobs import LocalBedrockBatchJobs
from constructs_lib.local_engine.environment import patched_environ
from tests.stack_tables import PROSPECT_IDEMPOTENCY_TABLE, create_stack_table

from .batch_lab import BatchLab, BatchSettings, stopped_clock
from .batch_schedules import check_invariants
from .harness import ACCOUNT, REGION, TABLE, ClientPool, run_state_machine

HOUR = 3600
HORIZON_SECONDS = 96 * HOUR
ROWS = (1, 2, 3)
BUCKET = "bedrock-batch-lab"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/bedrock-batch-lab"
MODEL = "us.anthropic.claude-haiku-5-5"
#: Schedules per run: a handful, derandomized.
SCHEDULES = 12
END_STATES = (None, None, "PartiallyCompleted", "Failed", "Failed", "Stopped", "Expired")
RECORD_ANSWERS: tuple[str | int, ...] = ("succeeded", 400, 408, 424, 429, 500, 503)
RECORD_WEIGHTS = (14, 1, 1, 1, 1, 1, 1)
CREATE_FAULTS = [
    "disconnect",
    "disconnect_after_create",
    "error_after_create",
    "ThrottlingException",
    "ServiceQuotaExceededException",
]
kill_points = st.one_of(st.none(), st.none(), st.integers(min_value=1, max_value=24))
_names = itertools.count(1)
STATS: Counter[str] = Counter()

settings.register_profile(
    "bedrock-batch",
    max_examples=SCHEDULES,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    derandomize=True,
)


def _answer(model_input: dict[str, Any], record_id: str, model_id: str) -> dict[str, Any]:
    return {
        "id": f"msg_{record_id[:16]}",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-5-5",
        "content": [{"type": "text", "text": "warm"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 2},
    }


class BedrockBatchLab(BatchLab):
    """The batch lab with the step on Bedrock batch inference and ``jobs`` as its provider."""

    def __init__(self, jobs: LocalBedrockBatchJobs, *args: Any) -> None:
        super().__init__(
            None,
            *args,
            {
                "model_provider": "bedrock",
                "model_id": MODEL,
                "batch_bucket_name": BUCKET,
                "batch_role_arn": ROLE,
                "batch_s3_prefix": f"{args[1]}/",
            },
        )
        self.jobs = jobs

    def stop_faults(self) -> None:
        """Creates stop failing and jobs stop sticking; how jobs end and how records are
        answered stay as drawn (as the Message Batches lab keeps its result draws)."""
        jobs = self.jobs
        jobs.create_faults.clear()
        jobs.stuck = False

    def billed_by_custom_id(self) -> Counter[str]:
        return Counter(
            {
                custom_id_of_record(record_id): count
                for record_id, count in self.jobs.billed_by_record.items()
            }
        )


@contextlib.contextmanager
def bedrock_batch_world(lab_settings: BatchSettings) -> Iterator[None]:
    """One moto account with the jobs' bucket, the local Bedrock control plane on the lab's
    clock, and one session whose DynamoDB, bedrock and S3 calls are kill points."""
    import model_step.batch_limits

    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
    }
    minimum = model_step.batch_limits.BEDROCK_MIN_REQUESTS
    clock = stopped_clock()
    with patched_environ(env, remove=["ANTHROPIC_BASE_URL"]), mock_aws():
        lab_session = boto3.session.Session(region_name=REGION)
        create_stack_table(lab_session, PROSPECT_IDEMPOTENCY_TABLE, TABLE)
        lab_session.client("s3").create_bucket(Bucket=BUCKET)
        jobs = LocalBedrockBatchJobs(
            lambda: lab_session.client("s3"), _answer, clock=clock.now, min_records=1
        )
        with jobs:
            os.environ["AWS_ENDPOINT_URL_BEDROCK"] = jobs.base_url
            # A schedule's three rows make jobs under Bedrock's 100: let them be jobs.
            model_step.batch_limits.BEDROCK_MIN_REQUESTS = 1
            step_session = boto3.session.Session(region_name=REGION)
            current: dict[str, BatchLab | None] = {"lab": None}
            try:
                with clock.installed(), _kill_points(lambda: current["lab"], step_session):
                    BedrockBatchSchedule.world = (
                        jobs,
                        ClientPool(step_session),  # each schedule's step: the module's clients
                        lab_session,
                        clock,
                        current,
                        lab_settings,
                    )
                    yield
            finally:
                model_step.batch_limits.BEDROCK_MIN_REQUESTS = minimum
                os.environ.pop("AWS_ENDPOINT_URL_BEDROCK", None)


@contextlib.contextmanager
def _kill_points(lab_of: Any, session: boto3.session.Session) -> Iterator[None]:
    """Before every DynamoDB call, and before and after every bedrock and S3 call."""

    def point(**_: Any) -> None:
        lab = lab_of()
        if lab is not None:
            lab.hook_point()

    events = [
        "before-call.dynamodb",
        "before-call.bedrock",
        "after-call.bedrock",
        "before-call.s3",
        "after-call.s3",
    ]
    for event in events:
        session.events.register(event, point)
    try:
        yield
    finally:
        for event in events:
            session.events.unregister(event, point)


class BedrockBatchSchedule(RuleBasedStateMachine):
    """One schedule (see the module docstring); ``world`` is set by
    :func:`bedrock_batch_world`."""

    world: tuple[Any, ...] = ()

    @initialize(
        seed=st.integers(min_value=0, max_value=2**31),
        delay=st.sampled_from([60, 600, HOUR, 6 * HOUR, 20 * HOUR]),
    )
    def start(self, seed: int, delay: int) -> None:
        jobs, steps, _, clock, current, lab_settings = self.world
        self.lab = BedrockBatchLab(jobs, steps, f"bedrocklab{next(_names)}", clock, lab_settings)
        current["lab"] = self.lab
        # Each schedule starts with no job, no fault and nothing billed.
        jobs.jobs.clear()
        jobs.by_token.clear()
        jobs.billed_by_record.clear()
        jobs.create_faults.clear()
        jobs.stuck = False
        draws = random.Random(seed)
        jobs.seed = seed
        jobs.processing_delay = delay
        jobs.decide = lambda record_id, model_input: draws.choices(RECORD_ANSWERS, RECORD_WEIGHTS)[
            0
        ]
        jobs.end_state = lambda number: draws.choice(END_STATES)
        self.lab.publish(ROWS[0])

    def has_time(self) -> bool:
        return self.lab.clock.now() - self.lab.started_at < HORIZON_SECONDS

    @rule(row=st.sampled_from(ROWS), changed=st.sampled_from([False, False, False, True]))
    def publish(self, row: int, changed: bool) -> None:
        self.lab.publish(row, changed=changed and row in self.lab.observed.published)

    @rule(kill=kill_points)
    def poll(self, kill: int | None) -> None:
        self.lab.poll(kill)

    @rule(kill=kill_points)
    def tick(self, kill: int | None) -> None:
        self.lab.tick(kill)

    @precondition(lambda self: self.has_time())
    @rule(seconds=st.sampled_from([61, 181, 900, HOUR, 6 * HOUR, 13 * HOUR, 25 * HOUR]))
    def time_passes(self, seconds: int) -> None:
        self.lab.clock.advance(seconds)

    @rule(entry=st.sampled_from(CREATE_FAULTS))
    def create_fails(self, entry: str) -> None:
        self.lab.jobs.create_faults.append(entry)

    @rule()
    def jobs_stick(self) -> None:
        """Jobs that neither end nor expire until someone stops them."""
        self.lab.jobs.stuck = True

    @rule(which=st.integers(min_value=0, max_value=7))
    def someone_stops_a_job(self, which: int) -> None:
        jobs = self.lab.jobs
        running = [j for j in jobs.jobs.values() if j.status not in ("Completed", "Failed")]
        running = [j for j in running if j.status not in ("PartiallyCompleted", "Stopped")]
        running = [j for j in running if j.status != "Expired"]
        if running:
            with contextlib.suppress(Exception):
                jobs.stop_job(running[which % len(running)].arn)

    @rule(row=st.sampled_from(ROWS))
    def a_recorder_is_down(self, row: int) -> None:
        self.lab.failing_outcomes.add(row)

    @rule()
    def the_recorder_is_back(self) -> None:
        self.lab.failing_outcomes.clear()

    def teardown(self) -> None:
        lab: BedrockBatchLab | None = getattr(self, "lab", None)
        if lab is None:
            return
        try:
            lab.drain()
            check_invariants(lab)
            _tally(lab)
        finally:
            self.world[4]["lab"] = None


def _tally(lab: BedrockBatchLab) -> None:
    STATS["schedules"] += 1
    STATS["billed"] += sum(lab.billed_by_custom_id().values())
    STATS["jobs"] += len(lab.jobs.jobs)
    for job in lab.jobs.jobs.values():
        STATS[f"job:{job.status}"] += 1
    for row in lab.observed.published:
        stored = lab.stored(row) or {}
        STATS[f"outcome:{stored.get('error_code') or stored.get('status')}"] += 1
    for what, count in lab.observed.kills.items():
        STATS[f"killed:{what}"] += count


def run_bedrock_batch_schedules(name: str) -> dict[str, int]:
    """Run the state machine (:data:`SCHEDULES` derandomized schedules); return the tally."""
    STATS.clear()
    machine = type(name, (BedrockBatchSchedule,), {"__module__": __name__})
    run_state_machine(machine, "bedrock-batch")
    return dict(sorted(STATS.items()))
