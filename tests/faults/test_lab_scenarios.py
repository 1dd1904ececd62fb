"""Hand-picked schedules: issue 31's findings, each run through the lab and its invariants.

The generated schedules (``test_fault_schedules*.py``) reach these and more; these name the
expected results one by one, so a failure says which finding came back. Each builds a lab
the way the schedules do (settings from the template, a variant of them), runs a short
schedule, drains, and asserts what the issue expects plus every invariant of
:mod:`.invariants`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from . import invariants, model_api
from .harness import Fault, LabWorld
from .lab import FaultLab
from .lab_settings import QueueSettings
from .observed import Life, scope_of
from .rows import BIG, HUGE_NUMBER, PAST_FLOAT, PLAIN, Row
from .schedules import fault_world

_labs = iter(range(1, 10_000))


@pytest.fixture(scope="module")
def world(cdk_out_template) -> Iterator[LabWorld]:
    with fault_world(QueueSettings.from_template(cdk_out_template)) as world:
        yield world


def make_lab(world: LabWorld, *, short: bool = False, **options) -> FaultLab:
    """A lab whose model deadline is 5 s: these scenarios send no slow answer and assert
    exact counts, which a plain answer cut by the schedules' 0.3 s deadline on a loaded
    machine (retried, billed again) would break."""
    template = world.settings
    options.setdefault("model_timeout_seconds", 5.0)
    lab = FaultLab(world, f"scenario{next(_labs)}",
                   template.short_lived() if short else template.for_the_lab(),
                   **options)  # fmt: skip
    world.lab = lab
    return lab


def finish(lab: FaultLab) -> list[str]:
    """Drain and check: every violation, as text (the lab is detached either way)."""
    try:
        lab.drain()
    except Exception as cycle:  # Unbounded: a violation like any other
        lab.unbounded = str(cycle)
    try:
        return [str(violation) for violation in invariants.check(lab)]
    finally:
        lab.world.lab = None


def life_of(lab: FaultLab, row: Row, spelling: int = 0) -> Life:
    return lab.life_of(scope_of(row.body(spelling)))


def throttled_until_redriven(lab: FaultLab) -> None:
    """Every receive of the buffer queue is throttled until SQS moves the row to the redrive
    queue (each visibility timeout, once more)."""
    for _ in range(lab.settings.buffer_max_receive_count + 1):
        lab.poll("buffer", Fault(throttle=True))
        lab.clock.advance(lab.settings.visibility_timeout + 1)


# -- a control: the lab finds nothing where nothing is wrong -------------------------------------
def test_a_row_that_fails_twice_then_answers_keeps_every_invariant(world) -> None:
    lab = make_lab(world, bus_kind="classic")
    lab.publish(PLAIN)
    lab.publish(PLAIN, 1)  # a copy, spelled 1.0
    assert lab.poll("buffer", Fault(api="500"))
    lab.clock.advance(61)
    assert lab.poll("buffer", Fault(api="disconnect"))
    assert finish(lab) == []
    record = lab.lives[life_of(lab, PLAIN)]
    assert record.billed == 3 and record.events == [("Model Step Completed", record.events[0][1])]


# -- F1: a key's memory outlives its deliveries ---------------------------------------------------
def test_two_500s_then_throttles_past_the_hour_bill_no_more_than_the_budget(world) -> None:
    """max_event_age of an hour, the lifetime built as the template builds its own."""
    lab = make_lab(world, short=True)
    lab.persistent.api[PLAIN.value] = "500"
    lab.publish(PLAIN)
    assert lab.poll("buffer", Fault())
    lab.clock.advance(61)
    assert lab.poll("buffer", Fault())
    throttled_until_redriven(lab)
    violations = finish(lab)
    assert lab.lives[life_of(lab, PLAIN)].billed <= lab.settings.max_attempts
    assert violations == []


def test_mappings_paused_a_day_and_an_hour_bill_no_more_than_the_budget(world) -> None:
    lab = make_lab(world)
    lab.persistent.api[PLAIN.value] = "500"
    lab.publish(PLAIN)
    assert lab.poll("buffer", Fault())
    lab.clock.advance(121)
    assert lab.poll("buffer", Fault())
    lab.clock.advance(25 * 3600)  # an operator disabled the buffer queue's mapping
    violations = finish(lab)
    assert lab.lives[life_of(lab, PLAIN)].billed <= lab.settings.max_attempts
    assert violations == []


def test_a_row_put_back_past_max_event_age_after_first_seen_is_receives_exhausted(world) -> None:
    lab = make_lab(world, short=True)
    lab.publish(PLAIN)
    assert lab.poll("buffer", Fault(api="500"))  # first seen now
    throttled_until_redriven(lab)  # 9 receives later: past the hour
    violations = finish(lab)
    [result] = {o["result"].get("error_code", "answered") for o in _terminal(lab, PLAIN)}
    assert result == "ReceivesExhausted"
    assert violations == []


def _new_life(lab: FaultLab, row: Row) -> None:
    """Everything settles, the key's memory lifetime passes, and the producer sends the row
    again (the schedules' ``republished_after_its_memory``)."""
    lab.drain()
    lab.clock.advance(lab.settings.expires_after + 60)
    lab.publish(row)


def test_each_life_s_dead_letter_is_redriven_with_a_budget_of_its_own(world) -> None:
    """A key dead-lettered in two lives: each life's dead letter has its own id, so each
    operator's redrive is one request of its own, and a redrive that fails again names the
    dead letter it came from (found by the day schedules: the second life's dead letter
    shared the first's id, and its redrive, the first redrive's key, was billed again once
    that redrive's memory expired)."""
    lab = make_lab(world, short=True)
    lab.persistent.api[PLAIN.value] = "500"
    lab.publish(PLAIN)
    _new_life(lab, PLAIN)
    lab.drain()
    first, second = lab.dead_letters()  # in the order they were sent
    assert _own_id(first) != _own_id(second)
    assert lab.redrive_dead_letters(keep_attributes=True, keep_receive_count=False) == 2
    lab.drain()  # each redrive is billed once, fails again, and is dead-lettered again
    again = lab.dead_letters()
    assert {m["body"]["dead_letter"].get("redriven_from") for m in again} == {
        _own_id(first),
        _own_id(second),
    }
    _new_life(lab, PLAIN)  # the redrives' memory expires too
    lab.redrive_dead_letters(keep_attributes=False, keep_receive_count=False)
    violations = finish(lab)
    assert violations == []


def test_a_copy_resumed_near_the_end_of_its_retention_with_the_dlq_refusing(world) -> None:
    """A row held until less than the queues' way to the DLQ is left of its retention, then
    the DLQ refuses every send: SQS drops the copy at the end of its retention, in AWS as
    here. The schedules keep that much retention (``QueueSettings.dead_letter_path`` plus an
    hour) whenever they move the clock; this is the line they no longer cross."""
    lab = make_lab(world, short=True)
    settings = lab.settings
    assert settings.dead_letter_path + 3600 < settings.buffer_retention
    lab.publish(PLAIN)
    lab.clock.advance(settings.buffer_retention - settings.dead_letter_path - 3600)
    lab.persistent.dlq_refuses = lab.persistent.dlq_persistent = True
    lab.persistent.killed_after_answer.add(PLAIN.value)
    violations = finish(lab)
    record = lab.lives[life_of(lab, PLAIN)]
    assert record.retention_drops == 0
    assert [v for v in violations if "never-lost" in v] == []


def _own_id(message: dict) -> str:
    return str(message["body"]["dead_letter"]["id"])


# -- F2, F3: result events once, and bounded ------------------------------------------------------
@pytest.mark.parametrize("bus", ["classic", "v2"])
def test_a_kill_between_put_events_and_its_record_publishes_once(world, bus: str) -> None:
    lab = make_lab(world, bus_kind=bus)
    lab.publish(PLAIN)
    assert lab.poll("buffer", Fault(kill_on=("after", "PutEvents", 1)))
    lab.clock.advance(600)  # past v2's 300 s deduplication window
    violations = finish(lab)
    assert len(lab.lives[life_of(lab, PLAIN)].events) <= 1
    assert violations == []


def test_a_bus_that_refuses_every_publish_ends_bounded(world) -> None:
    lab = make_lab(world, bus_kind="classic")
    assert lab.bus is not None
    lab.bus.refuse("AccessDeniedException", persistent=True)
    lab.publish(PLAIN)
    assert finish(lab) == []


def test_a_dlq_that_refuses_every_send_ends_bounded(world) -> None:
    lab = make_lab(world)
    lab.persistent.dlq_refuses = lab.persistent.dlq_persistent = True
    lab.persistent.api[PLAIN.value] = "400"
    lab.publish(PLAIN)
    assert finish(lab) == []


# -- F4: a dead letter fits its queue ----------------------------------------------------------
def test_a_150_kb_non_ascii_row_dead_letters_within_256_kib(world) -> None:
    lab = make_lab(world)
    lab.persistent.api[BIG.value] = "400"
    lab.publish(BIG)
    violations = finish(lab)
    [message] = lab.dead_letters()
    assert message["bytes"] <= lab.settings.dlq_max_message_bytes
    assert violations == []


# -- F5, F6: counts where they happen ----------------------------------------------------------
def test_three_killed_answers_are_counted(world) -> None:
    lab = make_lab(world)
    lab.persistent.killed_after_answer.add(PLAIN.value)
    lab.publish(PLAIN)
    violations = finish(lab)
    record = lab.lives[life_of(lab, PLAIN)]
    assert record.interrupted == 3
    assert record.metrics["AttemptsInterrupted"] >= 3
    assert violations == []


def test_the_last_killed_answer_is_counted_when_its_settle_loses_its_answer(world) -> None:
    """Found by the generated schedules: with the budget spent, the delivery that settles the
    last interrupted attempt (UpdateItem 2, after the refused claim) lost the write's answer;
    the next one found nothing pending, and the third billed request was counted nowhere."""
    lab = make_lab(world, bus_kind="classic")
    lab.persistent.fail_points[PLAIN.value] = [("after", "UpdateItem", 2)]
    lab.persistent.killed_after_answer.add(PLAIN.value)
    lab.publish(PLAIN)
    violations = finish(lab)
    record = lab.lives[life_of(lab, PLAIN)]
    assert record.interrupted == 3 and record.metrics["AttemptsInterrupted"] == 3
    assert violations == []


def test_a_claim_whose_answer_was_lost_is_an_attempt_no_one_can_tell_was_unsent(world) -> None:
    """The claim (UpdateItem 1) applied, its answer lost: the attempt stays spent and, like a
    kill before the request, may be counted as billed; the key still bills at most once."""
    lab = make_lab(world)
    lab.persistent.fail_points[PLAIN.value] = [("after", "UpdateItem", 1)]
    lab.publish(PLAIN)
    violations = finish(lab)
    record = lab.lives[life_of(lab, PLAIN)]
    assert record.billed == 1 and record.unsent_claims == 1
    assert violations == []


def test_an_answer_whose_save_failed_keeps_its_tokens_in_the_key_s_totals(world) -> None:
    """Found by the generated schedules: the save of a billed answer (UpdateItem 2) fails,
    the key is retried and billed again, and on_outcome reported the second answer's tokens
    only. The runtime now writes the unsaved answer's spend to the key's budget."""
    lab = make_lab(world)
    lab.persistent.fail_points[PLAIN.value] = [("before", "UpdateItem", 2)]
    lab.publish(PLAIN)
    violations = finish(lab)
    record = lab.lives[life_of(lab, PLAIN)]
    [terminal] = record.terminal
    assert record.billed == 2 and terminal["key_model_requests"] == 2
    assert terminal["key_usage"]["input_tokens"] == 2 * model_api.INPUT_TOKENS
    assert record.metrics["AttemptsInterrupted"] == 0  # answered, not interrupted
    assert violations == []


def test_a_dead_letter_whose_result_event_is_undeliverable_is_counted_for_each(world) -> None:
    """A model failure dead-lettered, then its result event refused to the end: two coded
    dead letters, each counted once."""
    lab = make_lab(world, bus_kind="classic")
    assert lab.bus is not None
    lab.persistent.api[PLAIN.value] = "500"
    lab.bus.refuse("AccessDeniedException", persistent=True)
    lab.publish(PLAIN)
    violations = finish(lab)
    codes = sorted(m["attributes"].get("ERROR_CODE") for m in lab.dead_letters())
    assert len(codes) == 2 and codes[1] == "ResultEventUndeliverable"  # and the 500's code
    assert lab.lives[life_of(lab, PLAIN)].metrics["NonRetryableFailures"] == 2
    assert violations == []


def test_a_request_whose_delivery_died_after_its_save_is_in_on_outcome_totals(world) -> None:
    lab = make_lab(world)
    lab.publish(PLAIN)
    # UpdateItem 1 claims the attempt, 2 saves the answer: killed before on_outcome.
    assert lab.poll("buffer", Fault(kill_on=("after", "UpdateItem", 2)))
    violations = finish(lab)
    recorded = lab.lives[life_of(lab, PLAIN)].recorded
    # The delivery that billed it never reported; the key's totals (on its replay) count it.
    assert max(outcome.get("key_model_requests") or 0 for outcome in recorded) == 1
    assert violations == []


def test_two_hook_failures_on_the_redrive_queue_are_not_receives_exhausted(world) -> None:
    lab = make_lab(world)
    lab.publish(PLAIN)
    throttled_until_redriven(lab)
    assert lab.poll("redrive", Fault(hook_fails=True))
    lab.clock.advance(lab.settings.redrive_visibility_timeout + 1)
    assert lab.poll("redrive", Fault(hook_fails=True))
    violations = finish(lab)
    assert {o["status"] for o in _terminal(lab, PLAIN)} == {"completed"}
    assert violations == []


# -- F7: keys by value --------------------------------------------------------------------------
@pytest.mark.parametrize("row", [PLAIN, HUGE_NUMBER, PAST_FLOAT], ids=lambda row: row.name)
def test_every_spelling_of_a_number_is_one_key(world, row: Row) -> None:
    lab = make_lab(world)
    for spelling in range(len(row.spellings)):
        lab.publish(row, spelling)
        assert lab.poll("buffer", Fault())
    violations = finish(lab)
    assert lab.lives[life_of(lab, row)].billed == 1
    assert violations == []


def _terminal(lab: FaultLab, row: Row) -> list[dict]:
    record = lab.lives[life_of(lab, row)]
    return [o for _, o, _ in record.outcomes if o["status"] in ("completed", "dead_lettered")]
