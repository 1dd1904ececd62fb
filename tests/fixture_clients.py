"""The fixtures' and test helpers' own boto3 clients: one per service for the test run; and
moto started once a module, with an empty account for each test.

Building a client or a resource costs 5-10 ms of CPU (most of it copying the session's
event hooks), and the runtime and Prospect fixtures built several per test. moto's
interception is global once moto is imported, so a client made inside one test's
``mock_aws`` talks to the next test's fresh moto as a new one would. They come from a
session of their own, on which no fixture or test registers a hook: like the per-test
clients they replace, they never see a test's hooks (a call recorder, a ``killer``, a hook
on EventBridge's ``PutEvents``), which reach only what the test and the handlers make from
the test's own session.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3

REGION = "us-east-1"


@functools.cache
def _session() -> boto3.session.Session:
    return boto3.session.Session(region_name=REGION)


@functools.cache
def fixture_client(service_name: str) -> Any:
    """The fixtures' client of ``service_name``, one for the run."""
    return _session().client(service_name)


@functools.cache
def fixture_table(name: str) -> Any:
    """The fixtures' DynamoDB ``Table`` resource of ``name``, one for the run."""
    return _session().resource("dynamodb").Table(name)


@contextmanager
def fresh_moto_account() -> Iterator[None]:
    """An empty moto account for one test, emptied again when it ends, as starting and
    stopping ``mock_aws`` would (every backend reset, boto3's default session dropped),
    under a ``mock_aws`` started once for the module.

    Starting ``mock_aws`` registers a ``responses`` callback for every URL pattern of every
    service moto emulates (about 5 ms of CPU, a few thousand objects), and each test of the
    runtime and Prospect fixtures paid it again. Nested ``mock_aws`` blocks inside a test
    work as before (moto counts them; the outermost one resets)."""
    from moto.core.base_backend import BackendDict
    from moto.core.model_instances import reset_model_data

    def empty() -> None:
        BackendDict.reset()
        reset_model_data()
        boto3.DEFAULT_SESSION = None

    empty()
    try:
        yield
    finally:
        empty()
