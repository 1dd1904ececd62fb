"""``make deploy-local``: a real ``cdk bootstrap`` and ``cdk deploy`` into moto on 127.0.0.1,
then a check, through the AWS APIs, that what was built is what ``cdk.out`` says.

Steps:

1. start moto's server on 127.0.0.1 (fake credentials, account 123456789012, us-east-1);
2. copy ``cdk.out`` and shim each template for moto's CloudFormation (see :func:`shim_template`:
   resource types moto cannot create are removed and references to them become placeholder
   ARNs; ``Ref`` on an event bus becomes ``Fn::GetAtt [bus, Name]``); the staged assets are the
   bundled ones, linked, not rebuilt;
3. ``cdk bootstrap`` and ``cdk deploy --all --method=direct`` with the pinned CLI
   (``node_modules/.bin/cdk``), which zips and publishes the assets to moto's S3;
4. through the AWS APIs (:mod:`scripts.deployed_checks`): each function's ``CodeSha256``
   equals the sha256 of the zip the CLI published, and that zip holds exactly the staged
   asset's files; environments resolve to the deployed resources; rules, targets, retry
   policies, DLQs, queue redrives and event source mappings are wired as the template says;
5. print resources created, skipped by the emulator (removed by the shim, or reported
   CREATE_COMPLETE but absent from its API) and the wall time. Exit 1 on any mismatch.

Run: ``python -m scripts.deploy_local [--cdk-out DIR] [--json]``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scripts.deployed_checks import FileDigests

REPO = Path(__file__).resolve().parents[1]
ACCOUNT = "123456789012"
REGION = "us-east-1"

#: The moto release the shim was checked against (requirements-dev.lock pins it). Another
#: version may have closed a gap or opened one: re-check the list below, then bump this.
MOTO_VERSION = "5.2.5"
#: Properties moto's CloudFormation accepts but does not apply (MOTO_VERSION): the check
#: reports them as not kept instead of failing. Checked in moto's create_from_cloudformation_json.
KNOWN_PROPERTY_GAPS = {
    ("AWS::DynamoDB::Table", "TimeToLiveSpecification"): "moto's CloudFormation ignores TTL",
    ("AWS::S3::Bucket", "NotificationConfiguration"): (
        "moto's CloudFormation ignores a bucket's NotificationConfiguration"
    ),
}


@dataclass
class ShimReport:
    """What the shim changed in one template."""

    removed: dict[str, str] = field(default_factory=dict)  # logical id -> type
    rewritten_refs: list[str] = field(default_factory=list)  # "Where: Ref X -> ..."
    dropped_outputs: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- moto server
@contextmanager
def quiet_moto_server() -> Iterator[str]:
    """moto's server on 127.0.0.1 in this process (clean state); yields its endpoint URL."""
    import logging
    import warnings

    from constructs_lib.local_engine.moto_server import moto_server

    # The report says what moto skipped; its per-resource warnings and the server's
    # tracebacks (a 500 answered to a probe is reported too) would drown it.
    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
    logging.getLogger("moto").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="Tried to parse", category=UserWarning)
    with moto_server(quiet=False) as url:
        yield url


def aws_env(endpoint: str) -> dict[str, str]:
    """Fake credentials, moto's endpoint (``http://127.0.0.1:<port>``) and no CLI telemetry,
    for the CLI and for boto3."""
    port = endpoint.rsplit(":", 1)[1]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "CDK_")) and k not in ("PYTHONPATH",)
    }
    env.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_REGION=REGION,
        AWS_DEFAULT_REGION=REGION,
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
        # moto reads a template URL path-style only when its host contains "localhost";
        # otherwise it takes 127.0.0.1 for a bucket name (NoSuchBucket).
        AWS_ENDPOINT_URL_S3_FOR_CLOUDFORMATION=f"http://localhost:{port}",
        AWS_EC2_METADATA_DISABLED="true",
        CDK_DISABLE_VERSION_CHECK="1",
        # No CLI telemetry: a deploy into a local emulator is no use of AWS to report, and
        # the CLI ran a sender process (a Node start, TLS, DNS) after each command to post it.
        CDK_DISABLE_CLI_TELEMETRY="true",
    )
    return env


# --------------------------------------------------------------------------- the shim
def moto_cloudformation_types() -> set[str]:
    from moto.cloudformation.parsing import get_model_map

    return set(get_model_map())


def placeholder_arn(logical_id: str, resource_type: str, attribute: str | None = None) -> str:
    service = resource_type.split("::")[1].lower()
    suffix = f"/{attribute}" if attribute else ""
    return f"arn:aws:{service}:{REGION}:{ACCOUNT}:deploy-local-removed/{logical_id}{suffix}"


def shim_template(template: dict, supported: set[str]) -> tuple[dict, ShimReport]:
    """A copy of ``template`` that moto's CloudFormation can create, and what changed.

    - Resources of a type moto's CloudFormation does not model (``supported``) are removed:
      moto would skip them anyway, and a Ref to one would resolve to nothing. A Ref or
      GetAtt to one becomes a placeholder ARN naming it; DependsOn on one is dropped, and
      an Output that needs one is dropped.
    - ``Ref`` on an ``AWS::Events::EventBus`` becomes ``Fn::GetAtt [bus, Name]``.
    """
    report = ShimReport()
    shimmed = copy.deepcopy(template)
    resources = shimmed.get("Resources", {})
    for logical_id, resource in list(resources.items()):
        if resource["Type"] not in supported:
            report.removed[logical_id] = resource["Type"]
            del resources[logical_id]
    buses = {k for k, r in resources.items() if r["Type"] == "AWS::Events::EventBus"}

    def rewrite(node: Any, where: str) -> Any:
        if isinstance(node, dict):
            if set(node) == {"Ref"} and node["Ref"] in report.removed:
                report.rewritten_refs.append(f"{where}: Ref {node['Ref']} -> placeholder ARN")
                return placeholder_arn(node["Ref"], report.removed[node["Ref"]])
            if set(node) == {"Ref"} and node["Ref"] in buses:
                report.rewritten_refs.append(f"{where}: Ref {node['Ref']} -> GetAtt Name")
                return {"Fn::GetAtt": [node["Ref"], "Name"]}
            if set(node) == {"Fn::GetAtt"} and node["Fn::GetAtt"][0] in report.removed:
                target, attribute = node["Fn::GetAtt"][0], node["Fn::GetAtt"][1]
                report.rewritten_refs.append(f"{where}: GetAtt {target}.{attribute} -> placeholder")
                return placeholder_arn(target, report.removed[target], attribute)
            return {k: rewrite(v, where) for k, v in node.items()}
        if isinstance(node, list):
            return [rewrite(v, where) for v in node]
        return node

    for logical_id, resource in resources.items():
        depends = resource.get("DependsOn")
        if isinstance(depends, str):
            depends = [depends]
        if depends:
            kept = [d for d in depends if d not in report.removed]
            if kept:
                resource["DependsOn"] = kept
            else:
                resource.pop("DependsOn")
        resources[logical_id] = rewrite(resource, logical_id)
    for name, output in list(shimmed.get("Outputs", {}).items()):
        if json_mentions(output, report.removed):
            report.dropped_outputs.append(name)
            del shimmed["Outputs"][name]
    return shimmed, report


def json_mentions(node: Any, logical_ids: Sequence[str] | dict) -> bool:
    text = json.dumps(node)
    return any(f'"{logical_id}"' in text for logical_id in logical_ids)


def shim_assembly(cdk_out: Path, target: Path) -> dict[str, ShimReport]:
    """Copy the cloud assembly to ``target``: templates shimmed, staged assets linked."""
    supported = moto_cloudformation_types()
    target.mkdir(parents=True)
    reports: dict[str, ShimReport] = {}
    for path in cdk_out.iterdir():
        if path.name.endswith(".template.json"):
            shimmed, report = shim_template(json.loads(path.read_text()), supported)
            (target / path.name).write_text(json.dumps(shimmed, indent=1))
            reports[path.name.removesuffix(".template.json")] = report
        elif path.is_dir():
            os.symlink(path.resolve(), target / path.name)
        else:
            shutil.copy2(path, target / path.name)
    return reports


# --------------------------------------------------------------------------- the CLI
def cdk_cli() -> str:
    cli = REPO / "node_modules" / ".bin" / "cdk"
    if not cli.exists():
        raise SystemExit("the pinned CDK CLI is missing: run `make setup`")
    return str(cli)


def run_cli(args: Sequence[str], env: dict[str, str], cwd: Path, log: Path) -> float:
    """Run the CDK CLI; its output goes to ``log``. Returns the seconds it took."""
    started = time.perf_counter()
    with log.open("a") as out:
        out.write(f"\n$ cdk {' '.join(args)}\n")
        out.flush()
        result = subprocess.run(
            [cdk_cli(), *args], env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
            timeout=900, check=False,
        )  # fmt: skip
    if result.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-40:])
        raise RuntimeError(f"`cdk {args[0]}` failed (exit {result.returncode}):\n{tail}")
    return time.perf_counter() - started


# --------------------------------------------------------------------------- main
def deploy_local(cdk_out: Path, log: Path | None = None) -> dict[str, Any]:
    """Bootstrap, deploy and check; returns the report (see the module docstring)."""
    import moto

    from scripts import deployed_checks

    if moto.__version__ != MOTO_VERSION:
        raise SystemExit(
            f"moto {moto.__version__} is installed; the deploy shim was checked against "
            f"{MOTO_VERSION}. Re-check the shim and KNOWN_PROPERTY_GAPS in "
            "scripts/deploy_local.py, then bump MOTO_VERSION."
        )
    if not (cdk_out / "manifest.json").exists():
        raise SystemExit(f"{cdk_out} has no cloud assembly: run `make synth` first")
    from constructs_lib.local_engine.service_models import shared_service_models

    started = time.perf_counter()
    # One botocore loader for every session: moto's server makes a session per backend it
    # creates (each region list parses endpoints.json), and the checks make theirs; each
    # parsed the same JSON models again, a quarter of this process's CPU.
    with (
        shared_service_models(),
        tempfile.TemporaryDirectory(prefix="deploy-local-") as tmp,
        quiet_moto_server() as endpoint,
    ):
        work = Path(tmp)
        log = log or work / "cdk.log"
        assembly = work / "cdk.out"
        shims = shim_assembly(cdk_out, assembly)
        env = aws_env(endpoint)
        timings: dict[str, Any] = {
            "bootstrap_seconds": run_cli(
                ["bootstrap", f"aws://{ACCOUNT}/{REGION}", "--no-notices"], env, work, log
            ),
            "deploy_seconds": run_cli(
                [
                    "deploy",
                    "--all",
                    "--app",
                    str(assembly),
                    "--method=direct",
                    "--require-approval",
                    "never",
                    "--progress",
                    "events",
                    "--no-notices",
                ],
                env,
                work,
                log,
            ),  # fmt: skip
        }
        digests = deployed_checks.FileDigests()
        checked = deployed_checks.check_assembly(assembly, shims, env, KNOWN_PROPERTY_GAPS, digests)
        if not checked["failures"]:
            checked["self_test"] = self_test(assembly, shims, env, digests)
            checked["failures"] += checked["self_test"]["missed"]
    return {
        "wall_seconds": time.perf_counter() - started,
        **timings,
        "shim": {name: vars(report) for name, report in shims.items()},
        **checked,
    }


def self_test(
    assembly: Path,
    shims: dict[str, ShimReport],
    env: dict[str, str],
    digests: FileDigests | None = None,
) -> dict:
    """Break two deployed things the checks must catch, and check again.

    One function's environment variable is changed and one rule loses a target, through
    the AWS APIs; a check that then still passes proves nothing, so each miss is a failure.
    ``digests``: the file CRCs the first check computed (default: none, read again).
    """
    import boto3

    from scripts import deployed_checks

    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
    )
    endpoint = env["AWS_ENDPOINT_URL"]
    cfn = session.client("cloudformation", endpoint_url=endpoint)
    lambda_ = session.client("lambda", endpoint_url=endpoint)
    events = session.client("events", endpoint_url=endpoint)
    expected: list[str] = []
    for name in shims:
        rows = cfn.describe_stack_resources(StackName=name)["StackResources"]
        by_type: dict[str, list[dict]] = {}
        for row in rows:
            by_type.setdefault(row.get("ResourceType", ""), []).append(row)
        for row in by_type.get("AWS::Lambda::Function", []):
            config = lambda_.get_function_configuration(FunctionName=row["PhysicalResourceId"])
            variables = config.get("Environment", {}).get("Variables", {})
            # A variable that names a resource the shim removed holds a placeholder, which
            # the checks rightly skip; break one they compare.
            comparable = sorted(
                name for name, value in variables.items()
                if deployed_checks.PLACEHOLDER not in value
            )  # fmt: skip
            if comparable:
                var = comparable[0]
                lambda_.update_function_configuration(
                    FunctionName=row["PhysicalResourceId"],
                    Environment={"Variables": {**variables, var: "tampered"}},
                )
                expected.append(f"{row['LogicalResourceId']}.Environment.{var}")
                break
        for row in by_type.get("AWS::Events::Rule", []):
            bus, _, rule = row["PhysicalResourceId"].rpartition("|")
            template = json.loads((assembly / f"{name}.template.json").read_text())
            props = template["Resources"][row["LogicalResourceId"]]["Properties"]
            if not props.get("Targets"):
                continue
            kwargs = {"EventBusName": bus} if bus else {}
            if "EventBusName" in props:
                stack = deployed_checks.DeployedStack(session, endpoint, name, template)
                kwargs = {"EventBusName": stack.resolve(props["EventBusName"])}
            events.remove_targets(Rule=rule, Ids=[props["Targets"][0]["Id"]], **kwargs)
            expected.append(f"Rule {row['LogicalResourceId']}: targets")
            break
    again = deployed_checks.check_assembly(assembly, shims, env, KNOWN_PROPERTY_GAPS, digests)
    caught = [e for e in expected if any(e in failure for failure in again["failures"])]
    missed = [f"self-test: breaking {e} went unnoticed" for e in expected if e not in caught]
    return {"broken": expected, "caught": caught, "missed": missed}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cdk-out", type=Path, default=REPO / "cdk.out")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--log", type=Path, help="keep the CDK CLI's output in this file")
    args = parser.parse_args(argv)
    report = deploy_local(args.cdk_out.resolve(), args.log)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        from scripts.deployed_checks import print_report

        print_report(report)
    return 0 if not report["failures"] else 1


if __name__ == "__main__":
    sys.exit(main())
