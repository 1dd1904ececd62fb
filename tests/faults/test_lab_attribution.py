"""The lab counts a model request against the send that made it, however late it is read.

On a loaded machine the fake API's server thread could read a request after the client gave
up on it (the schedules' deadline was 0.3 s of real time; it now runs on the lab's clock)
and the lab moved on. Counting it against
whatever poll is current then blamed a later delivery of the same key for a request "after a
stored result" (a flaky failure of the fault schedules), or lost the count. Here the client
gives up after 1 s and the server reads each request 3 s late on purpose: 2 s of slack, so a
loaded machine cannot let the client see the answer (the schedules' 0.3 s against a 0.5 s
read left 0.2 s).
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

#: The lab's model deadline here, and the server's delay before it reads a request: the
#: client has given up long before the read.
MODEL_TIMEOUT_SECONDS = 1.0
LATE_READ_SECONDS = 3.0


@pytest.fixture(scope="module")
def world(cdk_out_template):
    # The client must give up in real time here: the deadline runs on real time.
    settings = QueueSettings.from_template(cdk_out_template)
    with fault_world(settings, deadlines_on_the_clock=False) as world:
        yield world


@pytest.fixture
def lab(world):
    lab = FaultLab(
        world,
        "attribution",
        world.settings.for_the_lab(),
        model_timeout_seconds=MODEL_TIMEOUT_SECONDS,
    )
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
