"""Kills at chosen points of an invocation, for tests on a movable clock (issue 31).

:func:`movable_clock` installs ``tests.faults.harness.MovableClock`` (moto's SQS, Powertools
and the runtime read it); advancing it :data:`PAST_THE_DEADLINE` expires a killed
invocation's lock, as its Lambda deadline would.

A kill is :class:`LambdaKilled`, a ``BaseException`` (the one of ``test_combined_faults``):
no ``except Exception`` and no Powertools cleanup runs after it, as after a real kill. Each
helper is a context manager yielding a dict ``{"left": N}``: the Nth next matching call is
made (the model answers, DynamoDB or the bus applies it) and then the invocation dies.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import httpx2
import pytest

from tests.faults.harness import MovableClock

from .conftest import boto3_session
from .test_combined_faults import LambdaKilled

__all__ = [
    "PAST_THE_DEADLINE",
    "LambdaKilled",
    "after_model_answer",
    "after_put_events",
    "before_save",
    "movable_clock",
    "HeldFirstRequest",
    "stopped_clock",
]

#: Past a killed invocation's deadline (FakeLambdaContext gives 30 s): its lock has expired.
PAST_THE_DEADLINE = 31


@contextlib.contextmanager
def movable_clock() -> Iterator[MovableClock]:
    clock = MovableClock()
    with clock.installed():
        yield clock


@contextlib.contextmanager
def stopped_clock() -> Iterator[MovableClock]:
    """Install a stopped :class:`MovableClock` (moto's SQS, Powertools and the runtime read
    it): it moves only when advanced, so a wait the runtime computes from it is the same
    however long the machine takes between two readings."""
    clock = MovableClock(stopped=True)
    with clock.installed():
        yield clock


class HeldFirstRequest:
    """A fake API ``script``: the first request sets :attr:`reached` and is answered 200
    only once :attr:`release` is set; later requests are answered 200 at once. Its sender
    holds the key's lock for as long as the test wants, on any machine."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.release = threading.Event()

    def __call__(self, index: int, body: dict) -> int:
        if index == 0:
            self.reached.set()
            self.release.wait()
        return 200


def _countdown(state: dict, what: str) -> None:
    if state["left"] > 0:
        state["left"] -= 1
        if state["left"] == 0:
            raise LambdaKilled(f"killed {what}")


@contextlib.contextmanager
def after_model_answer(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    """Killed after the model answered a request, before the runtime read the answer."""
    state = {"left": 0}
    real = httpx2.HTTPTransport.handle_request

    def handle_request(transport, request):
        response = real(transport, request)
        _countdown(state, "after the model answered")
        return response

    monkeypatch.setattr(httpx2.HTTPTransport, "handle_request", handle_request)
    yield state


@contextlib.contextmanager
def before_save() -> Iterator[dict]:
    """Killed right before the key's record is saved (its answer read, its cost spent)."""
    state = {"left": 0}

    def save(params, **_kwargs):
        if ":response_data" in (params.get("ExpressionAttributeValues") or {}):
            _countdown(state, "before the record's save")

    hooks = boto3_session().events
    hooks.register("before-parameter-build.dynamodb.UpdateItem", save)
    try:
        yield state
    finally:
        hooks.unregister("before-parameter-build.dynamodb.UpdateItem", save)


@contextlib.contextmanager
def after_put_events() -> Iterator[dict]:
    """Killed after the bus (classic or v2) applied a PutEvents, before the runtime saw it."""
    state = {"left": 0}

    def after(**_kwargs):
        _countdown(state, "after PutEvents")

    hooks = boto3_session().events
    for service in ("events", "eventbridgev2"):
        hooks.register(f"after-call.{service}.PutEvents", after)
    try:
        yield state
    finally:
        for service in ("events", "eventbridgev2"):
            hooks.unregister(f"after-call.{service}.PutEvents", after)
