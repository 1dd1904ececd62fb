"""The real deploy `make test` includes: `python -m scripts.deploy_local` on cdk.out, as
`make deploy-local` runs it (`cdk bootstrap` and `cdk deploy` with the pinned CLI into moto's
server on 127.0.0.1, then the checks through the AWS APIs and their self-test).

It runs as one of the suite's long tests, beside the others, instead of alone before pytest:
it is one Python process and the CLI's Node, so a serial deploy left the second core to mypy
alone for its 20-odd seconds of wall time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cdk_out import CDK_OUT, built

REPO = Path(__file__).resolve().parents[2]
#: Seconds the deploy may take before the test gives up: it takes about 25 on a quiet 2-core
#: machine, and over a minute beside the rest of the suite and two CPU hogs.
DEPLOY_TIMEOUT_SECONDS = 900


@pytest.mark.long
@pytest.mark.cli
@pytest.mark.moto
def test_cdk_out_deploys_into_moto_as_it_says_and_the_checks_catch_what_the_self_test_breaks():
    built()
    result = subprocess.run(
        [sys.executable, "-m", "scripts.deploy_local", "--cdk-out", str(CDK_OUT), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=DEPLOY_TIMEOUT_SECONDS,
    )
    assert result.returncode == 0, f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    report = json.loads(result.stdout)
    assert report["failures"] == []
    # Every stack deployed something checked through the API, and every function's published
    # code is its staged asset.
    assert report["stacks"] and all(s["created"] for s in report["stacks"].values())
    functions = [f for s in report["stacks"].values() for f in s["functions"].values()]
    assert functions and not [f for f in functions if f.get("files_differing")]
    # The checks caught every break the self-test made.
    self_test = report["self_test"]
    assert self_test["broken"] and sorted(self_test["caught"]) == sorted(self_test["broken"])
