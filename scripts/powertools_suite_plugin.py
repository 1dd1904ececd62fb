"""A pytest plugin: Powertools' idempotency tests run against our persistence layer.

Loaded with ``-p scripts.powertools_suite_plugin`` by
:mod:`scripts.powertools_idempotency_suite`, before any test module is imported. It puts
:class:`model_step.persistence.ReleasingDynamoDBPersistenceLayer` where Powertools exports
``DynamoDBPersistenceLayer`` (the package and its ``persistence.dynamodb`` module), so the
tests' own ``from aws_lambda_powertools.utilities.idempotency import
DynamoDBPersistenceLayer`` builds ours, with their files unchanged.
``POWERTOOLS_SUITE_STOCK=1`` leaves Powertools' class in place (the baseline run).

Proof that the substitution took: every fixture value that is a DynamoDB persistence layer
is counted by its class, the counts are printed after the run, and a run meant to test ours
fails if any fixture built another class.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Generator
from typing import Any

import pytest
from aws_lambda_powertools.utilities import idempotency
from aws_lambda_powertools.utilities.idempotency.persistence import dynamodb

#: Powertools' own class, kept before the substitution.
STOCK_LAYER = dynamodb.DynamoDBPersistenceLayer
#: Set to "1": run the suite against Powertools' own class.
STOCK_ENVIRONMENT = "POWERTOOLS_SUITE_STOCK"


def _layer_under_test() -> type[Any]:
    if os.environ.get(STOCK_ENVIRONMENT) == "1":
        return STOCK_LAYER
    from model_step.persistence import ReleasingDynamoDBPersistenceLayer

    return ReleasingDynamoDBPersistenceLayer


LAYER = _layer_under_test()
idempotency.DynamoDBPersistenceLayer = LAYER  # type: ignore[misc]
dynamodb.DynamoDBPersistenceLayer = LAYER  # type: ignore[misc]

#: Persistence layers the tests' fixtures built, by class name.
BUILT: Counter[str] = Counter()


def _name(cls: type[Any]) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def pytest_report_header() -> list[str]:
    return [f"DynamoDB persistence layer under test: {_name(LAYER)}"]


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: Any) -> Generator[None, Any, Any]:
    value = yield
    if isinstance(value, STOCK_LAYER):
        BUILT[_name(type(value))] += 1
    return value


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.section("persistence layers built by fixtures")
    for name, count in sorted(BUILT.items()):
        terminalreporter.line(f"{count:5d}  {name}")


def pytest_sessionfinish(session: pytest.Session) -> None:
    if set(BUILT) - {_name(LAYER)}:
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
