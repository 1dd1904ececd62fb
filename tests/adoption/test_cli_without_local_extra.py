"""`prospect-uploader` where the `local` extra is not installed: help works, commands say
which extra to install, and nothing prints a traceback.

The extra's modules are hidden from a child interpreter (None in ``sys.modules`` makes an
import fail as if the package were absent); the wheel test checks the same in a virtualenv
that really lacks them.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

LOCAL_EXTRA = ("boto3", "botocore", "moto", "anthropic", "aws_lambda_powertools")


def cli_without_local_extra(*args: str) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys\n"
        f"for name in {LOCAL_EXTRA!r}: sys.modules[name] = None\n"
        "from constructs_lib.prospect_uploader.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60
    )


def test_help_works_without_the_local_extra():
    result = cli_without_local_extra("--help")
    assert result.returncode == 0, result.stderr
    assert "usage: prospect-uploader" in result.stdout and result.stderr == ""


def test_run_help_shows_its_defaults_without_the_local_extra():
    result = cli_without_local_extra("run", "--help")
    assert result.returncode == 0, result.stderr
    # Defaults that come from the engine's modules without boto3 (the run timeout's default
    # is derived from the work at run time, so the help says so).
    assert "--run-timeout SECONDS" in result.stdout and "derived from the work" in result.stdout
    assert "--timeout-cap SECONDS" in result.stdout and "(default: 8.0;" in result.stdout


@pytest.mark.parametrize(
    ("args", "missing"),
    [
        (("run", "prospects.csv"), "boto3, moto, anthropic, aws_lambda_powertools"),
        (("viewer", "https://abc.lambda-url.us-east-1.on.aws/"), "botocore"),
    ],
)
def test_a_command_names_the_extra_to_install_in_one_line(args, missing):
    result = cli_without_local_extra(*args)
    assert result.returncode == 2
    assert result.stderr == (
        f"prospect-uploader: error: '{args[0]}' needs the library's 'local' extra "
        f"({missing} not installed): pip install 'idempotent-model-step[local]'\n"
    )
    assert "Traceback" not in result.stdout + result.stderr
