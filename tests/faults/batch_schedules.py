"""Generated long-horizon fault schedules over the batch path: the per-key invariants of
issue 33.

Hypothesis writes the schedules (a stateful test) on a clock that runs up to 96 hours:
copies of rows (duplicates, and copies with another payload under the same key) at any
moment; buffer deliveries and schedule ticks killed at any point (before any DynamoDB call,
before or after any batch API call: around a create, a results read, a delete); per-request
results of every kind (succeeded, the nine errored types, expired, canceled) drawn per
schedule; batches that take minutes or hours, that someone cancels (with requests that
succeed despite it, and a ``canceling`` that may never end), deletes at the provider (404),
or that vanish while the API key sits in another Workspace; batches stuck open; results
streams read in a new order every time and broken partway; 429/500/529 and dropped
connections on create, retrieve, list, results and delete; a recorder (``on_outcome``)
that is down for some rows; and time passing. After each schedule the faults stop and the
lab delivers and ticks, an hour apart, until nothing waits. Then, per key:

1. billed requests (the emulator's succeeded results for its custom_id) <= ``MAX_ATTEMPTS``;
2. exactly one stored outcome: a label, or a dead letter with a code;
3. never silently dropped: every published row has it, no row is left staged, no
   submission is left open;
4. every dead letter alarmed: it is on the DLQ (whose alarm sees every arrival) with its
   ``ERROR_CODE``; every DLQ message carries one; the key's outcome reached ``on_outcome``,
   or its event is on the DLQ as ``BatchResultUnapplied``; a copy with another payload
   ends as an ``IdempotencyPayloadMismatch`` dead letter.

Profiles: ``HYPOTHESIS_PROFILE`` unset or ``fast`` runs 100 derandomized schedules
(``make test``); ``soak`` runs 2,000 random ones (``make soak``).
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
from moto import mock_aws

from constructs_lib.local_engine.environment import patched_environ
from constructs_lib.local_engine.message_batches import ERROR_TYPES, OPERATIONS
from tests.fakes import FakeMessagesAPI
from tests.stack_tables import PROSPECT_IDEMPOTENCY_TABLE, create_stack_table

from .batch_lab import BatchLab, BatchSettings, installed_hooks, stopped_clock
from .harness import REGION, TABLE, ClientPool, run_state_machine, unsigned

API_KEY = "sk-ant-batch-lab"
HOUR = 3600
#: The schedule's own clock stops here; the drain that follows adds what it needs.
HORIZON_SECONDS = 96 * HOUR
ROWS = (1, 2, 3)
#: Result kinds a request ends with, weighted: mostly answers, every kind possible.
KINDS = ("succeeded", "expired", "canceled", *ERROR_TYPES)
WEIGHTS = (12, 2, 1, *([1] * len(ERROR_TYPES)))
CREATE_FAULTS = ["disconnect", "disconnect_after_create", "error_after_create", 413]
kill_points = st.one_of(st.none(), st.none(), st.integers(min_value=1, max_value=24))
_names = itertools.count(1)
STATS: Counter[str] = Counter()

_PROFILES = {"fast": ("batch-fast", 100, True), "soak": ("batch-soak", 2_000, False)}
for _name, _examples, _fixed in _PROFILES.values():
    settings.register_profile(
        _name,
        max_examples=_examples,
        stateful_step_count=12,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        derandomize=_fixed,
    )
PROFILE = _PROFILES["soak" if os.environ.get("HYPOTHESIS_PROFILE") == "soak" else "fast"][0]


@contextlib.contextmanager
def batch_world(lab_settings: BatchSettings) -> Iterator[None]:
    """One moto account, one fake Messages API and one hooked session, for one module."""
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "ANTHROPIC_API_KEY": API_KEY,
    }
    with patched_environ(env, remove=["ANTHROPIC_BASE_URL"]), mock_aws(), FakeMessagesAPI() as api:
        os.environ["ANTHROPIC_BASE_URL"] = api.base_url
        # Unsigned, as the realtime lab's (harness.unsigned says why that hides nothing).
        step_session = unsigned(boto3.session.Session(region_name=REGION))
        lab_session = unsigned(boto3.session.Session(region_name=REGION))
        create_stack_table(lab_session, PROSPECT_IDEMPOTENCY_TABLE, TABLE)
        clock = stopped_clock()
        current: dict[str, BatchLab | None] = {"lab": None}
        hooks = installed_hooks(lambda: current["lab"], step_session)
        with clock.installed(), clock.deadlines_installed(), hooks:
            steps = ClientPool(step_session)  # each schedule's step: the module's clients
            BatchSchedule.world = (api, steps, lab_session, clock, current, lab_settings)
            yield


class BatchSchedule(RuleBasedStateMachine):
    """One schedule: see the module docstring. ``world`` is set by :func:`batch_world`."""

    world: tuple[Any, ...] = ()

    @initialize(
        seed=st.integers(min_value=0, max_value=2**31),
        delay=st.sampled_from([60, 600, HOUR, 6 * HOUR, 20 * HOUR]),
        cancel_delay=st.sampled_from([60, HOUR, 10**9]),
    )
    def start(self, seed: int, delay: int, cancel_delay: int) -> None:
        api, steps, _, clock, current, lab_settings = self.world
        self.lab = BatchLab(api, steps, f"batchlab{next(_names)}", clock, lab_settings)
        current["lab"] = self.lab
        store = self.lab.store
        draws = random.Random(seed)
        store.seed = seed
        store.processing_delay = delay
        store.cancel_delay_seconds = cancel_delay
        store.decide = lambda custom_id, params: draws.choices(KINDS, WEIGHTS)[0]
        self.lab.publish(ROWS[0])

    def has_time(self) -> bool:
        return self.lab.clock.now() - self.lab.started_at < HORIZON_SECONDS

    @rule(row=st.sampled_from(ROWS), changed=st.sampled_from([False, False, False, True]))
    def publish(self, row: int, changed: bool) -> None:
        """A copy of a row; now and then one with another payload under the same key."""
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

    @rule(
        operation=st.sampled_from(OPERATIONS),
        entry=st.sampled_from([429, 500, 529, "disconnect"]),
        times=st.integers(min_value=1, max_value=3),
    )
    def calls_fail(self, operation: str, entry: int | str, times: int) -> None:
        """The next calls of one operation fail (a throttle, a server fault, a drop)."""
        self.lab.store.faults[operation] += [entry] * times

    @rule(entry=st.sampled_from(CREATE_FAULTS))
    def create_fails(self, entry: str | int) -> None:
        """The next create fails before the batch exists, or after (its answer lost)."""
        self.lab.store.faults["create"].append(entry)

    @rule(lines=st.integers(min_value=1, max_value=3))
    def a_read_breaks(self, lines: int) -> None:
        self.lab.store.results_drop_after = lines

    @rule(which=st.integers(min_value=0, max_value=7))
    def someone_cancels(self, which: int) -> None:
        """An operator cancels a batch at the provider."""
        batches = [b for b in self.lab.store.open_batches() if b.cancel_initiated_at is None]
        if batches:
            self.lab.store.cancel(batches[which % len(batches)].id)

    @rule(which=st.integers(min_value=0, max_value=7))
    def someone_deletes(self, which: int) -> None:
        """Someone deletes an ended batch at the provider: 404 from now on."""
        store = self.lab.store
        still_open = store.open_batches()
        ended = [b for b in store.batches.values() if not b.deleted and b not in still_open]
        if ended:
            ended[which % len(ended)].deleted = True

    @rule(which=st.integers(min_value=0, max_value=7))
    def a_batch_sticks(self, which: int) -> None:
        """A batch that will not end on its own, not even in its 24 h."""
        store = self.lab.store
        batches = store.open_batches()
        if batches:
            batch = batches[which % len(batches)]
            batch.finish_times = [float("inf")] * len(batch.requests)
            store.lifetime_seconds = 10**9

    @rule()
    def the_key_moves_to_another_workspace(self) -> None:
        self.lab.store.workspaces[API_KEY] = "wrkspc_elsewhere"

    @rule()
    def the_key_moves_back(self) -> None:
        self.lab.store.workspaces.clear()

    @rule(row=st.sampled_from(ROWS))
    def a_recorder_is_down(self, row: int) -> None:
        self.lab.failing_outcomes.add(row)

    @rule()
    def the_recorder_is_back(self) -> None:
        self.lab.failing_outcomes.clear()

    def teardown(self) -> None:
        lab: BatchLab | None = getattr(self, "lab", None)
        if lab is None:
            return
        try:
            store = lab.store
            store.lifetime_seconds = 24 * HOUR
            store.cancel_delay_seconds = 60
            lab.drain()
            check_invariants(lab)
            _tally(lab)
        finally:
            self.world[4]["lab"] = None


def check_invariants(lab: BatchLab) -> None:
    """The per-key invariants of the module docstring."""
    observed = lab.observed
    dlq = lab.dead_letters()
    assert all(m["attributes"].get("ERROR_CODE") for m in dlq), "an uncoded DLQ message"
    billed = lab.billed_by_custom_id()
    keys = {lab.custom_id(row): row for row in observed.published}
    assert set(billed) <= set(keys), "a request billed for no published row"
    for row in sorted(observed.published):
        assert billed[lab.custom_id(row)] <= lab.settings.max_attempts, (
            f"row {row}: {billed[lab.custom_id(row)]} billed requests, budget "
            f"{lab.settings.max_attempts}"
        )
        stored = lab.stored(row)
        assert stored is not None, f"row {row}: no stored outcome"
        on_dlq = [m for m in dlq if m["body"].get("detail", {}).get("row_number") == row]
        codes = {m["attributes"]["ERROR_CODE"] for m in on_dlq}
        if stored["status"] == "dead_lettered":
            assert stored["error_code"], f"row {row}: a dead letter without a code"
            assert any(
                m["attributes"].get("DEAD_LETTER_ID") == stored["dead_letter_id"] for m in on_dlq
            ), f"row {row}: dead-lettered {stored['error_code']} but not on the DLQ"
        else:
            assert stored["status"] == "completed" and stored.get("label"), stored
        reported = [
            o for o in observed.outcomes[row] if o["status"] in ("completed", "dead_lettered")
        ]
        assert reported or "BatchResultUnapplied" in codes, f"row {row}: never reported"
    changed_rows = {
        m["body"]["detail"]["row_number"]
        for m in dlq
        if m["attributes"]["ERROR_CODE"] == "IdempotencyPayloadMismatch"
    }
    if observed.changed_payloads:
        assert changed_rows, "a copy with another payload was not dead-lettered"
    assert lab.rows_waiting() == [], "a row is left staged"


def _tally(lab: BatchLab) -> None:
    STATS["schedules"] += 1
    STATS["billed"] += lab.store.billed
    STATS["batches"] += len(lab.store.batches)
    STATS["hours"] += int((lab.clock.now() - lab.started_at) // HOUR)
    for name, count in lab.store.result_counts.items():
        STATS[f"result:{name}"] += count
    for row in lab.observed.published:
        stored = lab.stored(row) or {}
        STATS[f"outcome:{stored.get('error_code') or stored.get('status')}"] += 1
    for what, count in lab.observed.kills.items():
        STATS[f"killed:{what}"] += count


def run_batch_schedules(name: str) -> dict[str, int]:
    """Run the state machine under the selected profile; return the tally."""
    STATS.clear()
    machine = type(name, (BatchSchedule,), {"__module__": __name__})
    run_state_machine(machine, PROFILE)
    return dict(sorted(STATS.items()))
