"""Reading the synthesized cloud assembly (``cdk.out``): the one source of the local run's
rules, patterns, targets, retry settings, handlers, environments and resources.

Everything here is read from the template the deploy would use, so the local run and the
deployed stack cannot drift. Values stay raw (intrinsics unresolved); :mod:`.intrinsics`
resolves them once the local resources exist.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import AssemblyError, AssemblyNotFoundError
from .intrinsics import logical_id_of

# Lambda's documented defaults, used when the template leaves a setting out.
DEFAULT_TIMEOUT_SECONDS = 3
DEFAULT_MEMORY_MB = 128
DEFAULT_ASYNC_RETRY_ATTEMPTS = 2
DEFAULT_MAX_EVENT_AGE_SECONDS = 21_600
DEFAULT_SQS_BATCH_SIZE = 10
# The CDK's IdempotentModelStep always sets this variable; it marks the model-step function.
MODEL_STEP_MARKER_ENV = "IDEMPOTENCY_KEY"
#: Set to ``batch`` on a model step with Message Batches delivery (issue 19).
MODEL_DELIVERY_ENV = "MODEL_DELIVERY"
SYNTH_HINT = "run `make synth` first (or point --cdk-out at a synthesized cloud assembly)"


@dataclass(frozen=True)
class FunctionSpec:
    """One ``AWS::Lambda::Function`` plus its ``AWS::Lambda::EventInvokeConfig``.

    Defaults are Lambda's: timeout 3 s, 128 MB, 2 async retries, 6 h maximum event age.
    """

    logical_id: str
    path: str
    handler: str
    environment: Mapping[str, Any]
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    memory_mb: int = DEFAULT_MEMORY_MB
    retry_attempts: int = DEFAULT_ASYNC_RETRY_ATTEMPTS
    max_event_age_seconds: int = DEFAULT_MAX_EVENT_AGE_SECONDS
    on_failure: Any = None

    @property
    def display_name(self) -> str:
        """The construct path without the stack and ``/Resource``, e.g. ``Classify/Function``."""
        return short_path(self.path) or self.logical_id

    @property
    def is_model_step(self) -> bool:
        """True for the function an ``IdempotentModelStep`` created."""
        return MODEL_STEP_MARKER_ENV in self.environment

    @property
    def is_batch(self) -> bool:
        """True for a model step with Message Batches delivery (``MODEL_DELIVERY=batch``)."""
        return self.is_model_step and self.environment.get(MODEL_DELIVERY_ENV) == "batch"


@dataclass(frozen=True)
class TargetSpec:
    """One rule target: ``arn`` (raw), what it points at, and how the event is transformed."""

    target_id: str
    arn: Any
    resource_logical_id: str | None
    resource_type: str | None
    input_transformer: Mapping[str, Any] | None = None
    input: str | None = None
    input_path: str | None = None
    retry_policy: Mapping[str, Any] = field(default_factory=dict)
    dead_letter_arn: Any = None


@dataclass(frozen=True)
class RuleSpec:
    """One ``AWS::Events::Rule``; ``event_bus`` is None for the default bus."""

    logical_id: str
    path: str
    event_bus: Any
    event_pattern: Mapping[str, Any]
    targets: tuple[TargetSpec, ...]
    enabled: bool = True

    @property
    def display_name(self) -> str:
        """Construct path without stack and ``/Resource``, e.g. ``Classify/Rule``."""
        return short_path(self.path) or self.logical_id


#: ``rate(value unit)`` units, in seconds (EventBridge: minute(s), hour(s), day(s)).
RATE_UNITS = {"minute": 60, "minutes": 60, "hour": 3600, "hours": 3600, "day": 86400, "days": 86400}


@dataclass(frozen=True)
class ScheduledRuleSpec:
    """One ``AWS::Events::Rule`` with a ``rate(...)`` ``ScheduleExpression``: every
    ``period_seconds`` (AWS time) each target gets the rule's event (its constant ``Input``,
    else EventBridge's ``Scheduled Event``)."""

    logical_id: str
    path: str
    schedule_expression: str
    period_seconds: int
    targets: tuple[TargetSpec, ...]
    enabled: bool = True

    @property
    def display_name(self) -> str:
        """Construct path without stack and ``/Resource``, e.g. ``UploadSweepRule``."""
        return short_path(self.path) or self.logical_id


def rate_seconds(expression: str) -> int | None:
    """Seconds between two firings of ``rate(value unit)``; None for any other expression
    (``cron(...)`` is not emulated). Raises :class:`AssemblyError` for a malformed rate."""
    text = expression.strip()
    if not (text.startswith("rate(") and text.endswith(")")):
        return None
    parts = text[len("rate(") : -1].split()
    if len(parts) != 2 or not parts[0].isdigit() or parts[1] not in RATE_UNITS:
        raise AssemblyError(f"unsupported schedule expression {expression!r}")
    value, unit = int(parts[0]), parts[1]
    if value < 1:
        raise AssemblyError(f"unsupported schedule expression {expression!r}")
    return value * RATE_UNITS[unit]


@dataclass(frozen=True)
class EventSourceMappingSpec:
    """One ``AWS::Lambda::EventSourceMapping`` (SQS only is emulated). Default batch size 10."""

    logical_id: str
    function_logical_id: str
    source_logical_id: str
    batch_size: int = DEFAULT_SQS_BATCH_SIZE
    report_batch_item_failures: bool = False
    enabled: bool = True
    max_concurrency: int | None = None  # ScalingConfig.MaximumConcurrency
    max_batching_window_seconds: int = 0  # MaximumBatchingWindowInSeconds


@dataclass(frozen=True)
class SubscriberSpec:
    """One ``AWS::EventsV2::Subscriber``: bus, filter patterns, target, retry policy and
    on-failure destination (raw values; intrinsics unresolved)."""

    logical_id: str
    path: str
    event_bus_arn: Any
    patterns: tuple[Mapping[str, Any], ...]
    target_arn: Any
    target_logical_id: str | None
    target_type: str | None
    role_arn: Any = None
    retry_policy: Mapping[str, Any] = field(default_factory=dict)
    on_failure_arn: Any = None
    enabled: bool = True

    @property
    def display_name(self) -> str:
        """Construct path without stack and ``/Resource``, e.g. ``Classify/Subscriber``."""
        return short_path(self.path) or self.logical_id


@dataclass(frozen=True)
class ResourceSpec:
    """Any template resource: type, construct path and raw properties."""

    logical_id: str
    resource_type: str
    path: str
    properties: Mapping[str, Any]


def short_path(path: str) -> str:
    """``ProspectUploader/Classify/Function/Resource`` -> ``Classify/Function``."""
    parts = path.split("/")[1:]
    if parts and parts[-1] == "Resource":
        parts = parts[:-1]
    return "/".join(parts)


class CloudAssembly:
    """The parsed template of one stack. Build it with :func:`load_assembly`."""

    def __init__(self, stack_name: str, template: Mapping[str, Any], source: Path) -> None:
        self.stack_name = stack_name
        self.source = source
        resources = template.get("Resources")
        if not isinstance(resources, Mapping) or not resources:
            raise AssemblyError(f"{source}: the template has no Resources")
        self.resources: dict[str, ResourceSpec] = {
            logical_id: ResourceSpec(
                logical_id=logical_id,
                resource_type=str(body.get("Type", "")),
                path=str((body.get("Metadata") or {}).get("aws:cdk:path", "")),
                properties=body.get("Properties") or {},
            )
            for logical_id, body in resources.items()
        }

    # -- generic lookups -------------------------------------------------------------------
    def of_type(self, resource_type: str) -> list[ResourceSpec]:
        """Every resource of ``resource_type``, in template order."""
        return [r for r in self.resources.values() if r.resource_type == resource_type]

    def by_path_suffix(self, suffix: str, resource_type: str | None = None) -> ResourceSpec:
        """The one resource whose ``aws:cdk:path`` ends with ``suffix`` (e.g.
        ``/UploadBucket/Resource``); raises :class:`AssemblyError` if none or several."""
        found = [
            r
            for r in self.resources.values()
            if r.path.endswith(suffix)
            and (resource_type is None or r.resource_type == resource_type)
        ]
        if len(found) != 1:
            raise AssemblyError(
                f"{self.source}: expected one resource with path suffix {suffix!r}, "
                f"found {len(found)}"
            )
        return found[0]

    # -- functions ---------------------------------------------------------------------------
    def functions(self) -> list[FunctionSpec]:
        """Every Lambda function with its async invoke config (Lambda defaults when absent)."""
        invoke_configs: dict[str, Mapping[str, Any]] = {}
        for config in self.of_type("AWS::Lambda::EventInvokeConfig"):
            target = logical_id_of(config.properties.get("FunctionName"))
            if target is not None:
                invoke_configs[target] = config.properties
        specs = []
        for resource in self.of_type("AWS::Lambda::Function"):
            props = resource.properties
            handler = props.get("Handler")
            if not isinstance(handler, str) or "." not in handler:
                raise AssemblyError(f"{resource.logical_id}: no Python handler string")
            invoke_config = invoke_configs.get(resource.logical_id, {})
            destination = (
                (invoke_config.get("DestinationConfig") or {}).get("OnFailure") or {}
            ).get("Destination")
            specs.append(
                FunctionSpec(
                    logical_id=resource.logical_id,
                    path=resource.path,
                    handler=handler,
                    environment=dict((props.get("Environment") or {}).get("Variables") or {}),
                    timeout_seconds=int(props.get("Timeout", DEFAULT_TIMEOUT_SECONDS)),
                    memory_mb=int(props.get("MemorySize", DEFAULT_MEMORY_MB)),
                    retry_attempts=int(
                        invoke_config.get("MaximumRetryAttempts", DEFAULT_ASYNC_RETRY_ATTEMPTS)
                    ),
                    max_event_age_seconds=int(
                        invoke_config.get("MaximumEventAgeInSeconds", DEFAULT_MAX_EVENT_AGE_SECONDS)
                    ),
                    on_failure=destination,
                )
            )
        return specs

    def function(self, logical_id: str) -> FunctionSpec:
        """The function with ``logical_id``; raises :class:`AssemblyError` if absent."""
        for spec in self.functions():
            if spec.logical_id == logical_id:
                return spec
        raise AssemblyError(f"{self.source}: no Lambda function {logical_id!r}")

    def model_step_functions(self) -> list[FunctionSpec]:
        """The functions of every ``IdempotentModelStep``, in template order."""
        return [spec for spec in self.functions() if spec.is_model_step]

    def model_step_function(self) -> FunctionSpec:
        """The function of the (single) realtime ``IdempotentModelStep``: a stack may add
        Message Batches steps beside it (``MODEL_DELIVERY=batch``, issue 19)."""
        found = [spec for spec in self.functions() if spec.is_model_step and not spec.is_batch]
        if len(found) != 1:
            raise AssemblyError(
                f"{self.source}: expected one model-step function (environment "
                f"{MODEL_STEP_MARKER_ENV}), found {len(found)}"
            )
        return found[0]

    # -- rules and event sources -------------------------------------------------------------
    def rules(self) -> list[RuleSpec]:
        """Every EventBridge rule with an event pattern (scheduled rules:
        :meth:`scheduled_rules`)."""
        specs = []
        for resource in self.of_type("AWS::Events::Rule"):
            props = resource.properties
            pattern = props.get("EventPattern")
            if not isinstance(pattern, Mapping):
                continue
            specs.append(
                RuleSpec(
                    logical_id=resource.logical_id,
                    path=resource.path,
                    event_bus=props.get("EventBusName"),
                    event_pattern=pattern,
                    targets=self._targets(props),
                    enabled=props.get("State", "ENABLED") == "ENABLED",
                )
            )
        return specs

    def scheduled_rules(self) -> list[ScheduledRuleSpec]:
        """Every EventBridge rule with a ``rate(...)`` ``ScheduleExpression`` (``cron``
        rules are not emulated and left out)."""
        specs = []
        for resource in self.of_type("AWS::Events::Rule"):
            props = resource.properties
            expression = props.get("ScheduleExpression")
            if not isinstance(expression, str):
                continue
            try:
                period = rate_seconds(expression)
            except AssemblyError as exc:
                raise AssemblyError(f"{resource.logical_id}.ScheduleExpression: {exc}") from exc
            if period is None:
                continue
            specs.append(
                ScheduledRuleSpec(
                    logical_id=resource.logical_id,
                    path=resource.path,
                    schedule_expression=expression,
                    period_seconds=period,
                    targets=self._targets(props),
                    enabled=props.get("State", "ENABLED") == "ENABLED",
                )
            )
        return specs

    def _targets(self, props: Mapping[str, Any]) -> tuple[TargetSpec, ...]:
        targets = []
        for target in props.get("Targets") or []:
            target_lid = self._function_of(target.get("Arn")) or logical_id_of(target.get("Arn"))
            target_resource = self.resources.get(target_lid or "")
            targets.append(
                TargetSpec(
                    target_id=str(target.get("Id", "")),
                    arn=target.get("Arn"),
                    resource_logical_id=target_lid,
                    resource_type=target_resource.resource_type if target_resource else None,
                    input_transformer=target.get("InputTransformer"),
                    input=target.get("Input"),
                    input_path=target.get("InputPath"),
                    retry_policy=target.get("RetryPolicy") or {},
                    dead_letter_arn=(target.get("DeadLetterConfig") or {}).get("Arn"),
                )
            )
        return tuple(targets)

    def event_source_mappings(self) -> list[EventSourceMappingSpec]:
        """Every event source mapping whose source is a queue of this template."""
        specs = []
        for resource in self.of_type("AWS::Lambda::EventSourceMapping"):
            props = resource.properties
            function_lid = self._function_of(props.get("FunctionName"))
            source_lid = logical_id_of(props.get("EventSourceArn"))
            source = self.resources.get(source_lid or "")
            if function_lid is None or source is None:
                raise AssemblyError(f"{resource.logical_id}: source or function not in template")
            if source.resource_type != "AWS::SQS::Queue":
                raise AssemblyError(
                    f"{resource.logical_id}: only SQS event sources are emulated, "
                    f"not {source.resource_type}"
                )
            specs.append(
                EventSourceMappingSpec(
                    logical_id=resource.logical_id,
                    function_logical_id=function_lid,
                    source_logical_id=source.logical_id,
                    batch_size=int(props.get("BatchSize", DEFAULT_SQS_BATCH_SIZE)),
                    report_batch_item_failures="ReportBatchItemFailures"
                    in (props.get("FunctionResponseTypes") or []),
                    enabled=bool(props.get("Enabled", True)),
                    max_concurrency=_optional_int(
                        (props.get("ScalingConfig") or {}).get("MaximumConcurrency")
                    ),
                    max_batching_window_seconds=int(
                        props.get("MaximumBatchingWindowInSeconds", 0) or 0
                    ),
                )
            )
        return specs

    def _function_of(self, value: Any) -> str | None:
        """The function a ``FunctionName`` names: a Ref/GetAtt of the function, or of an
        alias or version of it (also inside Fn::Join / Fn::Select, as ``alias:live``)."""
        for logical_id in _refs_in(value):
            resource = self.resources.get(logical_id)
            if resource is None:
                continue
            if resource.resource_type == "AWS::Lambda::Function":
                return logical_id
            if resource.resource_type in ("AWS::Lambda::Alias", "AWS::Lambda::Version"):
                return self._function_of(resource.properties.get("FunctionName"))
        return None

    def subscribers(self) -> list[SubscriberSpec]:
        """Every ``AWS::EventsV2::Subscriber`` (an EventBridge v2 bus's consumer)."""
        specs = []
        for resource in self.of_type("AWS::EventsV2::Subscriber"):
            props = resource.properties
            invoke = props.get("InvokeConfiguration") or {}
            target_raw = invoke.get("TargetArn") or props.get("TargetArn")
            target_lid = next(iter(_refs_in(target_raw)), None)
            target = self.resources.get(target_lid or "")
            if target is not None and target.resource_type in (
                "AWS::Lambda::Alias",
                "AWS::Lambda::Version",
            ):
                target_lid = self._function_of(target.properties.get("FunctionName"))
                target = self.resources.get(target_lid or "")
            patterns = []
            for item in (props.get("FilterConfiguration") or {}).get("Filters") or []:
                pattern = item.get("Pattern")
                patterns.append(json.loads(pattern) if isinstance(pattern, str) else pattern)
            specs.append(
                SubscriberSpec(
                    logical_id=resource.logical_id,
                    path=resource.path,
                    event_bus_arn=props.get("EventBusArn"),
                    patterns=tuple(patterns),
                    target_arn=target_raw,
                    target_logical_id=target_lid,
                    target_type=target.resource_type if target else None,
                    role_arn=invoke.get("RoleArn"),
                    retry_policy=dict(props.get("RetryPolicy") or {}),
                    on_failure_arn=(props.get("OnFailureConfiguration") or {}).get("Arn"),
                    enabled=props.get("State", "ENABLED") == "ENABLED",
                )
            )
        return specs

    def upload_bucket(self) -> ResourceSpec:
        """The bucket an S3 ``Object Created`` rule listens to (``detail.bucket.name``)."""
        for rule in self.rules():
            pattern = rule.event_pattern
            if "aws.s3" not in (pattern.get("source") or []):
                continue
            names = ((pattern.get("detail") or {}).get("bucket") or {}).get("name") or []
            for name in names:
                bucket = self.resources.get(logical_id_of(name) or "")
                if bucket is not None and bucket.resource_type == "AWS::S3::Bucket":
                    return bucket
        raise AssemblyError(f"{self.source}: no rule matches S3 events of a bucket in the stack")


def _refs_in(value: Any) -> list[str]:
    """Logical ids referenced anywhere in ``value`` (Ref and Fn::GetAtt), in order."""
    found: list[str] = []
    direct = logical_id_of(value)
    if direct is not None:
        return [direct]
    if isinstance(value, Mapping):
        for item in value.values():
            found += _refs_in(item)
    elif isinstance(value, list):
        for item in value:
            found += _refs_in(item)
    return found


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def load_assembly(cdk_out: Path | str, stack_name: str) -> CloudAssembly:
    """Read ``<cdk_out>/manifest.json`` and the stack's template.

    Raises :class:`AssemblyNotFoundError` (telling the user to run ``make synth``) when the
    directory, the manifest entry or the template file is missing.
    """
    root = Path(cdk_out)
    if not root.is_dir():
        raise AssemblyNotFoundError(f"no cloud assembly at {root}: {SYNTH_HINT}")
    template_name = f"{stack_name}.template.json"
    manifest_path = root / "manifest.json"
    if manifest_path.is_file():
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise AssemblyError(f"{manifest_path} is not valid JSON: {exc}") from exc
        artifact = (manifest.get("artifacts") or {}).get(stack_name) or {}
        template_name = (artifact.get("properties") or {}).get("templateFile", template_name)
    template_path = root / template_name
    if not template_path.is_file():
        raise AssemblyNotFoundError(f"no template for stack {stack_name} in {root}: {SYNTH_HINT}")
    try:
        template = json.loads(template_path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise AssemblyError(f"{template_path} is not valid JSON: {exc}") from exc
    return CloudAssembly(stack_name, template, template_path)
