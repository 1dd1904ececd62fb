"""The stack's stateful resources created in moto (in-process ``mock_aws``), named after the
template, plus the local name of every other resource for intrinsic resolution.

In-process moto rather than ``ThreadedMotoServer``: the handlers run in this process anyway,
so there is no port, no server thread and no HTTP hop per AWS call; clients reach moto
through botocore's event hooks. Nothing ever leaves the machine.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
import botocore
import botocore.handlers

from .assembly import CloudAssembly, ResourceSpec
from .intrinsics import LOCAL_ACCOUNT, LOCAL_REGION, PhysicalResource, Resolver
from .moto_fixes import atomic_dynamodb_writes
from .moto_speedups import install as cache_moto_parses
from .service_models import shared_service_models

# The template property that names each resource type, when the stack sets one.
_NAME_PROPERTIES = {
    "AWS::S3::Bucket": "BucketName",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::SQS::Queue": "QueueName",
    "AWS::Events::EventBus": "Name",
    "AWS::SNS::Topic": "TopicName",
    "AWS::Lambda::Function": "FunctionName",
    "AWS::Events::Rule": "Name",
    "AWS::SecretsManager::Secret": "Name",
    "AWS::EventsV2::EventBus": "Name",
}


@dataclass
class LocalAws:
    """The running emulation: a boto3 session on moto and every resource's local name."""

    session: boto3.session.Session
    physical: dict[str, PhysicalResource]
    resolver: Resolver

    def client(self, service: str) -> Any:
        """A boto3 client on moto."""
        return self.session.client(service)

    def ref(self, logical_id: str) -> str:
        """The local ``Ref`` value of a template resource."""
        return self.physical[logical_id].ref


def local_name(assembly: CloudAssembly, resource: ResourceSpec) -> str:
    """The template's name for the resource, else ``<stack>-<logical id>`` (lower-case for
    buckets, which S3 requires), like CloudFormation's generated names without the suffix."""
    prop = _NAME_PROPERTIES.get(resource.resource_type)
    explicit = resource.properties.get(prop) if prop else None
    if isinstance(explicit, str):
        return explicit
    name = f"{assembly.stack_name}-{resource.logical_id}"
    return name.lower() if resource.resource_type == "AWS::S3::Bucket" else name


def _arn(service: str, resource: str, region: str = LOCAL_REGION) -> str:
    return f"arn:aws:{service}:{region}:{LOCAL_ACCOUNT}:{resource}"


class _Clients:
    """One boto3 client per service, made at its first use: a client costs more to make
    than the calls that create a resource (tens of milliseconds, for each of a stack's
    tables, queues and buckets)."""

    def __init__(self, session: boto3.session.Session) -> None:
        self._session = session
        self._clients: dict[str, Any] = {}

    def client(self, service: str) -> Any:
        """The client of ``service``."""
        if service not in self._clients:
            self._clients[service] = self._session.client(service)
        return self._clients[service]


def _create(clients: _Clients, spec: ResourceSpec, name: str) -> PhysicalResource:
    kind, props = spec.resource_type, spec.properties
    if kind == "AWS::S3::Bucket":
        s3 = clients.client("s3")
        s3.create_bucket(Bucket=name)
        if (props.get("VersioningConfiguration") or {}).get("Status") == "Enabled":
            # Versioned buckets put a version-id in every event; the splitter pins reads to it.
            s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        return PhysicalResource(spec.logical_id, kind, name, {"Arn": f"arn:aws:s3:::{name}"})
    if kind == "AWS::DynamoDB::Table":
        dynamodb = clients.client("dynamodb")
        params: dict[str, Any] = {
            "TableName": name,
            "KeySchema": props["KeySchema"],
            "AttributeDefinitions": props["AttributeDefinitions"],
            "BillingMode": "PAY_PER_REQUEST",
        }
        if props.get("GlobalSecondaryIndexes"):
            params["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
        dynamodb.create_table(**params)
        ttl = props.get("TimeToLiveSpecification")
        if ttl and ttl.get("Enabled"):
            dynamodb.update_time_to_live(TableName=name, TimeToLiveSpecification=ttl)
        arn = _arn("dynamodb", f"table/{name}")
        return PhysicalResource(spec.logical_id, kind, name, {"Arn": arn})
    if kind == "AWS::SQS::Queue":
        attributes = {"FifoQueue": "true"} if props.get("FifoQueue") else {}
        url = clients.client("sqs").create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        attrs = {"Arn": _arn("sqs", name), "QueueName": name, "QueueUrl": url}
        return PhysicalResource(spec.logical_id, kind, url, attrs)
    if kind == "AWS::Events::EventBus":
        arn = clients.client("events").create_event_bus(Name=name)["EventBusArn"]
        return PhysicalResource(spec.logical_id, kind, name, {"Arn": arn, "Name": name})
    if kind == "AWS::SNS::Topic":
        # KmsMasterKeyId is left out: moto does not encrypt, and the key is not created.
        arn = clients.client("sns").create_topic(Name=name)["TopicArn"]
        return PhysicalResource(spec.logical_id, kind, arn, {"TopicName": name})
    raise AssertionError(f"not a created type: {kind}")


def secret_suffix(name: str) -> str:
    """Six characters standing in for the random suffix of a secret's ARN (stable per name)."""
    alphabet = string.ascii_letters + string.digits
    digest = hashlib.sha256(name.encode()).digest()
    return "".join(alphabet[b % len(alphabet)] for b in digest[:6])


def _placeholder(spec: ResourceSpec, name: str) -> PhysicalResource:
    """A resource the local run does not create (roles, keys, log groups, secrets, functions):
    it only needs a name and an ARN to resolve references; nothing calls it."""
    kind = spec.resource_type
    if kind == "AWS::Lambda::Function":
        arn = _arn("lambda", f"function:{name}")
    elif kind == "AWS::Events::Rule":
        arn = _arn("events", f"rule/{name}")
    elif kind == "AWS::EventsV2::EventBus":
        # v2 bus ARNs end in a 25-character id: event-busv2/<name>/<id>.
        bus_id = hashlib.sha256(name.encode()).hexdigest()[:25]
        arn = _arn("events", f"event-busv2/{name}/{bus_id}")
        attributes = {"Arn": arn, "EventBusArn": arn, "Name": name, "EventBusName": name}
        return PhysicalResource(spec.logical_id, kind, arn, attributes)
    elif kind == "AWS::SecretsManager::Secret":
        # A real secret's ARN ends in "-" and 6 random characters: a policy that names the
        # secret without them is denied at run time, so the local ARN has them too.
        arn = _arn("secretsmanager", f"secret:{name}-{secret_suffix(name)}")
        return PhysicalResource(spec.logical_id, kind, arn, {"Arn": arn, "Id": arn})
    else:
        service = kind.split("::")[1].lower() if kind.count("::") == 2 else "local"
        arn = _arn(service, name)
    return PhysicalResource(spec.logical_id, kind, name, {"Arn": arn})


#: The signing names of the services whose requests moto answers the same unsigned. Every
#: other request is signed as before: S3's (an unsigned request is anonymous to moto's S3,
#: as to S3, and a private object's GetObject is refused 403) and the local Bedrock
#: servers' (they check the SigV4 signature, as Bedrock does).
MOTO_SIGNING_NAMES = frozenset({"dynamodb", "events", "secretsmanager", "sns", "sqs"})


@contextmanager
def unsigned_moto_requests(*sessions: boto3.session.Session) -> Iterator[None]:
    """While open, requests to :data:`MOTO_SIGNING_NAMES` go without a SigV4 signature, from
    every session created meanwhile, boto3's default session and ``sessions``.

    Signing was about 5 % of a local run's CPU (canonical request, payload hash, HMACs), and
    nothing reads the signature: in-process moto checks none (it reads only the access key
    from the ``Authorization`` header, to pick the account, and, for a URL without one, the
    region; without the header it picks its default account and region, which are the
    run's :data:`LOCAL_ACCOUNT` and :data:`LOCAL_REGION`). Nor can it hide a bug of the
    handlers from AWS: they never sign or pick a signer themselves (botocore signs with the
    Lambda role's credentials, for the region and service of the request's URL, and the URL
    still carries both here). Registered first, ahead of botocore's own choice per operation.
    """

    def no_signature(signing_name: str = "", **_: Any) -> Any:
        return botocore.UNSIGNED if signing_name in MOTO_SIGNING_NAMES else None

    entry = ("choose-signer", no_signature, botocore.handlers.REGISTER_FIRST)
    botocore.handlers.BUILTIN_HANDLERS.append(entry)
    existing = [s for s in (boto3.DEFAULT_SESSION, *sessions) if s is not None]
    for session in existing:
        session.events.register_first("choose-signer", no_signature)
    try:
        yield
    finally:
        botocore.handlers.BUILTIN_HANDLERS.remove(entry)
        for session in existing:
            session.events.unregister("choose-signer", no_signature)


CREATED_TYPES = frozenset(
    {
        "AWS::S3::Bucket",
        "AWS::DynamoDB::Table",
        "AWS::SQS::Queue",
        "AWS::Events::EventBus",
        "AWS::SNS::Topic",
    }
)


@contextmanager
def local_aws(assembly: CloudAssembly, region: str = LOCAL_REGION) -> Iterator[LocalAws]:
    """Start moto, create the template's buckets, tables, queues, buses and topics, and yield
    the names. Everything is discarded when the context closes."""
    from moto import mock_aws  # Imported here: moto is a local-run dependency only.

    # moto's per-request parses, done once a process: the same answers, a fifth of the CPU.
    cache_moto_parses()
    with ExitStack() as stack:
        # Every session of the run (its own, the handlers') parses the service models once.
        stack.enter_context(shared_service_models())
        stack.enter_context(mock_aws())
        stack.enter_context(atomic_dynamodb_writes())
        stack.enter_context(unsigned_moto_requests())
        session = boto3.session.Session(region_name=region)
        # Made before any hook is installed on the session, and used for the creates alone.
        creating = _Clients(session)
        physical: dict[str, PhysicalResource] = {}
        for spec in assembly.resources.values():
            name = local_name(assembly, spec)
            if spec.resource_type in CREATED_TYPES:
                physical[spec.logical_id] = _create(creating, spec, name)
            else:
                physical[spec.logical_id] = _placeholder(spec, name)
        resolver = Resolver(physical, stack_name=assembly.stack_name, region=region)
        yield LocalAws(session=session, physical=physical, resolver=resolver)


def secret_arns(physical: Mapping[str, PhysicalResource]) -> list[str]:
    """The full ARN of every secret of the template."""
    return [r.ref for r in physical.values() if r.resource_type == "AWS::SecretsManager::Secret"]


def queue_url_for_arn(physical: Mapping[str, PhysicalResource], arn: str) -> str | None:
    """The URL of the local queue with ``arn``, else None."""
    for resource in physical.values():
        if resource.resource_type == "AWS::SQS::Queue" and resource.attributes.get("Arn") == arn:
            return resource.attributes["QueueUrl"]
    return None
