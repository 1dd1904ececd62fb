"""The lab counts a model request against the poll that sent it, however late it is read.

On a loaded machine the fake API's server thread can read a request after the client gave
up on it (the lab's deadline is 0.3 s) and the lab moved on. Counting it against whatever
poll is current then blamed a later delivery of the same key for a request "after a stored
result" (a flaky failure of the fault schedules), or lost the count. Here the server reads
each request 0.5 s late on purpose.
"""

from __future__ import annotations

import time

import pytest

from .harness import Fault, FaultLab, QueueSettings, Scope
from .schedules import fault_world

#: Longer than the lab's 0.3 s model deadline: the client has given up before the read.
LATE_READ_SECONDS = 0.5


@pytest.fixture(scope="module")
def world(cdk_out_template):
    with fault_world(QueueSettings.from_template(cdk_out_template).for_the_lab()) as world:
        yield world


@pytest.fixture
def lab(world):
    api, step_session, lab_session, clock, current, settings = world
    lab = FaultLab(api, step_session, lab_session, "attribution", clock, settings)
    current["lab"] = lab

    def late_read(index: int, body: dict) -> object:
        time.sleep(LATE_READ_SECONDS)
        return lab.on_request(index)

    api.script = late_read
    try:
        yield lab
    finally:
        current["lab"] = None


def test_a_request_read_after_its_poll_ended_counts_against_that_poll(lab: FaultLab) -> None:
    scope = Scope(business_key=("u-1", 1), generation=None, redrive_of=None)
    lab.publish(1)
    assert lab.poll("buffer", Fault(api="ok"))  # the client times out: a transient failure
    assert lab.stored(scope) is None
    # The next schedule step: another row's poll is current when the server reads.
    lab.publish(2)
    lab.poll("buffer", Fault(api="ok"))
    time.sleep(2 * LATE_READ_SECONDS)
    assert lab.observed.requests[scope] == 1
    assert lab.observed.requests[Scope(("u-1", 2), None, None)] == 1
    assert sum(lab.observed.requests.values()) == 2 == lab.api.request_count
    assert not lab.observed.requests_after_stored
