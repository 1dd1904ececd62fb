"""Fixtures of the local-run tests: the real cloud assembly (skipped when not synthesized)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from constructs_lib.local_engine.assembly import CloudAssembly, load_assembly
from constructs_lib.local_engine.scheduling import Scheduler, WorkTracker
from tests.cdk_out import CDK_OUT, built

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "prospects-sample.csv"
#: A run-minute of 0.25 s (``seconds_per_minute``; the CLI's default is 1 s) for the runs
#: that mostly wait out visibility timeouts, backoffs and batch ticks on the run's clock:
#: their waits shrink four times, their CPU does not change. The model's 5 s deadline is
#: real time either way, so a loaded machine meets it the same.
FAST_CLOCK = 0.25


@pytest.fixture
def clock() -> Iterator[tuple[Scheduler, WorkTracker]]:
    """A scheduler and work tracker for the local engine's queues, stopped after the test."""
    scheduler, tracker = Scheduler(), WorkTracker()
    yield scheduler, tracker
    scheduler.stop()


@pytest.fixture(scope="session")
def cdk_out() -> Path:
    built("ProspectUploader.template.json")
    return CDK_OUT


@pytest.fixture(scope="session")
def assembly(cdk_out: Path) -> CloudAssembly:
    return load_assembly(cdk_out, "ProspectUploader")


def local_run_app(outdir: Path, **context: object) -> Any:
    """A ``cdk.App`` for a local run's in-process synth into ``outdir``, with ``context`` on
    top of: no stack bundled (the local run reads the template and runs the handlers from
    lambda_src) and path metadata on (the engine names resources by construct path).

    aws-cdk-lib's built-in CloudFormation validation is off: its findings go only to
    ``validation-report.json``, which no local run reads (tests/infra reads app.py's), and
    starting its rules engine cost about 4 CPU-s of Node in each test process."""
    import aws_cdk as cdk

    return cdk.App(
        context={
            "aws:cdk:bundling-stacks": [],
            "aws:cdk:enable-path-metadata": True,
            **context,
        },
        outdir=str(outdir),
        builtin_cloud_formation_validation=False,
    )


@pytest.fixture(scope="session")
def classic_cdk_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stack synthesized with ``-c event_bus=classic`` (in-process, without bundling:
    the local run reads the template and runs the handlers from lambda_src)."""
    import app as app_module

    outdir = tmp_path_factory.mktemp("cdk.out.classic")
    app_module.build_app(local_run_app(outdir, event_bus="classic")).synth()
    return outdir


@pytest.fixture(scope="session")
def bedrock_cdk_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stack synthesized with ``-c model_provider=bedrock`` (in-process, without
    bundling): its classify step calls Claude on Bedrock through the US inference profile."""
    import app as app_module

    outdir = tmp_path_factory.mktemp("cdk.out.bedrock")
    app_module.build_app(local_run_app(outdir, model_provider="bedrock")).synth()
    return outdir


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: a whole local run of a minute or less (runs in make test)"
    )


@pytest.fixture(scope="session")
def realtime_cdk_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stack synthesized with ``-c delivery=realtime`` (no Message Batches step)."""
    import app as app_module

    outdir = tmp_path_factory.mktemp("cdk.out.realtime")
    app_module.build_app(local_run_app(outdir, delivery="realtime")).synth()
    return outdir
