"""Another 100 schedules: a different test name derandomizes to different examples,
and pytest-xdist runs this module beside the first."""

from __future__ import annotations

import pytest

from .lab_settings import QueueSettings
from .schedules import fault_world, run_schedules
from .stats import report


@pytest.fixture(scope="module")
def world(cdk_out_template):
    with fault_world(QueueSettings.from_template(cdk_out_template)) as world:
        yield world


def test_more_fault_schedules_keep_the_per_key_invariants(world) -> None:
    lines = run_schedules("MoreSchedules")
    print(report(lines))
    assert len(lines) >= 100
