"""Issue 37: a handful of the long-horizon batch fault schedules over the Bedrock batch
adapter (see tests/faults/bedrock_batch_schedules.py). A module of its own: its moto world
must not overlap the Message Batches schedules' module-scoped one."""

from __future__ import annotations

import time

from .batch_lab import BatchSettings
from .bedrock_batch_schedules import SCHEDULES, bedrock_batch_world, run_bedrock_batch_schedules


def test_bedrock_batch_schedules_keep_the_per_key_invariants(cdk_out_template) -> None:
    started = time.monotonic()
    with bedrock_batch_world(BatchSettings.from_template(cdk_out_template)):
        tally = run_bedrock_batch_schedules("BedrockBatchSchedules")
    print(f"bedrock batch schedules ({time.monotonic() - started:.0f} s):", tally)
    assert tally["schedules"] >= SCHEDULES
