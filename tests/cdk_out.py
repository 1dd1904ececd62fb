"""The real cloud assembly in cdk.out/, which `make synth` builds.

`make test` runs that synth in the background while pytest collects, and holds the first
test until it has written its exit status into :data:`SYNTH_STATUS_ENV` (tests/conftest.py,
``pytest_runtestloop``). A test that reads the assembly asks :func:`built` for the file it
reads: outside `make test` a missing file skips the test (run `make synth`); under
`make test`, whose synth has built cdk.out/ before any test, it fails it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CDK_OUT = REPO / "cdk.out"
#: Set by `make test`: the file its background `make synth` writes its exit status to, and
#: that job's process id (see the Makefile's ``test`` target).
SYNTH_STATUS_ENV, SYNTH_PID_ENV = "MAKE_SYNTH_STATUS", "MAKE_SYNTH_PID"


def built(relative: str = "manifest.json") -> Path:
    """``cdk.out/<relative>`` (default: the assembly's manifest), once it exists.

    Missing, it skips the calling test, or fails it under `make test` (which built
    cdk.out/ first, so a missing file there is a broken synth, not a skipped need)."""
    path = CDK_OUT / relative
    if not path.exists():
        reason = f"cdk.out/{relative} is missing: `make synth` builds it"
        if os.environ.get(SYNTH_STATUS_ENV):
            pytest.fail(f"{reason}, and `make test` ran it before the first test")
        pytest.skip(reason)
    return path
