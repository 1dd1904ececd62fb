"""The lab counts a model request against the send that made it, however late it is read.

On a loaded machine the fake API's server thread can read a request after the client gave
up on it (the lab's deadline is 0.3 s) and the lab moved on. Counting it against whatever
poll is current then blamed a later delivery of the same key for a request "after a stored
result" (a flaky failure of the fault schedules), or lost the count. Here the server reads
each request 0.5 s late on purpose.
"""

from __future__ import annotations

import time

import pytest

from .harness import Fault
from .lab import FaultLab, answer_request
from .lab_settings import QueueSettings
from .observed import scope_of
from .rows import PLAIN, SECOND
from .schedules import fault_world

#: Longer than the lab's 0.3 s model deadline: the client has given up before the read.
LATE_READ_SECONDS = 0.5


@pytest.fixture(scope="module")
def world(cdk_out_template):
    with fault_world(QueueSettings.from_template(cdk_out_template)) as world:
        yield world


@pytest.fixture
def lab(world):
    lab = FaultLab(world, "attribution", world.settings.for_the_lab())
    world.lab = lab

    def late_read(index: int, body: dict) -> object:
        time.sleep(LATE_READ_SECONDS)
        return answer_request(world, "anthropic", index, world.api)

    script, world.api.script = world.api.script, late_read
    try:
        yield lab
    finally:
        world.lab = None
        world.api.script = script


def test_a_request_read_after_its_poll_ended_counts_against_its_send(lab: FaultLab) -> None:
    first = lab.life_of(scope_of(PLAIN.body(0)))
    lab.publish(PLAIN)
    assert lab.poll("buffer", Fault(api="ok"))  # the client times out: a transient failure
    assert lab.stored(first.scope) is None
    # The next schedule step: another row's poll is current when the server reads.
    lab.publish(SECOND)
    lab.poll("buffer", Fault(api="ok"))
    lab.wait_for_reads()
    second = lab.life_of(scope_of(SECOND.body(0)))
    assert [send.billed for send in lab.lives[first].sends] == [True]
    assert [send.billed for send in lab.lives[second].sends] == [True]
    assert lab.world.api.request_count == 2
    assert not lab.lives[first].requests_after_stored
