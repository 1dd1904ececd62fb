"""Synth time and CloudFormation resources per step: IdempotentModelStep vs plain L2s.

Every synth runs in its own subprocess, timed from the parent around the whole process, so
Python start-up, importing aws_cdk and starting jsii's Node process are included in the same
way for both variants (that fixed cost is most of a small app's synth time). Bundling is
skipped (``aws:cdk:bundling-stacks: []``) as in unit tests, so pip does not run.

The baseline writes each step's resources directly with aws-cdk-lib L2s (rule, function with
role and log group, table, queue, event invoke config, three alarms, the same grants; see
``bench.baselines.add_plain_l2_step``). One API key secret is shared by all steps in both.

Resources per step are counted from the template by construct path (``aws:cdk:path``
metadata), which gives how many steps fit in one stack under CloudFormation's 500-resource
limit. 40 steps do NOT fit one stack (CDK itself refuses: TooManyResourcesInStack, 521 > 500),
so every app is split into stacks of at most 20 steps (one shared secret each), in both
variants alike.

``--quick`` (a smoke run, ``tests/bench``) synthesizes one step of each variant in one
subprocess, one app after the other: the same child, apps and counts, with one Python and jsii
start-up instead of two (its wall figures are then not comparable between the variants), and
without aws-cdk-lib's built-in CloudFormation validation (``CDK_VALIDATION=false``): it only
warns and never changes a template, and starting its engine cost about 4 CPU-s, more than the
two apps' synths together. The measured runs keep it, as a user's synth runs it.

Run: ``python -m bench.synth [--quick]``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import child_pycache_prefix
from bench.harness import REPO, bench_main, median, print_table, ratio

STACK_RESOURCE_LIMIT = 500
#: 40 steps (20 resources each) do not fit one stack: CDK refuses with TooManyResourcesInStack
#: (521 > 500). Apps are therefore split into stacks of at most 20 steps, both variants alike.
STEPS_PER_STACK = 20
VARIANTS = ("IdempotentModelStep", "plain L2s")

CHILD = r"""
import json, os, sys, time
start = time.perf_counter()
variants, count, per_stack = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3])
outdir = sys.argv[4]
import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_secretsmanager as secretsmanager
imported = time.perf_counter()

def synth(variant):
    app = cdk.App(outdir=os.path.join(outdir, variant.replace(" ", "-")), context={
        "aws:cdk:bundling-stacks": [], "aws:cdk:enable-path-metadata": True,
    })
    if variant == "IdempotentModelStep":
        from constructs_lib import IdempotentModelStep
    else:
        from bench.baselines import add_plain_l2_step
    stacks = []
    for i in range(count):
        if i % per_stack == 0:
            stack = cdk.Stack(app, f"Bench{len(stacks)}")
            secret = secretsmanager.Secret(stack, "ApiKey")
            stacks.append(stack)
        if variant == "IdempotentModelStep":
            IdempotentModelStep(
                stack, f"Step{i}",
                event_pattern=events.EventPattern(source=[f"bench.step{i}"]),
                idempotency_key="[upload_id, row_number]",
                prompt_version="v1",
                system_prompt="Answer hot, warm or cold.",
                api_key_secret=secret,
            )
        else:
            add_plain_l2_step(stack, f"Step{i}", secret=secret, code_dir="lambda_src/model_step")
    built = time.perf_counter()
    assembly = app.synth()
    done = time.perf_counter()
    paths = []
    for stack in stacks:
        with open(f"{assembly.directory}/{stack.stack_name}.template.json") as f:
            resources = json.load(f)["Resources"].values()
        paths += [r.get("Metadata", {}).get("aws:cdk:path", "") for r in resources]
    return built, done, {
        "variant": variant,
        "stacks": len(stacks),
        "resources": len(paths),
        "step0_resources": sum(p.startswith("Bench0/Step0/") for p in paths),
    }

# One variant a process when measuring; --quick runs both, one app after the other (the
# second's import_seconds is then 0: the first paid for the imports).
for variant in variants:
    built, done, counted = synth(variant)
    print("RESULT " + json.dumps({
        "import_seconds": imported - start,
        "construct_seconds": built - imported,
        "synth_seconds": done - built,
        **counted,
    }))
    start = imported = time.perf_counter()
"""


def synth_in_one_process(
    variants: Sequence[str], count: int, validation: bool = True
) -> list[dict[str, Any]]:
    """One sample of each of ``variants`` at ``count`` steps, all synthesized in one new
    subprocess (one app after the other), which is timed from outside as a whole.

    :param validation: False turns aws-cdk-lib's built-in CloudFormation validation off
        (``CDK_VALIDATION=false``); default True, as a user's synth runs it.
    """
    env = dict(os.environ)
    if not validation:
        env["CDK_VALIDATION"] = "false"
    env.update(
        PYTHONPATH=str(REPO),
        PYTHONPYCACHEPREFIX=child_pycache_prefix(),
        CDK_DISABLE_VERSION_CHECK="1",
        JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION="1",
    )
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # Node 24 from the venv first, so jsii never prints the end-of-life banner.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    argv = [",".join(variants), str(count), str(STEPS_PER_STACK)]
    with tempfile.TemporaryDirectory() as outdir:
        started = time.perf_counter()
        child = subprocess.run(
            [sys.executable, "-c", CHILD, *argv, outdir],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=600,
            check=False,
        )
        wall = time.perf_counter() - started
    if child.returncode != 0:
        raise RuntimeError(f"synth child {variants} x{count} failed:\n{child.stderr[-3000:]}")
    lines = [x for x in child.stdout.splitlines() if x.startswith("RESULT ")]
    return [{"wall_seconds": wall, **json.loads(x.removeprefix("RESULT "))} for x in lines]


def synth_once(variant: str, count: int) -> dict[str, Any]:
    """One sample: ``variant`` at ``count`` steps, alone in a new subprocess."""
    [sample] = synth_in_one_process([variant], count)
    return sample


def measure(variant: str, count: int, repeats: int) -> dict[str, Any]:
    return summarise(variant, count, [synth_once(variant, count) for _ in range(repeats)])


def summarise(variant: str, count: int, samples: list[dict[str, Any]]) -> dict[str, Any]:
    first = samples[0]
    per_step = first["step0_resources"]
    # What is not a step's (one API key secret per stack) is paid once per stack.
    fixed_per_stack = (first["resources"] - per_step * count) // first["stacks"]
    return {
        "variant": variant,
        "steps": count,
        "repeats": len(samples),
        "median_wall_seconds": median([s["wall_seconds"] for s in samples]),
        "median_in_process_synth_seconds": median(
            [s["construct_seconds"] + s["synth_seconds"] for s in samples]
        ),
        "stacks": first["stacks"],
        "resources": first["resources"],
        "resources_per_step": per_step,
        "fixed_resources_per_stack": fixed_per_stack,
        "max_steps_per_stack": (STACK_RESOURCE_LIMIT - fixed_per_stack) // per_step
        if per_step
        else None,
        "samples": samples,
    }


def run(*, quick: bool = False, out_dir: Path | None = None) -> dict:
    if quick:
        # A smoke run: both variants' one-step apps in one process (one jsii start-up), no
        # built-in validation (its engine's start-up would be most of the child's CPU).
        samples = synth_in_one_process(VARIANTS, 1, validation=False)
        rows = [summarise(s["variant"], 1, [s]) for s in samples]
    else:
        repeats = 3
        rows = [measure(v, n, repeats if n < 40 else 1) for n in (1, 10, 40) for v in VARIANTS]
    by_key = {(r["variant"], r["steps"]): r for r in rows}
    table = []
    for row in rows:
        base = by_key[("plain L2s", row["steps"])]
        table.append(
            [
                row["variant"],
                row["steps"],
                row["median_wall_seconds"],
                row["median_in_process_synth_seconds"],
                ratio(row["median_wall_seconds"], base["median_wall_seconds"]),
                row["stacks"],
                row["resources"],
                row["resources_per_step"],
                row["max_steps_per_stack"],
            ]
        )
        row["wall_ratio_vs_plain_l2"] = table[-1][4]
    print_table(
        "Synth time (fresh subprocess each, wall clock incl. Python + jsii start-up; "
        "bundling skipped)",
        [
            "variant",
            "steps",
            "wall s",
            "construct+synth s",
            "wall vs plain L2s",
            "stacks",
            "resources",
            "resources/step",
            f"max steps per stack (<= {STACK_RESOURCE_LIMIT} resources)",
        ],
        table,
    )
    return {"rows": rows}


def main(argv: Sequence[str] | None = None) -> dict:
    return bench_main("synth", __doc__.splitlines()[0], run, argv)


if __name__ == "__main__":
    main()
