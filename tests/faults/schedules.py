"""Generated fault schedules against the real handler: the per-key invariants of issue 15.

Hypothesis writes the schedules (a stateful test): copies of events at any moment, polls of
the buffer and redrive queues that are throttled, killed at any point of the invocation
(before or after the request is sent, between the DLQ send and its record, ...) or meet a
failing AWS call (a save that fails, a save that applied but answered with an error, a DLQ
send that fails), answers that are 200s, 500s, 429/529 with retry-after, dropped connections,
slow chunked streams or 400s, time passing, operator retries and DLQ redrives. After each
schedule the queues are drained without faults and, per record key:

1. at most ``MAX_ATTEMPTS`` billed requests (one for a key an operator redrove from the DLQ),
   and none once the key's result is stored;
2. exactly one terminal result: a stored answer, or a stored dead letter whose code is on a
   DLQ message (``ERROR_CODE``, ``DEAD_LETTER_ID``), counted once (``NonRetryableFailures``)
   and visible to the DLQ alarms; every later delivery replays it;
3. nothing is left on the buffer or redrive queues, and every message on the DLQ carries a
   code, unless the redrive queue's every receive of it failed (the function could not run
   at all: only the DLQ alarm can see that, and it does).

Profiles: ``fast`` (``make test``: 100 schedules in each of two test modules, which
pytest-xdist runs side by side; derandomized, so CI sees the same 200 every run) and
``soak`` (``make soak``: ``HYPOTHESIS_PROFILE=soak``, 5,000 random schedules per module,
10,000 in all). ``hunt`` (300 random, printing a reproducer blob) is for local bug hunts.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from collections.abc import Iterator

import boto3
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule
from model_step import model_call
from moto import mock_aws

from tests.fakes import FakeMessagesAPI

from .harness import (
    API_BEHAVIOURS,
    REGION,
    Fault,
    FaultLab,
    MovableClock,
    QueueSettings,
    Scope,
    _scope_of,
    create_table,
    installed_hooks,
)

settings.register_profile(
    "fast",
    max_examples=100,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    derandomize=True,
)
settings.register_profile(
    "hunt",
    max_examples=300,
    print_blob=True,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
settings.register_profile(
    "soak",
    max_examples=5_000,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "fast")

ROWS = (1, 2)
_names = itertools.count(1)
#: A hook point of an invocation (see ``Fault``), or none: most polls meet no fault.
hook_points = st.one_of(st.none(), st.none(), st.integers(min_value=1, max_value=16))
#: Failures are drawn more often than a real provider gives them, so schedules meet them.
api_behaviours = st.sampled_from(["ok", "ok", "500", "500", "disconnect", "slow", *API_BEHAVIOURS])
faults = st.builds(
    Fault,
    throttle=st.integers(min_value=0, max_value=4).map(lambda n: n == 0),
    kill_at=hook_points,
    fail_at=hook_points,
    api=api_behaviours,
)
STATS: dict[str, int] = {}


@contextlib.contextmanager
def fault_world(settings_: QueueSettings) -> Iterator[tuple]:
    """One moto account, one fake Messages API and one hooked session, for one test module;
    ``settings_`` are the step's settings from the synthesized template."""
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "ANTHROPIC_API_KEY": "sk-ant-fault-lab",
    }
    saved = {name: os.environ.get(name) for name in [*env, "ANTHROPIC_BASE_URL"]}
    os.environ.update(env)
    # The lab's deadline is 0.3 s of real time, so a slow answer costs little; the runtime's
    # floor for a deadline (1 s) is lowered to match.
    floor = model_call.MIN_MODEL_TIMEOUT_SECONDS
    model_call.MIN_MODEL_TIMEOUT_SECONDS = 0.1
    with mock_aws(), FakeMessagesAPI() as api:
        os.environ["ANTHROPIC_BASE_URL"] = api.base_url
        step_session = boto3.session.Session(region_name=REGION)
        lab_session = boto3.session.Session(region_name=REGION)
        create_table(lab_session)
        clock = MovableClock()
        current: dict[str, FaultLab | None] = {"lab": None}
        # A request read after its schedule ended (the lab is gone) is answered 200, uncounted.
        api.script = lambda index, body: (
            current["lab"].on_request(index) if current["lab"] is not None else 200
        )
        with clock.installed(), installed_hooks(lambda: current["lab"], step_session):
            FaultSchedule.world = (api, step_session, lab_session, clock, current, settings_)
            yield FaultSchedule.world
    model_call.MIN_MODEL_TIMEOUT_SECONDS = floor
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


class FaultSchedule(RuleBasedStateMachine):
    """One schedule: see the module docstring. ``world`` is set by the test function."""

    world: tuple = ()

    @initialize()
    def start(self) -> None:
        api, step_session, lab_session, clock, current, lab_settings = self.world
        self.lab = FaultLab(
            api, step_session, lab_session, f"lab{next(_names)}", clock, lab_settings
        )
        self.generations: dict[int, int] = {}
        current["lab"] = self.lab
        self.lab.publish(ROWS[0])

    @rule(row=st.sampled_from(ROWS))
    def publish(self, row: int) -> None:
        self.lab.publish(row)

    @rule(fault=faults)
    def poll_buffer(self, fault: Fault) -> None:
        self.lab.poll("buffer", fault)

    def has_time(self) -> bool:
        """Rules that move the clock stop at half a record's lifetime, so the drain that
        follows ends inside it (dedup holds for ``expires_after``)."""
        return self.lab.clock.now() - self.lab.started_at < self.lab.settings.expires_after / 2

    @precondition(lambda self: self.has_time())
    @rule(fault=faults, wait=st.sampled_from(["retry-after", "spacing", "long", "visibility"]))
    def poll_buffer_later(self, fault: Fault, wait: str) -> None:
        """Time passes (a retry-after, a retry's spacing, a visibility timeout), then the
        poller takes one."""
        seconds = {"retry-after": 21, "spacing": 61, "long": 121}.get(
            wait, self.lab.settings.visibility_timeout + 1
        )
        self.lab.clock.advance(seconds)
        self.lab.poll("buffer", fault)

    @rule(fault=faults)
    def poll_redrive(self, fault: Fault) -> None:
        self.lab.poll("redrive", fault)

    @precondition(lambda self: self.has_time())
    @rule(seconds=st.sampled_from([1, 25, 61, 130, 541, 900, 4_000, 3 * 3_600]))
    def time_passes(self, seconds: int) -> None:
        self.lab.clock.advance(seconds)

    @precondition(lambda self: self.has_time())
    @rule(polls=st.integers(min_value=4, max_value=12))
    def throttle_storm(self, polls: int) -> None:
        """Lambda throttles the function for a while: every receive of the buffer queue in
        that time fails before the function runs (each visibility timeout, once more)."""
        for _ in range(polls):
            self.lab.poll("buffer", Fault(throttle=True))
            self.lab.clock.advance(self.lab.settings.visibility_timeout + 1)

    @rule(keep_attributes=st.booleans(), keep_receive_count=st.booleans())
    def operator_redrives_the_dlq(self, keep_attributes: bool, keep_receive_count: bool) -> None:
        self.lab.redrive_dead_letters(
            keep_attributes=keep_attributes, keep_receive_count=keep_receive_count
        )

    @precondition(lambda self: bool(self.lab.observed.published))
    @rule(row=st.sampled_from(ROWS))
    def operator_retries_a_row(self, row: int) -> None:
        """The viewer's Retry: the row again, with the next replay generation."""
        if ("u-1", row) not in self.lab.observed.published:
            return
        self.generations[row] = self.generations.get(row, 0) + 1
        self.lab.publish(row, generation=self.generations[row])

    def teardown(self) -> None:
        lab: FaultLab | None = getattr(self, "lab", None)
        if lab is None:
            return
        try:
            lab.drain()
            check_invariants(lab)
            _tally(lab)
        finally:
            self.world[4]["lab"] = None


def check_invariants(lab: FaultLab) -> None:
    observed = lab.observed
    span = lab.clock.now() - lab.started_at
    # Dedup holds for a record's lifetime (expires_after); a schedule stays inside it.
    assert span < lab.settings.expires_after, f"the schedule ran {span:.0f} s of virtual time"
    limit = lab.settings.max_attempts
    # 1. Budgets: per record key, and nothing once a result is stored.
    for scope, billed in observed.requests.items():
        budget = 1 if scope.redrive_of else limit
        assert billed <= budget, f"{scope}: {billed} billed requests, budget {budget}"
    assert not observed.requests_after_stored, (
        f"requests after a stored result: {observed.requests_after_stored}; {observed.notes}"
    )
    # 2. Exactly one terminal result per record key that reached the runtime. A key whose row
    # ended uncoded on the DLQ (the function could not run on any receive it had left) may
    # lack the report and the count: only the DLQ alarms see that row, and they do.
    dlq_now = lab.dead_letters()
    dlq_ever = dlq_now + observed.redriven_dlq_messages
    unanswerable = {_scope_of_view(m) for m in dlq_ever if _uncoded(m) and _no_run_left(lab, m)}
    for scope in observed.outcomes:
        stored = lab.stored(scope)
        assert stored is not None, f"{scope}: no stored result after the queues drained"
        terminal = [
            o["result"]
            for o in observed.outcomes[scope]
            if o["status"] in ("completed", "dead_lettered")
        ]
        assert terminal or scope in unanswerable, f"{scope}: no terminal outcome was reported"
        assert all(_same(result, stored) for result in terminal), f"{scope}: results differ"
        if stored["status"] == "dead_lettered":
            code, dead_letter_id = stored["error_code"], stored["dead_letter_id"]
            assert code, f"{scope}: a dead letter without a code"
            carrying = [
                m
                for m in dlq_ever
                if m["attributes"].get("DEAD_LETTER_ID") == dead_letter_id
                or ((m["body"] or {}).get("dead_letter") or {}).get("id") == dead_letter_id
            ]
            assert carrying or scope in unanswerable, (
                f"{scope}: dead-lettered as {code} but no DLQ message carries it"
            )
            assert all(m["attributes"].get("ERROR_CODE", code) == code for m in carrying)
            once = {1}
            if scope in observed.count_window_kills or scope in unanswerable:
                once = {0, 1}
            assert observed.counted[scope] in once, (
                f"{scope}: counted {observed.counted[scope]} times as a non-retryable failure"
            )
        else:
            assert observed.counted[scope] == 0, f"{scope}: an answer counted as a failure"
    # 3. Nothing left behind; no uncoded dead letter unless the function never ran on it.
    assert lab.queue_depth(lab.buffer_url) == 0
    assert lab.queue_depth(lab.redrive_url) == 0
    for message in dlq_ever:
        if "ERROR_CODE" in message["attributes"] or (message["body"] or {}).get("dead_letter"):
            continue
        failed = observed.failed_redrive_receives[message["message_id"]]
        # moto keeps the receive count a message brought from the buffer queue (SQS may too),
        # so the redrive queue gives it at least the difference of the two counts.
        least = lab.settings.redrive_max_receive_count - lab.settings.buffer_max_receive_count
        assert failed >= least, f"an uncoded dead letter after {failed} failed receives: {message}"
    # Every row published ended somewhere: a stored result for one of its record keys.
    for business_key in observed.published:
        scopes = [s for s in observed.outcomes if s.business_key == business_key]
        assert scopes or any(
            (m["body"] or {}).get("detail", {}).get("row_number") == business_key[1]
            for m in dlq_ever
        ), f"{business_key}: published, never delivered and not on the DLQ"


def _uncoded(message: dict) -> bool:
    return "ERROR_CODE" not in message["attributes"] and not (message["body"] or {}).get(
        "dead_letter"
    )


def _no_run_left(lab: FaultLab, message: dict) -> bool:
    """Every receive the redrive queue gave this message failed before the function could
    answer it. moto keeps the receive count a message brings from the buffer queue (SQS may
    too), so the redrive queue gives it at least the difference of the two counts."""
    least = lab.settings.redrive_max_receive_count - lab.settings.buffer_max_receive_count
    return lab.observed.failed_redrive_receives[message["message_id"]] >= least


def _scope_of_view(message: dict) -> Scope:
    return _scope_of(json.dumps(message["body"] or {}))


def _tally(lab: FaultLab) -> None:
    observed = lab.observed
    STATS["schedules"] = STATS.get("schedules", 0) + 1
    STATS["billed"] = STATS.get("billed", 0) + sum(observed.requests.values())
    STATS["unbilled"] = STATS.get("unbilled", 0) + sum(observed.unbilled.values())
    STATS["dlq_redriven"] = STATS.get("dlq_redriven", 0) + len(observed.redriven_dlq_messages)
    for scope in observed.outcomes:
        stored = lab.stored(scope) or {}
        name = stored.get("error_code") or stored.get("status", "none")
        STATS[name] = STATS.get(name, 0) + 1


def _same(result: dict, stored: dict) -> bool:
    keys = set(result) | set(stored)
    keys -= {"dead_letter_message_id"}  # a re-send after a kill has a new message id
    return all(result.get(k) == stored.get(k) for k in keys)


def run_schedules(name: str) -> dict[str, int]:
    """Run the state machine under the selected profile; return the tally of outcomes.
    ``name`` names a subclass of the machine: a derandomized profile draws its examples from
    the machine's name, so two names give two different sets of schedules."""
    STATS.clear()
    machine = type(name, (FaultSchedule,), {"__module__": __name__})
    test = machine.TestCase
    test.settings = settings(settings.get_profile(PROFILE), database=None)
    test("runTest").runTest()
    return dict(sorted(STATS.items()))
