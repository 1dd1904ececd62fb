"""Cold start of the model step in fresh subprocesses, and the size of its Lambda asset.

Each measurement is a new Python process that imports ``model_step.handler`` and answers one
event (time measured inside the child, so interpreter start-up, the same for all, is
excluded): a DUPLICATE (its record is already COMPLETED in the table, so the SDK is never
imported) and a NEW event (the model is called on the fake API). The baseline is a bare
``import anthropic`` in the same kind of process. The children reach DynamoDB and SQS through
moto's ``ThreadedMotoServer`` on 127.0.0.1 (``AWS_ENDPOINT_URL``) and the model through the
fake Messages API on 127.0.0.1.

Two bytecode settings:

- ``.pyc cached``: compiled bytecode available (a developer machine, or an asset shipping .pyc);
- ``no .pyc``: everything compiled from source on import. This is what the bundled asset gets
  today: bundling strips ``__pycache__`` and /var/task is read-only, so Lambda cannot cache it.

Asset size: if ``cdk.out/`` exists, the model step functions' assets (resource Metadata
``aws:asset:path``) are measured unzipped and zipped (zipfile, DEFLATED), as Lambda limits
them (250 MB unzipped, 50 MB zipped for direct upload).

Run: ``python -m bench.cold_start [--quick]``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import boto3

from bench import PYCACHE
from bench.harness import (
    LAMBDA_SRC,
    REGION,
    REPO,
    FakeLambdaContext,
    bench_env,
    bench_main,
    create_idempotency_table,
    create_queue,
    fake_api,
    make_event,
    median,
    moto_server,
    patched_env,
    print_table,
    ratio,
    step_environment,
)

CHILD = r"""
import json, sys, time
start = time.perf_counter()
kind = sys.argv[1]
status = None
if kind == "import anthropic":
    import anthropic
    imported = time.perf_counter()
else:
    from model_step.handler import handler
    imported = time.perf_counter()

    class Context:
        function_name = "model-step-bench"
        aws_request_id = "cold-start"
        def get_remaining_time_in_millis(self):
            return 30000

    status = handler(json.loads(sys.argv[2]), Context())["status"]
done = time.perf_counter()
print("RESULT " + json.dumps({
    "seconds": done - start,
    "import_seconds": imported - start,
    "status": status,
    "anthropic_imported": "anthropic" in sys.modules,
}))
"""

KINDS = ("import anthropic", "duplicate event", "new event")
#: bytecode setting -> (PYTHONDONTWRITEBYTECODE, use the shared bytecode cache)
BYTECODE = {".pyc cached": False, "no .pyc": True}


def child_env(no_pyc: bool, empty_cache: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(LAMBDA_SRC)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if no_pyc:
        # An empty prefix: no bytecode is found, none is written; all compiled from source.
        env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONPYCACHEPREFIX=empty_cache)
    else:
        env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    return env


def run_child(kind: str, event: dict | None, env: dict[str, str]) -> dict[str, Any]:
    argv = [sys.executable, "-c", CHILD, kind] + ([json.dumps(event)] if event else [])
    child = subprocess.run(
        argv, capture_output=True, text=True, env=env, timeout=120, check=False, cwd=REPO
    )
    if child.returncode != 0:
        raise RuntimeError(f"cold-start child {kind!r} failed:\n{child.stderr[-2000:]}")
    line = next(x for x in child.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def measure_cold_starts(
    repeats: int, variants: Sequence[str], quick: bool = False
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with (
        bench_env(),
        moto_server() as endpoint,
        fake_api() as api,
        tempfile.TemporaryDirectory() as empty,
    ):
        session = boto3.session.Session(region_name=REGION)
        with patched_env({"AWS_ENDPOINT_URL": endpoint}):
            create_idempotency_table(session)
            queue_url = create_queue(session)
        env_vars = {"AWS_ENDPOINT_URL": endpoint, **step_environment(queue_url, api.base_url)}
        with patched_env(env_vars):
            from model_step import ModelStep, Settings

            duplicate = make_event("upload-cold", 0)
            step = ModelStep(settings=Settings.from_environment(), boto3_session=session)
            step.handle(duplicate, FakeLambdaContext())  # the record the children replay
            row_numbers = iter(range(1, 10_000))
            for variant in variants:
                env = child_env(BYTECODE[variant], empty)
                if not quick:
                    # A first run writes the .pyc files and warms the file cache (--quick
                    # skips it: its figures are smoke-run only).
                    run_child("new event", make_event("upload-warmup", 0), env)
                for kind in KINDS:
                    samples = []
                    for _ in range(repeats):
                        event = (
                            duplicate
                            if kind == "duplicate event"
                            else make_event("upload-cold", next(row_numbers))
                        )
                        samples.append(run_child(kind, event if kind != KINDS[0] else None, env))
                    rows.append(summarise(variant, kind, samples))
    return rows


def summarise(variant: str, kind: str, samples: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "bytecode": variant,
        "kind": kind,
        "repeats": len(samples),
        "median_seconds": median([s["seconds"] for s in samples]),
        "median_import_seconds": median([s["import_seconds"] for s in samples]),
        "samples_seconds": [s["seconds"] for s in samples],
        "status": samples[0]["status"],
        "anthropic_imported": samples[0]["anthropic_imported"],
    }


# --------------------------------------------------------------------------- asset size
def model_step_assets(cdk_out: Path) -> list[tuple[str, Path]]:
    """(template/logical id, asset dir) of every function running the model step."""
    found = []
    for template in sorted(cdk_out.glob("*.template.json")):
        resources = json.loads(template.read_text()).get("Resources", {})
        for logical_id, resource in resources.items():
            props = resource.get("Properties", {})
            variables = props.get("Environment", {}).get("Variables", {})
            asset = resource.get("Metadata", {}).get("aws:asset:path")
            if (
                resource.get("Type") == "AWS::Lambda::Function"
                and asset
                and ("IDEMPOTENCY_KEY" in variables and "PROMPT_VERSION" in variables)
            ):
                found.append((f"{template.name.split('.')[0]}/{logical_id}", cdk_out / asset))
    return found


def asset_sizes(asset_dir: Path) -> dict[str, int]:
    files = [p for p in sorted(asset_dir.rglob("*")) if p.is_file()]
    unzipped = sum(p.stat().st_size for p in files)
    with tempfile.TemporaryFile() as buffer:
        with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for path in files:
                archive.write(path, path.relative_to(asset_dir))
        zipped = buffer.tell()
    return {"files": len(files), "unzipped_bytes": unzipped, "zipped_bytes": zipped}


def measure_assets(cdk_out: Path) -> dict[str, Any]:
    if not cdk_out.is_dir():
        return {"skipped": f"{cdk_out} does not exist; run `make synth` first"}
    assets: dict[str, Any] = {}
    seen: dict[Path, dict[str, int]] = {}
    for name, asset_dir in model_step_assets(cdk_out):
        if not asset_dir.is_dir():
            assets[name] = {"skipped": f"asset {asset_dir.name} not staged (bundling skipped)"}
            continue
        seen.setdefault(asset_dir, asset_sizes(asset_dir))
        assets[name] = {"asset": asset_dir.name, **seen[asset_dir]}
    if not assets:
        return {"skipped": "no model step function in cdk.out"}
    return {"assets": assets}


def run(*, quick: bool = False, out_dir: Path | None = None, cdk_out: Path | None = None) -> dict:
    variants = [".pyc cached"] if quick else list(BYTECODE)
    rows = measure_cold_starts(1 if quick else 5, variants, quick)
    baseline = {r["bytecode"]: r["median_seconds"] for r in rows if r["kind"] == KINDS[0]}
    for row in rows:
        row["ratio_vs_import_anthropic"] = ratio(row["median_seconds"], baseline[row["bytecode"]])
    print_table(
        f"Cold start in a fresh process (median of {rows[0]['repeats']}; interpreter start-up "
        "excluded)",
        [
            "bytecode",
            "measured",
            "median s",
            "of which import s",
            "anthropic imported",
            "vs bare import anthropic",
        ],
        [
            [
                r["bytecode"],
                r["kind"],
                r["median_seconds"],
                r["median_import_seconds"],
                "yes" if r["anthropic_imported"] else "no",
                r["ratio_vs_import_anthropic"],
            ]
            for r in rows
        ],
    )
    assets = measure_assets(cdk_out or REPO / "cdk.out")
    if "assets" in assets:
        print_table(
            "Model step Lambda asset (cdk.out)",
            ["function", "asset", "files", "unzipped MB", "zipped MB (DEFLATED)"],
            [
                [
                    name,
                    a.get("asset", "-")[:18],
                    a.get("files"),
                    a["unzipped_bytes"] / 1e6 if "unzipped_bytes" in a else None,
                    a["zipped_bytes"] / 1e6 if "zipped_bytes" in a else None,
                ]
                for name, a in assets["assets"].items()
            ],
        )
    else:
        print(f"\nasset size: skipped ({assets['skipped']})")
    return {"cold_starts": rows, "asset_size": assets}


def main(argv: Sequence[str] | None = None) -> dict:
    return bench_main("cold_start", __doc__.splitlines()[0], run, argv)


if __name__ == "__main__":
    main()
