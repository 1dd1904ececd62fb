"""moto started once per test module, for the fixtures of tests/runtime and tests/prospect.

A conftest imports :func:`moto_patching` by name; ``tests/needs.py`` follows that import
here, so the tests that ask for it are marked ``moto`` before their module is imported.

The top-level ``from moto import mock_aws`` is load-bearing: through it, every test module
that imports the runtime's or the Prospect's conftest needs ``moto`` (tests/needs.py reads
imports). Made lazy, about 88 tests that import moto through those conftests would enter the
unit tier (``-m "not moto"`` over tests/runtime and tests/prospect: 296 instead of 208)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from moto import mock_aws


@pytest.fixture(scope="module")
def moto_patching() -> Iterator[None]:
    """moto, started once for the module: each test empties the account
    (``tests.fixture_clients.fresh_moto_account``), with ``tests.moto_speedups`` installed.

    ``tests/conftest.py`` installs the speedups once collection is done, on the moto modules
    imported by then. In ``make test`` every worker collects ``tests/faults``, which imports
    moto's DynamoDB; a run of these folders alone imports it only on its first request, so
    it was served without them (the same file took about a third more CPU than in
    ``make test``). Every module using this fixture talks to DynamoDB: its models are
    imported here, and the speedups installed on them (idempotent)."""
    import moto.dynamodb.models  # noqa: F401  (its parsers, for install() to find)

    from tests.moto_speedups import install

    install()
    with mock_aws():
        yield
