"""The construct library imports with its own dependencies only; the local engine is apart."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from .conftest import REPO

# A meta-path finder that refuses the local run's dependencies, as if they were not installed.
BLOCKER = textwrap.dedent(
    """
    import sys

    BLOCKED = {"moto", "boto3", "botocore", "anthropic", "aws_lambda_powertools"}

    class Refuse:
        def find_spec(self, name, path=None, target=None):
            if name.split(".", 1)[0] in BLOCKED:
                raise ImportError(f"blocked in this test: {name}")
            return None

    sys.meta_path.insert(0, Refuse())
    """
)


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + textwrap.dedent(code)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.synth  # the child process imports every construct, so starts jsii
def test_the_construct_library_needs_none_of_the_local_run_dependencies():
    done = _python(
        """
        import constructs_lib
        from constructs_lib import IdempotentModelStep, RetryBudget
        from constructs_lib.prospect_uploader.stack import ProspectUploaderStack
        leaked = sorted(
            name for name in sys.modules
            if name.split(".")[0] in BLOCKED or name.startswith("constructs_lib.local_engine")
        )
        print("leaked:", leaked)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "leaked: []" in done.stdout


def test_the_blocker_does_refuse_the_local_engine():
    # Proves the finder above works: the engine needs moto and boto3.
    done = _python("import constructs_lib.local_engine.local_aws")
    assert done.returncode != 0
    assert "blocked in this test: boto3" in done.stderr
