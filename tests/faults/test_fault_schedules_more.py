"""Another 100 schedules: a different test name derandomizes to different examples,
and pytest-xdist runs this module beside the first."""

from __future__ import annotations

import pytest

from .schedules import fault_world, run_schedules


@pytest.fixture(scope="module")
def world():
    with fault_world() as world:
        yield world


def test_more_fault_schedules_keep_the_per_key_invariants(world) -> None:
    tally = run_schedules()
    print("fault schedules:", tally)
    assert tally["schedules"] >= 100
