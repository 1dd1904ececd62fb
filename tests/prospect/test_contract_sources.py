"""One source for the pipeline's contract: prospect_contract defines it, nothing respells it."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from prospect_contract import dead_letters, events
from prospect_contract.errors import ConfigurationError

REPO = Path(__file__).resolve().parents[2]
LAMBDA_SRC = REPO / "lambda_src"
#: Every Prospect package, and the stack that wires them.
PROSPECT_PACKAGES = (
    "prospect_splitter",
    "prospect_classifier",
    "prospect_viewer",
    "failure_recorder",
    "upload_accounting",
)
STACK = REPO / "constructs_lib" / "prospect_uploader" / "stack.py"
#: Values only prospect_contract may spell.
CONTRACT_VALUES = {
    events.EVENT_SOURCE,
    events.ROW_VALIDATED,
    events.UPLOAD_SUMMARIZED,
    events.UPLOAD_COMPLETED,
    dead_letters.DEAD_LETTER_MEMBER,
    dead_letters.DEAD_LETTER_ID,
    dead_letters.RECEIVES_EXHAUSTED,
}


def _sources() -> list[Path]:
    files = [STACK]
    for package in PROSPECT_PACKAGES:
        files += sorted((LAMBDA_SRC / package).rglob("*.py"))
    return files


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_prospect_module_spells_a_contract_value(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    spelled = [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in CONTRACT_VALUES
    ]
    assert spelled == [], f"import these from prospect_contract instead: {spelled}"


def test_the_contract_needs_only_the_standard_library():
    # The CDK app imports it, and constructs_lib must import without boto3 or Powertools.
    code = textwrap.dedent(
        """
        import sys

        class Refuse:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {"boto3", "botocore", "aws_lambda_powertools"}:
                    raise ImportError(f"blocked: {name}")

        sys.meta_path.insert(0, Refuse())
        import prospect_contract.dead_letters, prospect_contract.errors
        import prospect_contract.events, prospect_contract.failures
        import prospect_contract.put_events, prospect_contract.settings
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=LAMBDA_SRC,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr


def test_every_prospect_setting_error_is_the_one_configuration_error(monkeypatch):
    from prospect_splitter.config import Settings as SplitterSettings
    from prospect_viewer.config import Settings as ViewerSettings
    from upload_accounting import LedgerSettings

    for name in ("EVENT_BUS_NAME", "EVENT_BUS_ARN", "FAILURES_TABLE_NAME", "UPLOADS_TABLE_NAME"):
        monkeypatch.delenv(name, raising=False)
    for read in (SplitterSettings.from_env, ViewerSettings.from_env, LedgerSettings.from_env):
        with pytest.raises(ConfigurationError):
            read()


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("FAILURE_RETENTION_DAYS", "0", "FAILURE_RETENTION_DAYS must be positive, got 0"),
        ("FAILURE_RETENTION_DAYS", "ninety", "FAILURE_RETENTION_DAYS must be an integer"),
        ("PAGE_SIZE", "501", "PAGE_SIZE must be at most 500, got 501"),
    ],
)
def test_a_bad_number_names_the_variable_and_the_value(monkeypatch, name, value, message):
    from failure_recorder.handler import _retention_days
    from prospect_splitter.failures import expires_at
    from prospect_viewer.config import Settings as ViewerSettings

    monkeypatch.setenv("FAILURES_TABLE_NAME", "failures")
    monkeypatch.setenv("EVENT_BUS_NAME", "bus")
    monkeypatch.setenv(name, value)
    readers = (
        [_retention_days, expires_at]
        if name == "FAILURE_RETENTION_DAYS"
        else [ViewerSettings.from_env]
    )
    for read in readers:
        with pytest.raises(ConfigurationError, match=message):
            read()
