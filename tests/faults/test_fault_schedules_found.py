"""Schedules kept because they once found a bug: regressions, run like the generated ones.

The generated schedules (``test_fault_schedules*.py``) are derandomized: a change to the rules
or their strategies draws a new set, and a bug the old set found may no longer be met. Each
schedule here is the shortest form of one that found a bug (a generated run's falsifying
steps, or the steps that make a mutant of ``mutants.py`` visible), replayed through the same
state machine, drain and per-key invariants (``FaultSchedule.teardown``). The mutant runner
runs this module with the generated ones.
"""

from __future__ import annotations

from typing import Any

import pytest

from .lab_settings import QueueSettings
from .rows import Row
from .schedules import FaultSchedule, fault_world

SECOND = Row(name="second", value=2, spellings=("2",), big=False)
Steps = list[tuple[str, dict[str, Any]]]

#: By what each found: the steps after ``start`` (its arguments first).
FOUND: dict[str, tuple[dict[str, Any], Steps]] = {
    # A clean-clone CI run's falsifying example, verbatim: the row's only request was killed
    # after its answer, throttles made the buffer queue give up on it, and its redrive copy
    # ended it as ReceivesExhausted past max_event_age without a claim: the killed attempt
    # was counted nowhere (metric-model-requests). Mutant F5-ended-row-leaves-killed-...
    "ended-on-the-redrive-queue-with-a-killed-attempt": (
        {"bus": "classic", "doomed": "500"},
        [
            ("dlq_refuses", {"persistent": False}),
            ("dlq_refuses", {"persistent": True}),
            ("bus_refuses", {"persistent": True, "refusal": "InternalFailure"}),
            ("dlq_refuses", {"persistent": True}),
            ("killed_after_every_answer", {"row": 0}),
            ("throttle_storm", {"polls": 8}),
            ("row_killed_at", {"point": ("before", "PutEvents", 1), "row": 0}),
            ("rate_limited_after_failed_retries", {"row": 0}),
            ("dlq_refuses", {"persistent": False}),
            ("throttle_storm", {"polls": 6}),
            ("bus_refuses", {"persistent": False, "refusal": "InternalFailure"}),
            ("row_call_fails_at", {"point": ("before", "UpdateItem", 2), "row": 1}),
            ("row_killed_at", {"point": ("before", "UpdateItem", 3), "row": 1}),
            ("operator_redrives_the_dlq", {"keep_attributes": False, "keep_receive_count": False}),
            ("row_killed_at", {"point": ("after", "UpdateItem", 3), "row": 0}),
            ("row_recovers", {"row": 1}),
            ("row_call_fails_at", {"point": ("after", "UpdateItem", 1), "row": 0}),
            ("operator_retries_a_row", {"row": 0}),
            ("bus_refuses", {"persistent": False, "refusal": "AccessDeniedException"}),
        ],
    ),
    # The answer is billed and read, and the save of its result fails before it is written:
    # the retry bills again, and on_outcome must report both answers' tokens (outcome-totals).
    # Mutant F5-unsaved-answer-spend-dropped.
    "an-answer-whose-save-failed": (
        {},
        [("row_call_fails_at", {"row": 0, "point": ("before", "UpdateItem", 2)})],
    ),
    # Every answer of the row is killed until its budget is spent; the write that settles the
    # last interrupted attempt applies but its answer is lost, and the retried write must
    # recognise it as its own (metric-attempts-interrupted). Mutant F5-lost-settle-...
    "the-settle-of-a-spent-budget-loses-its-answer": (
        {"doomed": "killed"},
        [("row_call_fails_at", {"row": 0, "point": ("after", "UpdateItem", 2)})],
    ),
    # The buffer queue gives up on the row twice inside max_event_age: each redrive message
    # is one put-back (receives-exhausted). Mutant F6-redrive-put-back-counted-twice.
    # A dead-lettered row redriven by the operator is answered, and the bus refuses its result
    # event: that dead letter must name the one it was redriven from, or it reads as the
    # row's first life's (result-event-missing, counted-once). Mutant F2-redrive-lineage-...
    "a-redrive-whose-result-event-is-refused": (
        {"bus": "classic", "doomed": "500"},
        [
            ("drain", {}),
            ("row_recovers", {"row": 0}),
            ("bus_refuses", {"persistent": True, "refusal": "AccessDeniedException"}),
            ("operator_redrives_the_dlq", {"keep_attributes": True, "keep_receive_count": False}),
        ],
    ),
    "the-buffer-queue-gives-up-twice": ({}, [("buffer_gives_up_again", {"times": 2})]),
}


class FoundSchedules(FaultSchedule):
    """The machine the found schedules replay on (its name is the collected runs' machine)."""


@pytest.fixture(scope="module")
def world(cdk_out_template):
    with fault_world(QueueSettings.from_template(cdk_out_template)) as world:
        yield world


@pytest.mark.parametrize("name", sorted(FOUND))
def test_a_found_schedule_keeps_the_per_key_invariants(world, name: str) -> None:
    start, steps = FOUND[name]
    schedule = FoundSchedules()
    arguments = {"short": False, "provider": "anthropic", "bus": None, "second": SECOND}
    schedule.start(**{**arguments, "doomed": None, **start})
    for rule, kwargs in steps:
        if rule == "drain":  # everything settles first (as republished_after_its_memory does)
            schedule.lab.drain()
        else:
            getattr(schedule, rule)(**kwargs)
    schedule.teardown()  # drains, checks every invariant per key, raises on a violation
