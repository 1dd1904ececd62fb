"""Another 100 schedules: a different test name derandomizes to different examples,
and pytest-xdist runs this module beside the first."""

from __future__ import annotations

import pytest

from .harness import QueueSettings
from .schedules import fault_world, run_schedules


@pytest.fixture(scope="module")
def world(cdk_out_template):
    with fault_world(QueueSettings.from_template(cdk_out_template).for_the_lab()) as world:
        yield world


def test_more_fault_schedules_keep_the_per_key_invariants(world) -> None:
    tally = run_schedules("MoreSchedules")
    print("fault schedules:", tally)
    assert tally["schedules"] >= 100
