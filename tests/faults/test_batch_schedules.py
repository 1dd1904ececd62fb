"""Issue 33, item 7: long-horizon fault schedules over the batch path (see
tests/faults/batch_schedules.py): 100 in ``make test``, 2,000 in ``make soak``."""

from __future__ import annotations

import time

import pytest

from .batch_lab import BatchSettings
from .batch_schedules import PROFILE, batch_world, run_batch_schedules


@pytest.fixture(scope="module")
def world(cdk_out_template):
    with batch_world(BatchSettings.from_template(cdk_out_template)):
        yield


def test_batch_schedules_keep_the_per_key_invariants(world) -> None:
    started = time.monotonic()
    tally = run_batch_schedules("BatchSchedules")
    print(f"batch schedules ({PROFILE}, {time.monotonic() - started:.0f} s):", tally)
    assert tally["schedules"] >= (2_000 if PROFILE == "batch-soak" else 100)
