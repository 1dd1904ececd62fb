"""The day schedules (:class:`~.schedules.DaySchedule`, 100 more): the first row doomed in two
schedules of three, mappings paused for one to three days. They found the last bugs the 200
of the other two modules did not (a key's dead letter shared by its lives); now that they run
clean they are part of ``make test``, and ``make fault-days`` prints their statistics alone."""

from __future__ import annotations

import pytest

from .lab_settings import QueueSettings
from .schedules import DaySchedule, fault_world, run_schedules
from .stats import report


@pytest.fixture(scope="module")
def world(cdk_out_template):
    with fault_world(QueueSettings.from_template(cdk_out_template)) as world:
        yield world


def test_day_schedules_keep_the_per_key_invariants(world) -> None:
    lines = run_schedules("DaySchedules", DaySchedule)
    print(report(lines))
    assert len(lines) >= 100
