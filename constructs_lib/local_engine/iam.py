"""Least privilege, checked: every AWS call a handler makes is evaluated against its
function's execution role as the template grants it.

Per call, a botocore ``before-call`` hook (registered on every session while the check is
open) turns the operation into IAM actions and resource ARNs (:func:`required_permissions`),
finds the function running on the calling thread (:mod:`.identity`), and evaluates each
(action, resource) against the role's policies with moto's evaluator,
``moto.iam.access_control.IAMPolicy(document).is_action_permitted(action, resource)``:

- an explicit Deny in any policy denies; otherwise an Allow in any policy allows; otherwise
  the call is denied implicitly, as IAM does for an identity policy in one account;
- a denied call never reaches moto: the handler gets botocore's ``ClientError`` with the
  service's AccessDenied code and AWS's message shape, and the call is counted;
- S3 answers a GetObject / HeadObject of a missing object (or version) with 404 only to a
  caller that may ``s3:ListBucket`` the bucket, and with 403 AccessDenied otherwise (so a
  caller cannot probe for keys): the check evaluates ``s3:ListBucket`` then, and a denial
  answers 403 as S3 does.

The role's policies, read from the template and resolved by :mod:`.intrinsics`: the role's
inline ``Policies``, its ``ManagedPolicyArns`` (AWS managed policies from moto's copy of
their documents; customer managed ones from ``AWS::IAM::ManagedPolicy`` resources), and every
``AWS::IAM::Policy`` / ``AWS::IAM::ManagedPolicy`` that lists the role in ``Roles``.

Not evaluated (documented limits):

- ``Condition`` blocks, except ``StringEquals`` (and its ``ForAllValues`` / ``ForAnyValue``
  forms) on ``events:source`` and ``events:detail-type``, which are evaluated per PutEvents
  entry, on ``bedrock:InferenceProfileArn`` (:mod:`.bedrock_iam`), and ``StringEquals`` /
  ``StringLike`` (plain, ``ForAllValues:`` or ``ForAnyValue:``) on ``dynamodb:LeadingKeys``,
  the partition keys of the items a DynamoDB call touches (issue 34: a function granted
  its own record prefix of a shared table). moto's evaluator only compares values a caller
  passes in (``StringEquals`` alone, and it answers DENIED for an Allow whose condition
  fails), so statements are evaluated one by one: moto matches action and resource, and the
  condition is checked here, as IAM does: a plain operator needs the key and one matching
  value; ``ForAllValues`` holds when every value matches some pattern (and, as in IAM, when
  the request carries none: a ``Scan``); ``ForAnyValue`` when one does. A ``Query`` whose
  partition key the check cannot read from its ``KeyConditionExpression`` is evaluated as
  an empty key, which no prefix matches (stricter than IAM, never kinder). No other request
  context (``aws:SourceArn``, ``dynamodb:Attributes``...) is built: such a condition is
  assumed to hold, and listed in :attr:`IamCheck.unevaluated_conditions`;
- resource policies (queue, topic, bucket, key policies), permission boundaries, SCPs and
  session policies: one account, identity policies only;
- KMS: moto does not encrypt, so no kms:Decrypt / kms:GenerateDataKey call happens;
- the Lambda service's own calls (CloudWatch Logs delivery) are not made; the role's
  ``logs:CreateLogStream`` / ``logs:PutLogEvents`` grants are never reported unused.

IAM wildcards: ``*`` and ``?`` in actions and resources, matched case-insensitively for
actions, as IAM does.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse

import boto3
from botocore.awsrequest import AWSResponse

from ..bedrock_models import PROFILE_PREFIXES
from . import identity
from .assembly import CloudAssembly, FunctionSpec
from .call_hooks import before_call_hooks
from .iam_conditions import (
    LEADING_KEYS,
    as_list,
    condition_holds,
    evaluable,
)
from .intrinsics import LOCAL_ACCOUNT, LOCAL_REGION, Resolver, logical_id_of

#: Set in a call's context when the call was denied, so later hooks leave it alone.
DENIED_KEY = "local_engine.iam.denied"

#: Grants the Lambda service uses on the function's behalf (log delivery), never a handler.
PLATFORM_ACTIONS = frozenset({"logs:createlogstream", "logs:putlogevents", "logs:createloggroup"})

# botocore service name -> IAM service prefix, where they differ.
_PREFIX = {"cloudwatch": "cloudwatch", "eventbridgev2": "events", "logs": "logs"}
# Operations whose IAM action is not <prefix>:<operation>.
_ACTION = {
    ("sqs", "DeleteMessageBatch"): "sqs:DeleteMessage",
    ("sqs", "SendMessageBatch"): "sqs:SendMessage",
    ("sqs", "ChangeMessageVisibilityBatch"): "sqs:ChangeMessageVisibility",
    ("s3", "HeadObject"): "s3:GetObject",
    ("s3", "ListObjectsV2"): "s3:ListBucket",
    ("s3", "ListObjects"): "s3:ListBucket",
    ("s3", "HeadBucket"): "s3:ListBucket",
    ("s3", "ListObjectVersions"): "s3:ListBucketVersions",
    ("s3", "GetObjectAttributes"): "s3:GetObjectAttributes",
    ("eventbridgev2", "PutEvents"): "events:PutEvents",
}
_ACCESS_DENIED_CODE = {"s3": "AccessDenied", "sqs": "AccessDenied", "sns": "AuthorizationError"}
# DynamoDB transactions have no IAM action of their own: each item needs its operation's.
_TRANSACT_ITEM_ACTIONS = {
    "Put": "dynamodb:PutItem",
    "Update": "dynamodb:UpdateItem",
    "Delete": "dynamodb:DeleteItem",
    "ConditionCheck": "dynamodb:ConditionCheckItem",
    "Get": "dynamodb:GetItem",
}


def _arn(service: str, resource: str) -> str:
    return f"arn:aws:{service}:{LOCAL_REGION}:{LOCAL_ACCOUNT}:{resource}"


@dataclass(frozen=True)
class Permission:
    """One IAM action on one resource ARN, with the request context keys known for it
    (``events:source`` and ``events:detail-type`` of a PutEvents entry; every
    ``dynamodb:LeadingKeys`` value of a DynamoDB call, one pair each: a multivalued key)."""

    action: str
    resource: str
    context: tuple[tuple[str, str], ...] = ()

    def values(self) -> dict[str, list[str]]:
        """The context as IAM sees it: each key with all its values."""
        found: dict[str, list[str]] = {}
        for key, value in self.context:
            found.setdefault(key, []).append(value)
        return found


class SecretArns:
    """Full secret ARNs (with their random ``-XXXXXX`` suffix) by name, for SecretId lookup."""

    def __init__(self, arns: Iterable[str] = ()) -> None:
        self._by_name = {_secret_name(arn): arn for arn in arns}

    def full_arn(self, secret_id: str) -> str:
        """The ARN AWS would evaluate for a SecretId (a name, a partial or a full ARN)."""
        if secret_id.startswith("arn:"):
            name = secret_id.split(":secret:", 1)[-1]
            if re.search(r"-[A-Za-z0-9]{6}$", name) and name not in self._by_name:
                return secret_id  # already complete, and not a name that ends like a suffix
            return self._by_name.get(name, secret_id)
        return self._by_name.get(secret_id, _arn("secretsmanager", f"secret:{secret_id}-AbCdEf"))


def _secret_name(arn: str) -> str:
    return re.sub(r"-[A-Za-z0-9]{6}$", "", arn.split(":secret:", 1)[-1])


def _queue_arn(url: str) -> str:
    return _arn("sqs", urlparse(url).path.rstrip("/").rsplit("/", 1)[-1])


def _table_arn(name: str, index: str | None = None) -> str:
    if name.startswith("arn:"):
        return name
    return _arn("dynamodb", f"table/{name}" + (f"/index/{index}" if index else ""))


def _bus_arn(name: str | None) -> str:
    if name and name.startswith("arn:"):
        return name
    return _arn("events", f"event-bus/{name or 'default'}")


HashKeyOf = Callable[[str], "str | None"]


def _no_hash_keys(_table: str) -> str | None:
    return None


def required_permissions(
    service: str,
    operation: str,
    params: Mapping[str, Any],
    secrets: SecretArns,
    hash_key_of: HashKeyOf = _no_hash_keys,
) -> list[Permission]:
    """The (action, resource) pairs IAM checks for one call, with realistic ARNs.
    ``hash_key_of(table name)``: the table's partition key attribute, for the
    ``dynamodb:LeadingKeys`` of a DynamoDB call (None: not known, no leading keys)."""
    prefix = _PREFIX.get(service, service)
    action = _ACTION.get((service, operation), f"{prefix}:{operation}")
    if service == "dynamodb":
        return _dynamodb_permissions(action, operation, params, hash_key_of)
    if service == "sqs":
        if "QueueUrl" in params:
            return [Permission(action, _queue_arn(str(params["QueueUrl"])))]
        if "QueueName" in params:
            return [Permission(action, _arn("sqs", str(params["QueueName"])))]
        return [Permission(action, "*")]
    if service == "s3":
        bucket = params.get("Bucket")
        if not bucket:
            return [Permission(action, "*")]
        key = params.get("Key")
        if key is None:
            return [Permission(action, f"arn:aws:s3:::{bucket}")]
        if params.get("VersionId") and action in ("s3:GetObject", "s3:DeleteObject"):
            action += "Version"
        return [Permission(action, f"arn:aws:s3:::{bucket}/{unquote(str(key))}")]
    if operation == "PutEvents" and service in ("events", "eventbridgev2"):
        # One check per bus, source and detail-type: policies may condition on the last two.
        per_bus = {
            Permission(
                action,
                str(params["EventBusArn"])
                if service == "eventbridgev2"
                else _bus_arn(entry.get("EventBusName")),
                (
                    ("events:detail-type", str(entry.get("DetailType", ""))),
                    ("events:source", str(entry.get("Source", ""))),
                ),
            )
            for entry in params.get("Entries") or []
        }
        return sorted(per_bus, key=repr) or [Permission(action, _bus_arn(None))]
    if service == "bedrock":
        return _bedrock_job_permissions(action, operation, params)
    if service == "secretsmanager" and "SecretId" in params:
        return [Permission(action, secrets.full_arn(str(params["SecretId"])))]
    if service == "sns" and ("TopicArn" in params or "TargetArn" in params):
        return [Permission(action, str(params.get("TopicArn") or params.get("TargetArn")))]
    return [Permission(action, "*")]


def _bedrock_job_permissions(
    action: str, operation: str, params: Mapping[str, Any]
) -> list[Permission]:
    """Bedrock batch inference (issue 37): a create is evaluated on a job of the account, on
    the model or profile it names, and as ``iam:PassRole`` of its ``roleArn``; Get and Stop
    on the job; List on ``*`` (it has no resource type)."""
    if operation == "CreateModelInvocationJob":
        model_id = str(params.get("modelId") or "")
        prefix = model_id.split(".", 1)[0]
        model = (
            _arn("bedrock", f"inference-profile/{model_id}")
            if prefix in PROFILE_PREFIXES
            else f"arn:aws:bedrock:{LOCAL_REGION}::foundation-model/{model_id}"
        )
        return [
            Permission(action, _arn("bedrock", "model-invocation-job/local-new-job")),
            Permission(action, model),
            Permission("iam:PassRole", str(params.get("roleArn") or "")),
        ]
    if "jobIdentifier" in params:
        return [Permission(action, str(params["jobIdentifier"]))]
    return [Permission(action, "*")]


def _dynamodb_permissions(
    action: str, operation: str, params: Mapping[str, Any], hash_key_of: HashKeyOf
) -> list[Permission]:
    """One permission per table (per item of a transaction), with its leading keys."""
    if operation in ("BatchWriteItem", "BatchGetItem"):
        found = []
        for table, request in (params.get("RequestItems") or {}).items():
            if operation == "BatchGetItem":
                keys = list(request.get("Keys") or [])
            else:
                keys = [
                    (entry.get("PutRequest") or {}).get("Item")
                    or (entry.get("DeleteRequest") or {}).get("Key")
                    or {}
                    for entry in request
                ]
            found.append(Permission(action, _table_arn(table), _leading(hash_key_of(table), keys)))
        return found
    if operation in ("TransactWriteItems", "TransactGetItems"):
        found = []
        for item in params.get("TransactItems") or []:
            for kind, body in item.items():
                table = str(body["TableName"])
                keys = [body.get("Key") or body.get("Item") or {}]
                context = _leading(hash_key_of(table), keys)
                found.append(Permission(_TRANSACT_ITEM_ACTIONS[kind], _table_arn(table), context))
        return found
    table = params.get("TableName")
    if not table:
        return [Permission(action, "*")]
    resource = _table_arn(str(table), params.get("IndexName"))
    hash_key = hash_key_of(str(table))
    if operation == "Query":
        return [Permission(action, resource, _query_leading(hash_key, params))]
    item = params.get("Key") or params.get("Item")
    keys = [item] if isinstance(item, Mapping) else []
    return [Permission(action, resource, _leading(hash_key, keys))]


def _key_value(value: Any) -> str:
    """A key attribute's value as IAM compares it: the string of a low-level value
    (``{"S": ...}``, ``{"N": ...}``), or of a resource-level one."""
    if isinstance(value, Mapping) and len(value) == 1:
        return str(next(iter(value.values())))
    return str(value)


def _leading(
    hash_key: str | None, keys: Sequence[Mapping[str, Any]]
) -> tuple[tuple[str, str], ...]:
    if hash_key is None:
        return ()
    values = dict.fromkeys(_key_value(key[hash_key]) for key in keys if hash_key in key)
    return tuple((LEADING_KEYS, value) for value in values)


def _query_leading(hash_key: str | None, params: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """A Query's partition key, from ``<name> = <:value>`` in its KeyConditionExpression
    (an empty key when it cannot be read: no prefix matches it)."""
    if hash_key is None:
        return ()
    names = params.get("ExpressionAttributeNames") or {}
    values = params.get("ExpressionAttributeValues") or {}
    expression = str(params.get("KeyConditionExpression") or "")
    for name, placeholder in re.findall(r"(#?[\w.]+)\s*=\s*(:\w+)", expression):
        if names.get(name, name) == hash_key and placeholder in values:
            return ((LEADING_KEYS, _key_value(values[placeholder])),)
    return ((LEADING_KEYS, ""),)


def _pattern_for_moto(pattern: str) -> str:
    """An IAM wildcard pattern as moto's matcher wants it.

    moto turns ``*`` into ``.*`` and matches the rest as a regular expression; so every
    other regex character is escaped and IAM's ``?`` (one character) becomes ``.``.
    """
    escaped = re.escape(pattern).replace(r"\*", "*").replace(r"\?", ".")
    return escaped


def _moto_statement(statement: Mapping[str, Any]) -> dict[str, Any]:
    prepared = {k: v for k, v in statement.items() if k != "Condition"}
    for key in ("Action", "NotAction"):
        if key in prepared:
            values = prepared[key] if isinstance(prepared[key], list) else [prepared[key]]
            prepared[key] = [_pattern_for_moto(str(v).lower()) for v in values]
    for key in ("Resource", "NotResource"):
        if key in prepared:
            values = prepared[key] if isinstance(prepared[key], list) else [prepared[key]]
            prepared[key] = [_pattern_for_moto(str(v)) for v in values]
    return prepared


#: Decisions a role keeps (a bench run's calls carry thousands of different keys).
MAX_KEPT_DECISIONS = 50_000


@dataclass
class RolePolicies:
    """The resolved identity policies of one function's execution role."""

    function: str  # display name
    role_name: str
    documents: list[Mapping[str, Any]]
    unevaluated_conditions: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        from moto.iam.access_control import IAMPolicyStatement

        # Each statement: moto's evaluator (action and resource, without the condition) and
        # the condition, evaluated here (moto's answers DENIED for an Allow whose condition
        # fails, where IAM would simply not apply the statement).
        self._statements: list[tuple[Any, Mapping[str, Any]]] = []
        for document in self.documents:
            statements = document.get("Statement") or []
            if isinstance(statements, Mapping):
                statements = [statements]
            for statement in statements:
                condition = statement.get("Condition") or {}
                if condition and not evaluable(condition):
                    self.unevaluated_conditions.append(f"{self.function}: {json.dumps(condition)}")
                self._statements.append((IAMPolicyStatement(_moto_statement(statement)), condition))
        #: Decisions made, by permission: a decision depends on the permission alone (its
        #: action, resource and context) and a run asks the same ones again and again.
        self._decisions: dict[Permission, str] = {}

    def decide(self, permission: Permission) -> str:
        """``allowed``, ``denied`` (explicit Deny) or ``implicit`` (no Allow)."""
        decision = self._decisions.get(permission)
        if decision is None:
            if len(self._decisions) >= MAX_KEPT_DECISIONS:
                self._decisions.clear()  # keys in the context make a bench's many
            decision = self._decisions[permission] = self._decide(permission)
        return decision

    def _decide(self, permission: Permission) -> str:
        from moto.iam.access_control import PermissionResult

        context = permission.values()
        results = [
            statement.is_action_permitted(permission.action.lower(), permission.resource)
            for statement, condition in self._statements
            if condition_holds(condition, context)
        ]
        if PermissionResult.DENIED in results:
            return "denied"
        if PermissionResult.PERMITTED in results:
            return "allowed"
        return "implicit"

    def granted(self) -> list[tuple[str, str]]:
        """Every (action pattern, resource pattern) an Allow statement grants."""
        found = []
        for document in self.documents:
            statements = document.get("Statement") or []
            if isinstance(statements, Mapping):
                statements = [statements]
            for statement in statements:
                if statement.get("Effect") != "Allow" or "Action" not in statement:
                    continue
                actions = as_list(statement["Action"])
                resources = as_list(statement.get("Resource", "*"))
                found += [(str(a), str(r)) for a in actions for r in resources]
        return found


def _aws_managed_policy(arn: str) -> Mapping[str, Any] | None:
    from moto.iam.aws_managed_policies import aws_managed_policies_data

    name = arn.rsplit("/", 1)[-1]
    data = json.loads(aws_managed_policies_data)
    entry = data.get(name)
    return entry.get("Document") if isinstance(entry, Mapping) else None


def role_policies(
    assembly: CloudAssembly, resolver: Resolver, function: FunctionSpec
) -> RolePolicies:
    """The policies of ``function``'s execution role, resolved (see the module docstring)."""
    raw = assembly.resources[function.logical_id].properties.get("Role")
    return policies_of_role(assembly, resolver, raw, function.display_name)


def policies_of_role(
    assembly: CloudAssembly, resolver: Resolver, raw: Any, display_name: str
) -> RolePolicies:
    """The resolved policies of the role ``raw`` (a Ref / GetAtt of an ``AWS::IAM::Role``)
    names; ``display_name`` labels who uses it."""
    role_id = logical_id_of(raw)
    documents: list[Mapping[str, Any]] = []
    role_name = str(resolver.resolve(raw, f"{display_name}.Role")).rsplit("/", 1)[-1]
    if role_id is None or role_id not in assembly.resources:
        # An imported role: nothing in the template says what it may do.
        return RolePolicies(display_name, role_name, documents)
    role = assembly.resources[role_id].properties
    where = f"{role_id}"
    for index, inline in enumerate(role.get("Policies") or []):
        documents.append(resolver.resolve(inline["PolicyDocument"], f"{where}.Policies[{index}]"))
    managed_arns = [resolver.resolve(a, where) for a in role.get("ManagedPolicyArns") or []]
    for resource in assembly.resources.values():
        if resource.resource_type not in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            continue
        roles = [logical_id_of(r) for r in resource.properties.get("Roles") or []]
        if role_id in roles:
            documents.append(
                resolver.resolve(
                    resource.properties["PolicyDocument"], f"{resource.logical_id}.PolicyDocument"
                )
            )
    for arn in managed_arns:
        local = [
            r
            for r in assembly.of_type("AWS::IAM::ManagedPolicy")
            if resolver.resolve({"Ref": r.logical_id}, where) == arn
        ]
        if local:
            documents.append(resolver.resolve(local[0].properties["PolicyDocument"], where))
            continue
        document = _aws_managed_policy(str(arn))
        if document is not None:
            documents.append(document)
    return RolePolicies(display_name, role_name, documents)


@dataclass(frozen=True)
class Denial:
    """One denied call: who, what, on which resource."""

    function: str
    action: str
    resource: str


class IamCheck:
    """Counts and decisions of one run. Open with :meth:`installed`."""

    def __init__(self, roles: Mapping[str, RolePolicies], secrets: SecretArns) -> None:
        self.roles = dict(roles)  # by function logical id
        self.secrets = secrets
        self.calls = 0
        self.denials: list[Denial] = []
        self.used: dict[str, Counter[str]] = {lid: Counter() for lid in roles}
        self._lock = threading.Lock()

    def add_role(self, key: str, role: RolePolicies) -> None:
        """Evaluate calls made as ``key`` (a service acting with a role) too."""
        self.roles[key] = role
        self.used.setdefault(key, Counter())

    @property
    def unevaluated_conditions(self) -> list[str]:
        """Conditions in the roles' statements that were assumed to hold."""
        return [c for role in self.roles.values() for c in role.unevaluated_conditions]

    def evaluate(self, function_id: str, permissions: Sequence[Permission]) -> Permission | None:
        """Count one call; return the first permission it lacks, else None."""
        role = self.roles.get(function_id)
        if role is None:
            return None
        with self._lock:
            self.calls += 1
        for permission in permissions:
            if role.decide(permission) != "allowed":
                with self._lock:
                    self.denials.append(
                        Denial(role.function, permission.action, permission.resource)
                    )
                return permission
            with self._lock:
                self.used[function_id][f"{permission.action}|{permission.resource}"] += 1
        return None

    def unused_grants(self) -> dict[str, list[str]]:
        """Per function, granted ``action on resource`` that no evaluated call used.

        Log delivery grants (the Lambda service's) are left out.
        """
        from moto.iam.access_control import IAMPolicyStatement, PermissionResult

        found: dict[str, list[str]] = {}
        for function_id, role in self.roles.items():
            used = [key.split("|", 1) for key in self.used[function_id]]
            unused = []
            for action, resource in role.granted():
                if action.lower() in PLATFORM_ACTIONS:
                    continue
                statement = IAMPolicyStatement(
                    _moto_statement({"Effect": "Allow", "Action": action, "Resource": resource})
                )
                if (
                    not any(
                        statement.is_action_permitted(a.lower(), r) == PermissionResult.PERMITTED
                        for a, r in used
                    )
                    and f"{action} on {resource}" not in unused
                ):
                    unused.append(f"{action} on {resource}")
            found[role.function] = unused
        return found

    # -- the hook ----------------------------------------------------------------------------
    def _before_call(self, model: Any, context: dict[str, Any], **_: Any) -> Any:
        function_id = identity.current()
        if function_id is None or function_id not in self.roles:
            return None
        params = context.get(_PARAMS_KEY) or {}
        service = model.service_model.service_name
        permissions = required_permissions(
            service, model.name, params, self.secrets, _moto_hash_key
        )
        missing = self.evaluate(function_id, permissions)
        if missing is None and service == "s3" and model.name in _OBJECT_READS:
            missing = self._missing_object_listing(function_id, params)
        if missing is None:
            return None
        context[DENIED_KEY] = True  # later hooks must not act
        role = self.roles[function_id]
        code = _ACCESS_DENIED_CODE.get(service, "AccessDeniedException")
        message = (
            f"User: arn:aws:sts::{LOCAL_ACCOUNT}:assumed-role/{role.role_name}/"
            f"{role.function} is not authorized to perform: {missing.action} on resource: "
            f"{missing.resource} because no identity-based policy allows the "
            f"{missing.action} action"
        )
        response = AWSResponse("https://local-iam/", 403 if service == "s3" else 400, {}, None)
        parsed = {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": response.status_code},
        }
        return response, parsed

    def _missing_object_listing(
        self, function_id: str, params: Mapping[str, Any]
    ) -> Permission | None:
        """For a read of a missing object: the ``s3:ListBucket`` S3 needs to answer 404."""
        bucket, key = params.get("Bucket"), params.get("Key")
        if not bucket or key is None:
            return None
        if _object_exists(str(bucket), unquote(str(key)), params.get("VersionId")) is not False:
            return None
        return self.evaluate(function_id, [Permission("s3:ListBucket", f"arn:aws:s3:::{bucket}")])

    @contextmanager
    def installed(self, *sessions: boto3.session.Session) -> Iterator[IamCheck]:
        """Evaluate every call made while open: on sessions created meanwhile (as event_bus
        does), on boto3's default session, and on ``sessions`` (created earlier)."""

        with (
            before_call_hooks(_PARAMS_KEY, self._before_call, *sessions),
            identity.inherit_in_new_threads(),
        ):
            yield self


_PARAMS_KEY = "local_engine.iam.params"
#: S3 reads whose answer for a missing object depends on ``s3:ListBucket``.
_OBJECT_READS = frozenset({"GetObject", "HeadObject"})


def _moto_hash_key(table: str) -> str | None:
    """The partition key attribute of the moto table ``table`` (None when unknown)."""
    from moto.dynamodb.models import dynamodb_backends

    name = table.rsplit("/", 1)[-1] if table.startswith("arn:") else table
    found = dynamodb_backends[LOCAL_ACCOUNT][LOCAL_REGION].tables.get(name)
    return None if found is None else str(found.hash_key_attr) or None


def _object_exists(bucket: str, key: str, version_id: object) -> bool | None:
    """Whether moto holds ``key`` (at ``version_id``) in ``bucket``; None when the bucket
    itself is unknown (S3 then answers NoSuchBucket, whatever the caller may list)."""
    from moto.s3.exceptions import MissingBucket
    from moto.s3.models import s3_backends

    try:
        found = s3_backends[LOCAL_ACCOUNT]["aws"].get_bucket(bucket)
    except MissingBucket:
        return None
    versions = found.keys.getlist(key, default=[])
    if version_id is None:
        return key in found.keys and not _is_delete_marker(found.keys[key])
    return any(str(v.version_id) == str(version_id) for v in versions)


def _is_delete_marker(value: object) -> bool:
    from moto.s3.models import FakeDeleteMarker

    return isinstance(value, FakeDeleteMarker)


def iam_check(assembly: CloudAssembly, resolver: Resolver, secret_arns: Iterable[str]) -> IamCheck:
    """An :class:`IamCheck` over every function of ``assembly``."""
    roles = {
        spec.logical_id: role_policies(assembly, resolver, spec) for spec in assembly.functions()
    }
    return IamCheck(roles, SecretArns(secret_arns))
