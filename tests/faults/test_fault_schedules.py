"""The first 100 schedules of the fast profile (see tests/faults/schedules.py)."""

from __future__ import annotations

import pytest

from .harness import QueueSettings
from .schedules import fault_world, run_schedules


@pytest.fixture(scope="module")
def world(cdk_out_template):
    with fault_world(QueueSettings.from_template(cdk_out_template).for_the_lab()) as world:
        yield world


def test_fault_schedules_keep_the_per_key_invariants(world) -> None:
    tally = run_schedules("FirstSchedules")
    print("fault schedules:", tally)
    assert tally["schedules"] >= 100
