"""The fixtures' and test helpers' own boto3 clients: one per service for the test run.

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
