"""Shared synth fixtures: jsii start-up costs seconds, so each app is synthesized once."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import assertions, cx_api
from aws_cdk import aws_events as events
from aws_cdk import aws_secretsmanager as secretsmanager

from constructs_lib import IdempotentModelStep

#: CDK's own context keys. An empty bundling list means "bundle no stack", the
#: standard way to keep unit tests free of pip and Docker; path metadata is what
#: the CLI adds too, so tests can find resources by construct path.
NO_BUNDLING = {"aws:cdk:bundling-stacks": [], "aws:cdk:enable-path-metadata": True}


REPO = Path(__file__).resolve().parents[2]


def cdk_cli() -> str:
    """The pinned CDK CLI from node_modules (installed by `make setup`)."""
    cli = REPO / "node_modules" / ".bin" / "cdk"
    if not cli.exists():
        pytest.skip("the pinned CDK CLI is not installed; run `make test`, which installs it")
    return str(cli)


def cli_env() -> dict[str, str]:
    """An environment for the CDK CLI: quiet, offline, and the repo importable.

    Offline includes the CLI's telemetry (CDK_DISABLE_CLI_TELEMETRY, its documented opt-out):
    otherwise each command leaves a detached Node process behind that posts it to AWS, which
    no test reaps or waits for, even in a directory whose cdk.json sets versionReporting."""
    env = dict(os.environ)
    env.update(
        CDK_DISABLE_VERSION_CHECK="1", CDK_DISABLE_CLI_TELEMETRY="true", PYTHONPATH=str(REPO)
    )
    return env


@dataclass
class Synthesized:
    """A synthesized app: its output directory, its cloud assembly and each stack's
    template."""

    outdir: Path
    templates: dict[str, dict]
    assembly: cx_api.CloudAssembly

    def template(self, stack_name: str) -> assertions.Template:
        return assertions.Template.from_json(self.templates[stack_name])

    def warnings(self, stack_name: str, pattern: str = "") -> list[tuple[str, str]]:
        """:func:`messages` of level warning on ``stack_name``, from this synth."""
        artifact = self.assembly.get_stack_artifact(stack_name)
        return messages(artifact, cx_api.SynthesisMessageLevel.WARNING, pattern)


def synth(app: cdk.App) -> Synthesized:
    return read_assembly(app.synth())


def read_assembly(assembly: cx_api.CloudAssembly) -> Synthesized:
    """The :class:`Synthesized` of a cloud assembly: its directory and each stack's template."""
    outdir = Path(assembly.directory)
    templates = {
        path.name.removesuffix(".template.json"): json.loads(path.read_text())
        for path in outdir.glob("*.template.json")
    }
    return Synthesized(outdir, templates, assembly)


@contextmanager
def _exclusive(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_file`` (created if missing) while in the block."""
    with lock_file.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


#: Written into a shared synth's directory once its assembly is complete.
_COMPLETE = "synth-complete"


def synth_once_per_run(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[cdk.App], cdk.App]
) -> Synthesized:
    """``build`` applied to a validated, unbundled App (:func:`new_app`) and synthesized once
    per test run, however many pytest-xdist workers ask for it.

    Each worker that used a session fixture synthesized the app again: ``make test``'s four
    workers made four synths of app.py, each with cdk-nag and the built-in validation (whose
    engine alone costs about 4.6 CPU-s of Node to start in a worker), all identical. The first
    worker to ask now synthesizes into the run's shared temporary directory (the parent of
    every worker's ``basetemp``, a new one for each run), under a file lock; the others wait
    on the lock, then read the same cloud assembly from disk, as the CLI does. Without
    xdist it is an ordinary synth. An interrupted synth leaves no mark of completion, so the
    next worker synthesizes again."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return synth(build(new_app(tmp_path_factory, name, validated=True)))
    root = tmp_path_factory.getbasetemp().parent / f"synth-once-{name}"
    with _exclusive(root.with_suffix(".lock")):
        outdir = root / "cdk.out"
        if (root / _COMPLETE).is_file():
            return read_assembly(cx_api.CloudAssembly(str(outdir)))
        shutil.rmtree(root, ignore_errors=True)
        outdir.mkdir(parents=True)
        synthesized = synth(build(app_writing_to(outdir, validated=True)))
        (root / _COMPLETE).touch()
        return synthesized


def messages(
    artifact: cx_api.CloudFormationStackArtifact,
    level: cx_api.SynthesisMessageLevel,
    pattern: str = "",
) -> list[tuple[str, str]]:
    """``(construct path, text)`` of each ``level`` message of a synthesized stack whose text
    matches ``pattern`` (a regular expression, searched; default: every message).

    The messages ``assertions.Annotations.from_stack`` reads, from a synth already made:
    ``Annotations`` forces a new synth of the whole app (aspects, cdk-nag, the built-in
    CloudFormation validation) on every call, to see constructs added since; the tests
    below read them once the app is complete."""
    return [
        (message.id, str(message.entry.data))
        for message in artifact.messages
        if message.level == level and re.search(pattern, str(message.entry.data))
    ]


def stack_messages(
    stack: cdk.Stack, level: cx_api.SynthesisMessageLevel, pattern: str = ""
) -> list[tuple[str, str]]:
    """:func:`messages` of ``stack`` from its app's synth: the one already made, or a new
    one. ``Stage.synth()`` raises if constructs were added since its last synth, so a stale
    assembly is never read."""
    assembly = cdk.Stage.of(stack).synth()
    return messages(assembly.get_stack_artifact(stack.artifact_id), level, pattern)


def unvalidated_app(**props: Any) -> cdk.App:
    """A ``cdk.App`` made with ``props``, without aws-cdk-lib's built-in CloudFormation
    validation: for every test that reads no validation report.

    That validation (a rules engine in WebAssembly) runs at each synth unless the App turns
    it off, and its findings go only to ``validation-report.json``. The demo's and app.py's
    synths keep it, and their tests read the report; for any other synth it was work nobody
    read: about 4 CPU-s of Node to start the engine in each test process, then 0.2-0.4 s a
    synth of the Prospect Uploader's size."""
    return cdk.App(builtin_cloud_formation_validation=False, **props)


def new_app(
    tmp_path_factory: pytest.TempPathFactory, name: str, *, validated: bool = False
) -> cdk.App:
    """An App without bundling, writing to a new temporary directory named after ``name``.
    ``validated``: run the built-in CloudFormation validation (default: False; see
    :func:`unvalidated_app`), for the synths whose tests read the validation report."""
    return app_writing_to(tmp_path_factory.mktemp(name), validated=validated)


def app_writing_to(outdir: Path, *, validated: bool = False) -> cdk.App:
    """An App without bundling that writes to ``outdir``. ``validated``: as :func:`new_app`
    (default: False)."""
    if validated:
        return cdk.App(context=NO_BUNDLING, outdir=str(outdir))
    return unvalidated_app(context=NO_BUNDLING, outdir=str(outdir))


def step_props(stack: cdk.Stack, **overrides: object) -> dict:
    """The minimum props for a step, with a secret made in ``stack``."""
    props: dict = {
        "event_pattern": events.EventPattern(source=["test.source"]),
        "idempotency_key": "[upload_id, row_number]",
        "prompt_version": "v1",
        "system_prompt": "Answer hot, warm or cold.",
        "api_key_secret": secretsmanager.Secret(stack, f"Secret{len(stack.node.children)}"),
    }
    props.update(overrides)
    return props


def make_step(stack: cdk.Stack, id: str = "Step", **overrides: object) -> IdempotentModelStep:
    return IdempotentModelStep(stack, id, **step_props(stack, **overrides))


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The demo app (one step on a custom bus), synthesized with cdk-nag, without bundling."""
    from .demo_stack import build_app

    return synth_once_per_run(tmp_path_factory, "demo", build_app)


@pytest.fixture(scope="session")
def prospect(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The repository's app.py (the Prospect Uploader), with cdk-nag, without bundling."""
    import app as app_module

    return synth_once_per_run(tmp_path_factory, "prospect", app_module.build_app)
