"""scripts/powertools_idempotency_suite.py: a checkout's tests, unchanged, build OUR layer.

A stand-in checkout (a few lines in Powertools' layout) proves the mechanism without
Powertools' code: its fixture imports ``DynamoDBPersistenceLayer`` as Powertools' tests do,
and the run reports which class that built.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from aws_lambda_powertools.shared.version import VERSION

from scripts.powertools_idempotency_suite import ROOT, checkout_version

CONFTEST = """
import pytest
from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

@pytest.fixture
def persistence_store():
    return DynamoDBPersistenceLayer(table_name="TEST_TABLE", boto3_client=object())
"""
TEST = """
from tests.functional.idempotency.utils import marker

def test_the_layer_class(persistence_store):
    print("LAYER", type(persistence_store).__qualname__, marker)
"""


def _checkout(root: Path) -> Path:
    files = {
        "aws_lambda_powertools/shared/version.py": f'VERSION = "{VERSION}"\n',
        # The checkout's own package must not shadow the installed one.
        "aws_lambda_powertools/__init__.py": "raise ImportError('the checkout was imported')\n",
        "tests/__init__.py": "",
        "tests/functional/__init__.py": "",
        "tests/functional/idempotency/__init__.py": "",
        "tests/functional/idempotency/utils.py": "marker = 'from-the-checkout'\n",
        "tests/functional/idempotency/_boto3/__init__.py": "",
        "tests/functional/idempotency/_boto3/conftest.py": CONFTEST,
        "tests/functional/idempotency/_boto3/test_layer.py": TEST,
        "tests/functional/idempotency/_redis/test_redis.py": "import redis_server_needed\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def _run(checkout: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "scripts.powertools_idempotency_suite", str(checkout)]
    options = {"capture_output": True, "text": True, "check": False, "timeout": 300}
    return subprocess.run([*command, *flags, "--", "-s"], cwd=ROOT, **options)


def test_the_suite_builds_our_layer_from_unchanged_files(tmp_path):
    checkout = _checkout(tmp_path)
    run = _run(checkout)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "LAYER ReleasingDynamoDBPersistenceLayer from-the-checkout" in run.stdout
    assert "1  model_step.persistence.ReleasingDynamoDBPersistenceLayer" in run.stdout
    assert "1 passed" in run.stdout  # the Redis layer's tests are left out
    assert f"checkout: {VERSION}" in run.stdout and "warning" not in run.stdout


def test_stock_runs_powertools_own_class(tmp_path):
    run = _run(_checkout(tmp_path), "--stock")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "LAYER DynamoDBPersistenceLayer" in run.stdout


def test_another_version_is_named_in_a_warning(tmp_path):
    checkout = _checkout(tmp_path)
    (checkout / "aws_lambda_powertools/shared/version.py").write_text('VERSION = "3.2.1a1"\n')
    assert checkout_version(checkout) == "3.2.1a1"
    run = _run(checkout)
    assert "warning: the checkout is not at v" in run.stdout
