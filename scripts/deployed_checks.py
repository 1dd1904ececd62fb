"""Check, through the AWS APIs, that a deployed stack is what its template in ``cdk.out`` says.

Driven by the template, not by today's resources: every resource is looked up by its type,
and each intrinsic (``Ref``, ``Fn::GetAtt``, ``Fn::Join``, ``Fn::Sub``, ``Fn::Select``) is
evaluated against what was deployed, so a new queue, mapping or rule is checked without a
change here. Used by :mod:`scripts.deploy_local` against moto; nothing here is moto-specific
except the endpoint.

Per resource the outcome is one of:

- ``created``: the resource's API shows it (and its wiring matched, see below);
- ``created, no check for this type``: CloudFormation reports it; no API probe is written;
- ``skipped by the emulator``: removed by the shim (a type moto's CloudFormation cannot
  create), or reported CREATE_COMPLETE but absent from the service's API;
- a failure: missing from the stack, or a property differs from the template.

Wiring compared with the template: Lambda code (``CodeSha256`` = sha256 of the published zip,
whose files are exactly the staged asset's), handler, runtime, memory, timeout, architecture,
role, environment (each value resolved), DLQ; rule pattern, state, bus and every target's
ARN, retry policy, DLQ and input; event source mappings (source, batch size, response types,
maximum concurrency); queue visibility, retention and redrive; table keys and TTL; log group
retention; inline policies' actions.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import zipfile
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

PLACEHOLDER = "deploy-local-removed"
PSEUDO = {"AWS::Partition": "aws", "AWS::URLSuffix": "amazonaws.com", "AWS::NoValue": None}


class Unresolvable(Exception):
    """An intrinsic this checker cannot evaluate against the deployed stack."""


@dataclass
class StackCheck:
    """The outcome for one stack."""

    created: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # "Type Id" -> why
    failures: list[str] = field(default_factory=list)
    checks: int = 0  # properties compared
    not_kept: list[str] = field(default_factory=list)  # properties the emulator drops
    functions: dict[str, dict[str, Any]] = field(default_factory=dict)


class FileDigests:
    """The CRC-32 of each file of a published zip and of a staged asset directory, each
    computed once per run.

    Classify and ClassifyBatch ship the same 62 MB asset (8,000 files) under the same key, and
    the self-test checks the whole assembly a second time: the same directory was read and
    checksummed four times, and the same zip's directory parsed four times, a fifth of the
    local deploy's CPU. A zip is known by the sha256 of the bytes downloaded (so an object
    that changed is read again); a directory by its path, since the staged assets are this
    run's input and nothing writes them while it runs.
    """

    def __init__(self) -> None:
        self._zips: dict[str, dict[str, int]] = {}
        self._directories: dict[Path, dict[str, int]] = {}

    def of_zip(self, body: bytes, sha256: str) -> dict[str, int]:
        """``{name: CRC-32}`` of the files in ``body``, whose sha256 is ``sha256``."""
        if sha256 not in self._zips:
            self._zips[sha256] = zip_crcs(body)
        return self._zips[sha256]

    def of_directory(self, directory: Path) -> dict[str, int]:
        """``{relative posix path: CRC-32}`` of the files under ``directory``."""
        if directory not in self._directories:
            self._directories[directory] = directory_crcs(directory)
        return self._directories[directory]


class DeployedStack:
    """One deployed stack: its (shimmed) template, physical ids and API clients."""

    def __init__(self, session: boto3.session.Session, endpoint: str, name: str, template: dict):
        self.session = session
        self.endpoint = endpoint
        self.name = name
        self.template = template
        self.resources: dict[str, dict] = template.get("Resources", {})
        self._clients: dict[str, Any] = {}
        cfn = self.client("cloudformation")
        stack = cfn.describe_stacks(StackName=name)["Stacks"][0]
        self.stack_id = stack["StackId"]
        self.account = self.stack_id.split(":")[4]
        self.region = self.stack_id.split(":")[3]
        self.status = stack["StackStatus"]
        self.physical: dict[str, str] = {}
        self.reported: dict[str, str] = {}
        for row in cfn.describe_stack_resources(StackName=name)["StackResources"]:
            if row.get("LogicalResourceId"):
                self.physical[row["LogicalResourceId"]] = row.get("PhysicalResourceId", "")
                self.reported[row["LogicalResourceId"]] = row.get("ResourceStatus", "")
        for logical_id, physical in self.physical.items():
            name = self.resources.get(logical_id, {}).get("Properties", {}).get("Name")
            if not physical and isinstance(name, str):
                # moto reports no physical id for some types (an event bus); its name is it.
                self.physical[logical_id] = name

    def client(self, service: str) -> Any:
        if service not in self._clients:
            # One attempt: an emulator's 500 is reported as such, not retried with backoff.
            config = Config(retries={"max_attempts": 1, "mode": "standard"})
            self._clients[service] = self.session.client(
                service, endpoint_url=self.endpoint, config=config
            )
        return self._clients[service]

    # ------------------------------------------------------------------ intrinsics
    def resolve(self, node: Any) -> Any:
        """The concrete value of a template value, evaluated against the deployed stack."""
        if isinstance(node, list):
            return [self.resolve(v) for v in node]
        if not isinstance(node, dict):
            return node
        if len(node) != 1:
            return {k: self.resolve(v) for k, v in node.items()}
        ((key, arg),) = node.items()
        if key == "Ref":
            return self.ref(arg)
        if key == "Fn::GetAtt":
            target, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
            return self.get_att(target, attribute)
        if key == "Fn::Join":
            return arg[0].join(str(self.resolve(v)) for v in self.resolve(arg[1]))
        if key == "Fn::Select":
            return self.resolve(arg[1])[int(self.resolve(arg[0]))]
        if key == "Fn::Split":
            return str(self.resolve(arg[1])).split(arg[0])
        if key == "Fn::Sub":
            text, names = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])

            def substitute(match: re.Match) -> str:
                name = match.group(1)
                if name in names:
                    return str(self.resolve(names[name]))
                if "." in name and not name.startswith("AWS::"):
                    return str(self.get_att(*name.split(".", 1)))
                return str(self.ref(name))

            return re.sub(r"\$\{([^}!]+)\}", substitute, text)
        if key.startswith("Fn::"):
            raise Unresolvable(f"{key} is not evaluated")
        return {key: self.resolve(arg)}

    def ref(self, name: str) -> Any:
        if name in PSEUDO:
            return PSEUDO[name]
        if name == "AWS::Region":
            return self.region
        if name == "AWS::AccountId":
            return self.account
        if name == "AWS::StackName":
            return self.name
        if name == "AWS::StackId":
            return self.stack_id
        if name in self.template.get("Parameters", {}):
            raise Unresolvable(f"parameter {name}")
        if name not in self.physical:
            raise Unresolvable(f"Ref {name}: not in the stack")
        return self.physical[name]

    def get_att(self, logical_id: str, attribute: str) -> Any:
        resource = self.resources.get(logical_id)
        if resource is None or logical_id not in self.physical:
            raise Unresolvable(f"GetAtt {logical_id}.{attribute}: not in the stack")
        getter = ATTRIBUTES.get((resource["Type"], attribute))
        if getter is None:
            raise Unresolvable(f"GetAtt {resource['Type']}.{attribute} is not evaluated")
        return getter(self, self.physical[logical_id])


# --------------------------------------------------------------------------- attributes
def _queue_attr(name: str) -> Callable[[DeployedStack, str], Any]:
    def get(stack: DeployedStack, url: str) -> Any:
        attrs = stack.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
        return attrs["Attributes"][name]

    return get


def _function_arn(stack: DeployedStack, name: str) -> str:
    return stack.client("lambda").get_function(FunctionName=name)["Configuration"]["FunctionArn"]


def _role_arn(stack: DeployedStack, name: str) -> str:
    return stack.client("iam").get_role(RoleName=name)["Role"]["Arn"]


def _table_arn(stack: DeployedStack, name: str) -> str:
    return stack.client("dynamodb").describe_table(TableName=name)["Table"]["TableArn"]


def _bus(stack: DeployedStack, name: str) -> dict:
    return stack.client("events").describe_event_bus(Name=name)


def _rule_arn(stack: DeployedStack, name: str) -> str:
    bus, _, rule = name.rpartition("|")
    kwargs = {"EventBusName": bus} if bus else {}
    return stack.client("events").describe_rule(Name=rule, **kwargs)["Arn"]


def _log_group_arn(stack: DeployedStack, name: str) -> str:
    groups = stack.client("logs").describe_log_groups(logGroupNamePrefix=name)["logGroups"]
    return next(g["arn"] for g in groups if g["logGroupName"] == name)


def _key_arn(stack: DeployedStack, key_id: str) -> str:
    return stack.client("kms").describe_key(KeyId=key_id)["KeyMetadata"]["Arn"]


ATTRIBUTES: dict[tuple[str, str], Callable[[DeployedStack, str], Any]] = {
    ("AWS::SQS::Queue", "Arn"): _queue_attr("QueueArn"),
    ("AWS::SQS::Queue", "QueueName"): lambda s, url: url.rstrip("/").rsplit("/", 1)[-1],
    ("AWS::SQS::Queue", "QueueUrl"): lambda s, url: url,
    ("AWS::Lambda::Function", "Arn"): _function_arn,
    ("AWS::IAM::Role", "Arn"): _role_arn,
    ("AWS::DynamoDB::Table", "Arn"): _table_arn,
    ("AWS::Events::EventBus", "Arn"): lambda s, name: _bus(s, name)["Arn"],
    ("AWS::Events::EventBus", "Name"): lambda s, name: _bus(s, name)["Name"],
    ("AWS::Events::Rule", "Arn"): _rule_arn,
    ("AWS::Logs::LogGroup", "Arn"): _log_group_arn,
    ("AWS::KMS::Key", "Arn"): _key_arn,
    ("AWS::S3::Bucket", "Arn"): lambda s, name: f"arn:aws:s3:::{name}",
    ("AWS::SNS::Topic", "TopicArn"): lambda s, arn: arn,
}


# --------------------------------------------------------------------------- comparisons
class Checker:
    """Compares one stack's resources with its template; collects the outcome."""

    def __init__(
        self,
        stack: DeployedStack,
        assembly: Path,
        removed: Mapping[str, str],
        known_gaps: Mapping[tuple[str, str], str],
        digests: FileDigests | None = None,
    ):
        self.stack = stack
        self.assembly = assembly
        self.removed = removed
        self.known_gaps = known_gaps
        self.digests = digests or FileDigests()
        self.result = StackCheck()

    def differs(self, resource_type: str, prop: str, where: str, message: str) -> None:
        """A mismatch: a failure, unless the emulator is known to drop this property."""
        gap = self.known_gaps.get((resource_type, prop))
        if gap:
            self.result.not_kept.append(f"{where}: {gap}")
        else:
            self.result.failures.append(f"{where}: {message}")

    def expect(self, where: str, template_value: Any, actual: Any, normalise: Any = None) -> None:
        """One property: the resolved template value must equal what the API returns."""
        try:
            expected = self.stack.resolve(template_value)
        except Unresolvable as why:
            self.result.not_kept.append(f"{where}: not compared ({why})")
            return
        except ClientError as error:
            self.result.failures.append(f"{where}: resolving the template value failed: {error}")
            return
        if normalise:
            expected, actual = normalise(expected), normalise(actual)
        self.result.checks += 1
        if isinstance(expected, str) and PLACEHOLDER in expected:
            return  # a reference to a resource the emulator cannot create; said in the report
        if actual is None:
            self.result.not_kept.append(f"{where}: the emulator does not return it")
        elif expected != actual:
            self.result.failures.append(f"{where}: template {expected!r} != deployed {actual!r}")

    def run(self) -> StackCheck:
        for logical_id, resource_type in self.removed.items():
            self.result.skipped[f"{resource_type} {logical_id}"] = "removed by the shim"
        for logical_id, resource in self.stack.resources.items():
            label = f"{resource['Type']} {logical_id}"
            if logical_id not in self.stack.physical:
                self.result.failures.append(f"{label}: not in the deployed stack")
                continue
            probe = PROBES.get(resource["Type"])
            if probe is None:
                self.result.unchecked.append(label)
                continue
            try:
                present = probe(self, logical_id, resource.get("Properties", {}))
            except ClientError as error:
                code = error.response.get("Error", {}).get("Code", "")
                status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
                if status >= 500:
                    self.result.skipped[label] = (
                        f"created, but its API fails in the emulator ({code})"
                    )
                    continue
                if "NotFound" in code or "NonExistent" in code or code in ("NoSuchEntity",):
                    present = False
                else:
                    self.result.failures.append(f"{label}: {error}")
                    continue
            if present:
                self.result.created.append(label)
            else:
                self.result.skipped[label] = "reported CREATE_COMPLETE, absent from its API"
        return self.result


def check_function(checker: Checker, logical_id: str, props: dict) -> bool:
    stack = checker.stack
    name = stack.physical[logical_id]
    config = stack.client("lambda").get_function(FunctionName=name)["Configuration"]
    where = f"Lambda {logical_id}"
    for prop, key in (
        ("Handler", "Handler"),
        ("Runtime", "Runtime"),
        ("MemorySize", "MemorySize"),
        ("Timeout", "Timeout"),
        ("Architectures", "Architectures"),
        ("Role", "Role"),
    ):
        if prop in props:
            checker.expect(f"{where}.{prop}", props[prop], config.get(key))
    if "DeadLetterConfig" in props:
        checker.expect(
            f"{where}.DeadLetterConfig",
            props["DeadLetterConfig"].get("TargetArn"),
            config.get("DeadLetterConfig", {}).get("TargetArn"),
        )
    variables = config.get("Environment", {}).get("Variables", {})
    expected_vars = props.get("Environment", {}).get("Variables", {})
    if set(variables) != set(expected_vars):
        checker.result.failures.append(
            f"{where}.Environment: names differ: {sorted(set(variables) ^ set(expected_vars))}"
        )
    for var, value in expected_vars.items():
        checker.expect(f"{where}.Environment.{var}", value, variables.get(var))
    checker.result.functions[logical_id] = check_code(checker, logical_id, props, config)
    return True


def check_code(checker: Checker, logical_id: str, props: dict, config: dict) -> dict[str, Any]:
    """CodeSha256 = sha256 of the published object, whose files are the staged asset's."""
    stack = checker.stack
    code = props.get("Code", {})
    out: dict[str, Any] = {"code_sha256": config.get("CodeSha256")}
    if "S3Key" not in code:
        return out
    bucket, key = stack.resolve(code["S3Bucket"]), stack.resolve(code["S3Key"])
    body = stack.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    published = base64.b64encode(hashlib.sha256(body).digest()).decode()
    out.update(object=f"s3://{bucket}/{key}", zipped_bytes=len(body))
    checker.result.checks += 1
    if config.get("CodeSha256") != published:
        checker.result.failures.append(
            f"Lambda {logical_id}: CodeSha256 {config.get('CodeSha256')} != sha256 of "
            f"s3://{bucket}/{key} ({published})"
        )
    asset = stack.resources[logical_id].get("Metadata", {}).get("aws:asset:path")
    if asset:
        differences = zip_matches_directory(
            body, (checker.assembly / asset).resolve(), checker.digests, published
        )
        out.update(asset=asset, files_differing=len(differences))
        checker.result.checks += 1
        if differences:
            checker.result.failures.append(
                f"Lambda {logical_id}: the published zip is not the staged {asset}: "
                f"{differences[:5]}"
            )
    return out


def zip_matches_directory(
    body: bytes, directory: Path, digests: FileDigests | None = None, sha256: str = ""
) -> list[str]:
    """Files that differ between a zip and a directory (names and CRC-32 of contents).

    :param digests: where the CRCs of this run are kept (default: a new, empty one).
    :param sha256: the zip's sha256, which keys it in ``digests`` (needed with ``digests``).
    """
    digests = digests or FileDigests()
    in_zip, on_disk = digests.of_zip(body, sha256), digests.of_directory(directory)
    names = set(in_zip) | set(on_disk)
    return sorted(n for n in names if in_zip.get(n) != on_disk.get(n))


def zip_crcs(body: bytes) -> dict[str, int]:
    """``{name: CRC-32}`` of each file in the zip ``body``, as its central directory says."""
    with zipfile.ZipFile(BytesIO(body)) as archive:
        return {i.filename: i.CRC for i in archive.infolist() if not i.is_dir()}


def directory_crcs(directory: Path) -> dict[str, int]:
    """``{posix path relative to directory: CRC-32}`` of each file under ``directory``.

    Symlinked directories are not followed, symlinked files are read (as ``Path.rglob`` and
    ``is_file`` would); ``os.walk`` and plain strings, as pathlib cost more than the CRCs.
    """
    found = {}
    root = os.fspath(directory)
    for parent, _, names in os.walk(root):
        relative = os.path.relpath(parent, root)
        prefix = "" if relative == os.curdir else relative.replace(os.sep, "/") + "/"
        for name in names:
            path = os.path.join(parent, name)
            if os.path.isfile(path):
                with open(path, "rb") as file:
                    found[prefix + name] = zlib.crc32(file.read())
    return found


def check_rule(checker: Checker, logical_id: str, props: dict) -> bool:
    stack = checker.stack
    events = stack.client("events")
    physical = stack.physical[logical_id]
    bus_from_id, _, name = physical.rpartition("|")
    bus = stack.resolve(props["EventBusName"]) if "EventBusName" in props else bus_from_id
    kwargs = {"EventBusName": bus} if bus else {}
    rule = events.describe_rule(Name=name, **kwargs)
    where = f"Rule {logical_id}"
    if "EventPattern" in props:
        checker.expect(
            f"{where}.EventPattern",
            props["EventPattern"],
            json.loads(rule["EventPattern"]) if rule.get("EventPattern") else None,
        )
    for prop in ("ScheduleExpression", "State"):
        if prop in props:
            checker.expect(f"{where}.{prop}", props[prop], rule.get(prop))
    targets = {t["Id"]: t for t in events.list_targets_by_rule(Rule=name, **kwargs)["Targets"]}
    expected = {t["Id"]: t for t in props.get("Targets", [])}
    if set(targets) != set(expected):
        checker.result.failures.append(f"{where}: targets {sorted(targets)} != {sorted(expected)}")
    for target_id, target in expected.items():
        actual = targets.get(target_id, {})
        for prop in (
            "Arn",
            "RoleArn",
            "Input",
            "InputPath",
            "RetryPolicy",
            "DeadLetterConfig",
            "SqsParameters",
        ):
            if prop in target:
                checker.expect(
                    f"{where}.Targets[{target_id}].{prop}", target[prop], actual.get(prop)
                )
    return True


def check_event_source_mapping(checker: Checker, logical_id: str, props: dict) -> bool:
    stack = checker.stack
    uuid = stack.physical[logical_id]
    mapping = stack.client("lambda").get_event_source_mapping(UUID=uuid)
    where = f"EventSourceMapping {logical_id}"
    checker.expect(
        f"{where}.EventSourceArn", props.get("EventSourceArn"), mapping.get("EventSourceArn")
    )
    function = stack.resolve(props["FunctionName"])
    checker.result.checks += 1
    if (
        not str(mapping.get("FunctionArn", "")).endswith(f":function:{function}")
        and mapping.get("FunctionArn") != function
    ):
        checker.result.failures.append(
            f"{where}.FunctionName: {function!r} is not {mapping.get('FunctionArn')!r}"
        )
    for prop in ("BatchSize", "FunctionResponseTypes", "Enabled", "MaximumBatchingWindowInSeconds"):
        if prop in props:
            checker.expect(f"{where}.{prop}", props[prop], mapping.get(prop))
    if "ScalingConfig" in props:
        checker.expect(
            f"{where}.ScalingConfig", props["ScalingConfig"], mapping.get("ScalingConfig")
        )
    return True


def check_queue(checker: Checker, logical_id: str, props: dict) -> bool:
    stack = checker.stack
    url = stack.physical[logical_id]
    attrs = stack.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["All"])[
        "Attributes"
    ]
    where = f"Queue {logical_id}"
    for prop in (
        "VisibilityTimeout",
        "MessageRetentionPeriod",
        "DelaySeconds",
        "ReceiveMessageWaitTimeSeconds",
        "FifoQueue",
    ):
        if prop in props:
            checker.expect(f"{where}.{prop}", props[prop], attrs.get(prop), normalise=str)
    if "RedrivePolicy" in props:
        actual = json.loads(attrs["RedrivePolicy"]) if "RedrivePolicy" in attrs else None
        checker.expect(
            f"{where}.RedrivePolicy",
            props["RedrivePolicy"],
            actual,
            normalise=lambda v: v and {k: str(x) for k, x in v.items()},
        )
    return True


def check_table(checker: Checker, logical_id: str, props: dict) -> bool:
    stack = checker.stack
    name = stack.physical[logical_id]
    table = stack.client("dynamodb").describe_table(TableName=name)["Table"]
    where = f"Table {logical_id}"
    checker.expect(f"{where}.KeySchema", props.get("KeySchema"), table.get("KeySchema"))
    if "TimeToLiveSpecification" in props:
        ttl = stack.client("dynamodb").describe_time_to_live(TableName=name)
        description = ttl.get("TimeToLiveDescription", {})
        expected = stack.resolve(props["TimeToLiveSpecification"])
        actual = {
            "AttributeName": description.get("AttributeName"),
            "Enabled": description.get("TimeToLiveStatus") == "ENABLED",
        }
        checker.result.checks += 1
        if actual != {
            "AttributeName": expected.get("AttributeName"),
            "Enabled": expected["Enabled"],
        }:
            checker.differs(
                "AWS::DynamoDB::Table",
                "TimeToLiveSpecification",
                f"{where}.TimeToLiveSpecification",
                f"template {expected} != deployed {actual}",
            )
    return True


def check_log_group(checker: Checker, logical_id: str, props: dict) -> bool:
    name = checker.stack.physical[logical_id]
    groups = checker.stack.client("logs").describe_log_groups(logGroupNamePrefix=name)
    group = next((g for g in groups["logGroups"] if g["logGroupName"] == name), None)
    if group and "RetentionInDays" in props:
        checker.expect(
            f"LogGroup {logical_id}.RetentionInDays",
            props["RetentionInDays"],
            group.get("retentionInDays"),
        )
    return group is not None


def check_policy(checker: Checker, logical_id: str, props: dict) -> bool:
    stack = checker.stack
    iam = stack.client("iam")
    expected_actions = sorted(
        {
            action
            for statement in props["PolicyDocument"]["Statement"]
            for action in (
                [statement["Action"]]
                if isinstance(statement["Action"], str)
                else statement["Action"]
            )
        }
    )
    for role in props.get("Roles", []):
        role_name = stack.resolve(role)
        document = iam.get_role_policy(
            RoleName=role_name, PolicyName=stack.resolve(props["PolicyName"])
        )["PolicyDocument"]
        if isinstance(document, str):
            document = json.loads(document)
        actions = sorted(
            {
                action
                for statement in document["Statement"]
                for action in (
                    [statement["Action"]]
                    if isinstance(statement["Action"], str)
                    else statement["Action"]
                )
            }
        )
        checker.result.checks += 1
        if actions != expected_actions:
            checker.result.failures.append(
                f"Policy {logical_id} on {role_name}: actions {actions} != {expected_actions}"
            )
    return True


def _exists(call: Callable[[DeployedStack, str], Any]) -> Callable[[Checker, str, dict], bool]:
    def probe(checker: Checker, logical_id: str, props: dict) -> bool:
        call(checker.stack, checker.stack.physical[logical_id])
        return True

    return probe


def check_permission(checker: Checker, logical_id: str, props: dict) -> bool:
    function = checker.stack.resolve(props["FunctionName"])
    try:
        policy = json.loads(
            checker.stack.client("lambda").get_policy(FunctionName=function)["Policy"]
        )
    except ClientError:
        return False
    principal = checker.stack.resolve(props.get("Principal"))
    return any(
        s.get("Principal", {}).get("Service") == principal or s.get("Principal") == principal
        for s in policy.get("Statement", [])
    )


def check_bucket(checker: Checker, logical_id: str, props: dict) -> bool:
    stack = checker.stack
    name = stack.physical[logical_id]
    s3 = stack.client("s3")
    s3.head_bucket(Bucket=name)
    if (
        "NotificationConfiguration" in props
        and "EventBridgeConfiguration" in props["NotificationConfiguration"]
    ):
        notification = s3.get_bucket_notification_configuration(Bucket=name)
        checker.result.checks += 1
        if "EventBridgeConfiguration" not in notification:
            checker.differs(
                "AWS::S3::Bucket",
                "NotificationConfiguration",
                f"Bucket {logical_id}.NotificationConfiguration",
                "EventBridge notifications are off",
            )
    return True


PROBES: dict[str, Callable[[Checker, str, dict], bool]] = {
    "AWS::Lambda::Function": check_function,
    "AWS::Events::Rule": check_rule,
    "AWS::Lambda::EventSourceMapping": check_event_source_mapping,
    "AWS::SQS::Queue": check_queue,
    "AWS::DynamoDB::Table": check_table,
    "AWS::Logs::LogGroup": check_log_group,
    "AWS::IAM::Policy": check_policy,
    "AWS::IAM::Role": _exists(lambda s, name: s.client("iam").get_role(RoleName=name)),
    "AWS::Events::EventBus": _exists(_bus),
    "AWS::KMS::Key": _exists(_key_arn),
    "AWS::SNS::Topic": _exists(lambda s, arn: s.client("sns").get_topic_attributes(TopicArn=arn)),
    "AWS::S3::Bucket": check_bucket,
    "AWS::Lambda::Permission": check_permission,
}


# --------------------------------------------------------------------------- entry points
def check_assembly(
    assembly: Path,
    shims: Mapping[str, Any],
    env: Mapping[str, str],
    known_gaps: Mapping[tuple[str, str], str] | None = None,
    digests: FileDigests | None = None,
) -> dict[str, Any]:
    """Check every stack of the deployed assembly.

    :param shims: stack name -> ShimReport (what the shim removed).
    :param known_gaps: (resource type, property) -> why the emulator does not keep it; a
        mismatch there is reported as "not kept", not as a failure. Default: none.
    :param digests: the file CRCs already computed in this run (default: a new, empty one,
        shared by this check's functions).
    """
    digests = digests or FileDigests()
    session = boto3.session.Session(
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_REGION"],
    )
    stacks: dict[str, Any] = {}
    failures: list[str] = []
    for template_path in sorted(assembly.glob("*.template.json")):
        name = template_path.name.removesuffix(".template.json")
        stack = DeployedStack(
            session, env["AWS_ENDPOINT_URL"], name, json.loads(template_path.read_text())
        )
        removed = shims[name].removed if name in shims else {}
        result = Checker(stack, assembly, removed, known_gaps or {}, digests).run()
        if stack.status != "CREATE_COMPLETE":
            result.failures.insert(0, f"stack status {stack.status}")
        stacks[name] = vars(result)
        failures += [f"{name}: {f}" for f in result.failures]
    return {"stacks": stacks, "failures": failures}


def print_report(report: Mapping[str, Any]) -> None:
    print(
        f"deploy-local: wall {report['wall_seconds']:.1f} s (cdk bootstrap "
        f"{report['bootstrap_seconds']:.1f} s, cdk deploy {report['deploy_seconds']:.1f} s, "
        "moto on 127.0.0.1)"
    )
    for name, result in report["stacks"].items():
        total = len(result["created"]) + len(result["unchecked"]) + len(result["skipped"])
        print(f"\n{name}: {total} resources in the template")
        print(f"  created and checked through the API: {len(result['created'])}")
        print(f"  created, no API check for the type:  {len(result['unchecked'])}")
        print(f"  skipped by the emulator:             {len(result['skipped'])}")
        by_type: dict[str, int] = {}
        for label, why in result["skipped"].items():
            key = f"{label.split()[0]} ({why})"
            by_type[key] = by_type.get(key, 0) + 1
        for key, count in sorted(by_type.items()):
            print(f"    {count} x {key}")
        print(f"  properties compared with the template: {result['checks']}")
        for note in result["not_kept"]:
            print(f"    not compared: {note}")
        for logical_id, code in result["functions"].items():
            print(
                f"  {logical_id}: CodeSha256 {code.get('code_sha256')} = published zip "
                f"({code.get('zipped_bytes', 0) / 1e6:.2f} MB), "
                f"{'same files as' if not code.get('files_differing') else 'DIFFERS from'} "
                f"{code.get('asset', '-')}"
            )
    self_test = report.get("self_test")
    if self_test:
        print(
            f"\nself-test: broke {len(self_test['broken'])} deployed things through the APIs "
            f"({', '.join(self_test['broken'])}); the checks caught {len(self_test['caught'])}"
        )
    shim = report.get("shim", {})
    for name, changes in shim.items():
        for line in changes["rewritten_refs"]:
            print(f"  shim {name}: {line}")
        for output in changes["dropped_outputs"]:
            print(f"  shim {name}: output {output} dropped (needs a removed resource)")
    if report["failures"]:
        print(f"\nFAILED: {len(report['failures'])} mismatch(es)")
        for failure in report["failures"]:
            print(f"  {failure}")
    else:
        print("\nOK: every checked resource matches its template")
