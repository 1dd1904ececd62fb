"""Run Powertools' own idempotency tests against our persistence layer, their files unchanged.

``python -m scripts.powertools_idempotency_suite PATH [--stock] [-- PYTEST_ARGS...]``

``PATH`` is a checkout of aws-powertools/powertools-lambda-python, at the tag of the
version this repository pins (``v3.37.0``: ``requirements-dev.lock`` and
``lambda_src/model_step/requirements.txt``). The run:

- copies, byte for byte, what the suite needs of the checkout (``tests/__init__.py``,
  ``tests/conftest.py`` and ``tests/functional/{__init__,conftest,utils}.py`` where they
  exist, ``tests/functional/idempotency/`` and ``tests/events/``) into a temporary
  directory. The copy keeps the checkout's own ``aws_lambda_powertools`` off the path: the
  tests run against the INSTALLED, pinned Powertools, whose class ours extends;
- runs pytest there with :mod:`scripts.powertools_suite_plugin`, which puts
  ``ReleasingDynamoDBPersistenceLayer`` where Powertools exports
  ``DynamoDBPersistenceLayer`` (``--stock``: Powertools' own class, for a baseline);
- leaves out ``_redis/`` (the Redis layer's tests need a Redis server; they never build a
  DynamoDB layer).

It prints pytest's summary (passed, failed, errors) and the classes the fixtures built, and
exits with pytest's status. docs/runtime.md lists the tests expected to fail and why.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from aws_lambda_powertools.shared.version import VERSION as INSTALLED_VERSION

ROOT = Path(__file__).resolve().parent.parent
#: Files and directories of the checkout the idempotency suite imports, copied unchanged.
SUITE_FILES = (
    "tests/__init__.py",
    "tests/conftest.py",
    "tests/functional/__init__.py",
    "tests/functional/conftest.py",
    "tests/functional/utils.py",
)
SUITE_DIRECTORIES = ("tests/functional/idempotency", "tests/events")
#: Below the suite: the Redis persistence layer's tests (a Redis server; no DynamoDB layer).
LEFT_OUT = ("_redis",)
PLUGIN = "scripts.powertools_suite_plugin"


def checkout_version(checkout: Path) -> str | None:
    """The ``VERSION`` a Powertools checkout declares, or None when it declares none."""
    path = checkout / "aws_lambda_powertools" / "shared" / "version.py"
    if not path.is_file():
        return None
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            if any(isinstance(t, ast.Name) and t.id == "VERSION" for t in node.targets):
                return str(node.value.value)
    return None


def copy_suite(checkout: Path, into: Path) -> Path:
    """Copy the suite's files from ``checkout`` to ``into``; returns the suite's directory."""
    suite = checkout / SUITE_DIRECTORIES[0]
    if not suite.is_dir():
        raise SystemExit(f"{checkout} has no {SUITE_DIRECTORIES[0]}/: not a Powertools checkout")
    for name in SUITE_FILES:
        if (checkout / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(checkout / name, into / name)
    for name in SUITE_DIRECTORIES:
        if (checkout / name).is_dir():
            shutil.copytree(checkout / name, into / name, dirs_exist_ok=True)
    return into / SUITE_DIRECTORIES[0]


def pytest_command(suite: Path, extra: Sequence[str]) -> list[str]:
    """pytest over ``suite``, with the plugin and a config of its own (not the checkout's,
    whose addopts may name plugins this environment lacks, nor this repository's)."""
    config = suite.parents[2] / "pytest.ini"
    config.write_text("[pytest]\n", encoding="utf-8")
    ignored = [f"--ignore={suite / name}" for name in LEFT_OUT]
    return [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        str(config),
        "--rootdir",
        str(config.parent),
        "-p",
        PLUGIN,
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        "-q",
        *ignored,
        str(suite),
        *extra,
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="Arguments after -- go to pytest."
    )
    parser.add_argument("checkout", type=Path, help="a powertools-lambda-python checkout")
    parser.add_argument(
        "--stock", action="store_true", help="test Powertools' own class (the baseline)"
    )
    arguments = list(sys.argv[1:] if argv is None else argv)
    split = arguments.index("--") if "--" in arguments else len(arguments)
    options = parser.parse_args(arguments[:split])
    pytest_args = arguments[split + 1 :]
    version = checkout_version(options.checkout)
    print(f"Powertools installed: {INSTALLED_VERSION}; checkout: {version or 'unknown'}")
    if version != INSTALLED_VERSION:
        print(
            f"warning: the checkout is not at v{INSTALLED_VERSION}; "
            "its tests may expect another version's behaviour"
        )
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(ROOT / "lambda_src"), environment.get("PYTHONPATH", "")]
    )
    environment["POWERTOOLS_SUITE_STOCK"] = "1" if options.stock else "0"
    with tempfile.TemporaryDirectory(prefix="powertools-suite-") as directory:
        suite = copy_suite(options.checkout.resolve(), Path(directory))
        command = pytest_command(suite, pytest_args)
        return subprocess.run(command, env=environment, cwd=directory, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
