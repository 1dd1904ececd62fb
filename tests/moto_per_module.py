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
    (``tests.fixture_clients.fresh_moto_account``), with the local engine's moto caches
    installed (``constructs_lib.local_engine.moto_speedups``).

    ``tests/conftest.py`` installs them once collection is done if collection imported moto,
    as ``make test``'s always does; a run of these folders alone imports it only here, and
    without this its requests were served uncached (the same file took about a third more CPU
    than in ``make test``). ``install()`` imports the moto modules it patches and is
    idempotent."""
    from constructs_lib.local_engine.moto_speedups import install

    install()
    with mock_aws():
        yield
