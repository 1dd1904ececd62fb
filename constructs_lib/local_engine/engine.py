"""The running emulation of one synthesized stack: moto resources, the union environment,
fresh handler modules, Lambda async functions, the template's rules and event sources.

An app that composes ``IdempotentModelStep`` builds its local run on :class:`LocalEngine`:
enter it, put the app's first event on a bus (:meth:`LocalEngine.put_event`), wait for
everything to settle (:meth:`LocalEngine.wait_until_settled`), drain the event sources
(:meth:`LocalEngine.drain_event_sources`), and read the outcome from the tables through
:attr:`LocalEngine.aws`. The Prospect Uploader's ``prospect-uploader run`` is one such app.
"""

from __future__ import annotations

import importlib
import json
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any

from ..system_prompt_asset import prompt_roots_on_path, prompt_search_paths
from . import identity
from .assembly import (
    MODEL_STEP_MARKER_ENV,
    CloudAssembly,
    FunctionSpec,
    SubscriberSpec,
    TargetSpec,
    short_path,
)
from .call_hooks import HookSlot, before_call_hooks
from .environment import (
    UNSAFE_VARIABLES,
    environment_union,
    function_environments,
    function_scoped_environ,
    function_scoped_names,
    patched_environ,
)
from .errors import AssemblyError, EmulatorError, RunTimeoutError
from .event_bus import EventRouter, LocalRule, bus_name, capture_put_events
from .event_bus_v2 import DeliveryDenied, EventBusesV2, LocalBusV2, LocalSubscriber
from .event_patterns import EventPattern, PatternError
from .execution_environment import ExecutionEnvironment
from .iam import IamCheck, Permission, iam_check, policies_of_role
from .intrinsics import LOCAL_ACCOUNT, LOCAL_REGION
from .lambda_async import (
    DEFAULT_SECONDS_PER_MINUTE,
    DEFAULT_TIMEOUT_CAP_SECONDS,
    AsyncFunction,
    AsyncSettings,
    function_identity,
    snapshot,
)
from .lambda_faults import FaultRates, LambdaFaults, LambdaKilled
from .local_aws import LocalAws, local_aws, queue_url_for_arn, secret_arns
from .model_requests import ModelRequests, record_key_of
from .progress import Progress
from .scheduling import DEFAULT_RUN_TIMEOUT_SECONDS as DEFAULT_RUN_TIMEOUT_SECONDS
from .scheduling import Scheduler, WorkTracker
from .sqs_queues import LocalQueue, LocalQueues, MappingPoller, queue_name_of
from .targets import LambdaTarget, SnsTarget, SqsTarget, Target

logger = logging.getLogger(__name__)
#: The shortest wall time between two firings of one scheduled rule (seconds): a one-minute
#: rule's period at the default clock. Each firing of the batch step's tick costs tens of
#: milliseconds of CPU (its lease, its look at the open submissions), so on a faster clock
#: ticks that close together cost more than the run's rows: on a 0.25 s minute a run that
#: waits out a 90-minute visibility timeout ticked about 200 times at 0.25 s, 30 at 1 s.
MIN_SCHEDULE_PERIOD_SECONDS = 1.0

#: The longest wall time between two looks at the open batch submissions of a run that
#: waits on them (it looks sooner, as soon as a scheduled firing settles).
SETTLE_LOOK_SECONDS = 1.0

IN_PROGRESS_ERROR = "IdempotencyAlreadyInProgressError"
# EventBridge v2 subscriber retry defaults (field notes): 5 attempts, 300 s.
DEFAULT_V2_RETRY_ATTEMPTS = 5
DEFAULT_V2_EVENT_AGE = 300


@dataclass(frozen=True)
class EngineSettings:
    """How the engine runs the stack (defaults in brackets).

    ``duplicates`` [1] copies of every event to each Lambda target; ``concurrency`` [4]
    worker threads; ``seconds_per_minute`` [1.0], ``timeout_cap_seconds`` [8.0] and ``seed``
    [0]: see :class:`~.lambda_async.AsyncSettings`; ``run_timeout_seconds`` [300];
    ``environment`` [none]: variables set over the functions' own (a local model's URL
    and key, for example); ``check_iam`` [True]: evaluate every AWS call a handler makes
    against its function's role (:mod:`.iam`); ``redelivery_hooks`` [none]: by function
    display name, a hook that makes that function's ``duplicates`` copies Lambda re-runs
    after a failed attempt rather than duplicate deliveries (see
    :class:`~.targets.LambdaTarget`'s ``before_redelivery``); ``kill_rate`` [0] and
    ``throttle_rate`` [0]: Lambda kills after a model request and throttled SQS receives,
    seeded by ``seed`` (:mod:`.lambda_faults`); ``batch_create_kill_rate`` [0]: kills
    around a Message Batch create (issue 19), seeded the same way.
    """

    duplicates: int = 1
    concurrency: int = 4
    seconds_per_minute: float = DEFAULT_SECONDS_PER_MINUTE
    timeout_cap_seconds: float = DEFAULT_TIMEOUT_CAP_SECONDS
    seed: int = 0
    run_timeout_seconds: float = DEFAULT_RUN_TIMEOUT_SECONDS
    environment: Mapping[str, str] = field(default_factory=dict)
    check_iam: bool = True
    redelivery_hooks: Mapping[str, Callable[[Mapping[str, Any]], None]] = field(
        default_factory=dict
    )
    kill_rate: float = 0.0
    throttle_rate: float = 0.0
    batch_create_kill_rate: float = 0.0
    run_timeout_note: str = ""  # how run_timeout_seconds was chosen (in the timeout error)


@dataclass
class DrainResult:
    """What an event source mapping left on its queue when the run settled."""

    mapping: str
    left: int = 0


@dataclass
class StepDeadLetters:
    """Messages that reached a model step's dead-letter queue (``queue``, a construct path),
    by how they got there: ``sent`` by the step with an ``ERROR_CODE`` (``sent_uncoded``:
    without one), or ``redriven`` there by SQS from one of the step's queues; of those,
    ``redriven_uncoded_ran`` carry no code though the function ran with them on that queue,
    and ``redriven_uncoded_unrun`` carry none because the function never ran with them
    there (every receive throttled: the function could not run at all)."""

    queue: str
    sent: int = 0
    sent_uncoded: int = 0
    redriven: int = 0
    redriven_uncoded_ran: int = 0
    redriven_uncoded_unrun: int = 0

    @property
    def uncoded(self) -> int:
        """Dead letters that say nothing of why, though the step could have said it."""
        return self.sent_uncoded + self.redriven_uncoded_ran


class LocalEngine:
    """Context manager around everything one local run of ``assembly`` needs.

    ``code_root`` holds the Lambda packages the template's handler strings name.
    ``progress`` (optional) is redrawn while :meth:`wait_until_settled` waits.
    """

    def __init__(
        self,
        assembly: CloudAssembly,
        settings: EngineSettings,
        *,
        code_root: Path,
        progress: Progress | None = None,
        log_path: Path | None = None,
        model_request_count: Callable[[], int] | None = None,
    ) -> None:
        self.assembly = assembly
        self.settings = settings
        self.code_root = code_root
        self.progress = progress
        self.log_path = log_path
        self.functions: dict[str, AsyncFunction] = {}
        self.sns_targets: list[SnsTarget] = []
        self.tracker = WorkTracker()
        self.in_progress_exhausted = 0
        self.environment: dict[str, str] = {}
        self._model_request_count = model_request_count
        self._counter_lock = threading.Lock()
        self._stack = ExitStack()
        self._aws: LocalAws | None = None
        self._runtime: ExecutionEnvironment | None = None
        self._router: EventRouter | None = None
        self.iam: IamCheck | None = None
        #: Hooks added while the engine runs see every call, after the IAM check's.
        self.hooks = HookSlot()
        self.queues = LocalQueues()
        self.buses_v2: EventBusesV2 | None = None
        self.pollers: list[MappingPoller] = []
        self._scheduler: Scheduler | None = None
        self.faults = LambdaFaults(
            FaultRates(
                settings.kill_rate,
                settings.throttle_rate,
                settings.seed,
                batch_create_kill_rate=settings.batch_create_kill_rate,
            )
        )
        self.model_requests = ModelRequests(self.faults)
        self._queue_paths: dict[str, str] = {}  # queue name -> construct path (short)
        #: Invocations the scheduled rules started, by function logical id (issue 19); they
        #: are not in the function's own stats (a twin runs them, see ``_schedule``).
        self.scheduled_invocations: Counter[str] = Counter()
        #: Scheduled firings settled so far, and their condition: a run that waits on open
        #: batch submissions looks again when a firing (a tick) has settled.
        self._firings_settled = 0
        self._firing_settled = threading.Condition()
        self._batch_stores: list[Any] | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> LocalEngine:
        try:
            self._setup()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stack.close()

    @property
    def aws(self) -> LocalAws:
        """moto, and every resource's local name."""
        if self._aws is None:
            raise RuntimeError("the engine is not started")
        return self._aws

    @property
    def runtime(self) -> ExecutionEnvironment:
        """The fresh module namespace of the handlers."""
        if self._runtime is None:
            raise RuntimeError("the engine is not started")
        return self._runtime

    @property
    def router(self) -> EventRouter:
        """The template's rules, by bus."""
        if self._router is None:
            raise RuntimeError("the engine is not started")
        return self._router

    def _setup(self) -> None:
        assembly, settings = self.assembly, self.settings
        self._aws = aws = self._stack.enter_context(local_aws(assembly))
        if settings.check_iam:
            check = iam_check(assembly, aws.resolver, secret_arns(aws.physical))
            self.iam = self._stack.enter_context(check.installed(aws.session))
        self._scheduler = scheduler = Scheduler()
        self._stack.callback(scheduler.stop)
        self._create_local_queues()
        self._stack.enter_context(self.queues.installed(aws.session))
        self._stack.enter_context(self.model_requests.installed())
        if settings.batch_create_kill_rate > 0:
            # After the IAM check's hook: the killed call was evaluated, and is never made.
            self._stack.enter_context(
                before_call_hooks(
                    "batch-create-kill.params", self.model_requests.before_aws_call, aws.session
                )
            )
        self._stack.enter_context(self.hooks.installed(aws.session))
        scoped = function_scoped_names(assembly.functions())
        self.environment = environment_union(assembly.functions(), aws.resolver, scoped)
        overlay = {
            **self.environment,
            "AWS_REGION": LOCAL_REGION,
            "AWS_DEFAULT_REGION": LOCAL_REGION,
            **settings.environment,
        }
        self._stack.enter_context(patched_environ(overlay, remove=UNSAFE_VARIABLES))
        # Each step's system prompt ships with its code; locally it is read from the assembly.
        self._stack.enter_context(prompt_roots_on_path(prompt_search_paths(assembly.source.parent)))
        #: By logical id, the variables each function reads as its own (two model steps).
        self.function_environments = function_environments(
            assembly.functions(), aws.resolver, scoped
        )
        self._stack.enter_context(function_scoped_environ(self.function_environments))
        self._runtime = runtime = self._stack.enter_context(ExecutionEnvironment(self.code_root))
        # Lambda's init phase is not on the compressed clock: import the SDK now, or the
        # first model call's ~1 s import would outlast a concurrent duplicate's retries.
        if any(spec.is_model_step for spec in assembly.functions()):
            importlib.import_module("anthropic")
        # Two functions with one handler (two model steps) each get their own module
        # instance: a handler module's state (its ModelStep) belongs to one function.
        seen: set[str] = set()
        handlers = {}
        for spec in assembly.functions():
            own = spec.handler in seen
            handlers[spec.logical_id] = runtime.load(
                spec.handler, instance=spec.logical_id if own else None
            )
            seen.add(spec.handler)
        if any(spec.is_batch for spec in assembly.functions()):
            _batch_create_on_the_run_clock(runtime, settings.seconds_per_minute)

        self._pool = pool = ThreadPoolExecutor(
            max_workers=settings.concurrency, thread_name_prefix="lambda"
        )
        self._stack.callback(pool.shutdown, wait=True, cancel_futures=True)
        self._async_settings = async_settings = AsyncSettings(
            seconds_per_minute=settings.seconds_per_minute,
            timeout_cap_seconds=settings.timeout_cap_seconds,
            seed=settings.seed,
        )
        for spec in assembly.functions():
            self.functions[spec.logical_id] = AsyncFunction(
                spec,
                handlers[spec.logical_id],
                function_identity(aws.ref(spec.logical_id)),
                executor=pool,
                scheduler=self._scheduler,
                tracker=self.tracker,
                settings=_batch_timeout_cap(async_settings) if spec.is_batch else async_settings,
                on_failure=self._on_failure_sender(spec),
                scope=self._invocation_scope(spec),
            )
        self._start_pollers()
        self._start_schedules()
        self._router = EventRouter(self._local_rules())
        self._stack.enter_context(capture_put_events(self._router))
        self.buses_v2 = EventBusesV2(
            seconds_per_minute=settings.seconds_per_minute,
            scheduler=scheduler,
            tracker=self.tracker,
        )
        self._create_v2_buses(self.buses_v2)
        self._stack.enter_context(self.buses_v2.installed(aws.session))

    # -- scheduled rules (issue 19) ---------------------------------------------------------
    def _start_schedules(self) -> None:
        """Fire every ``rate(...)`` rule's Lambda targets on the run's clock, first one period
        after the start, with the target's constant ``Input`` (else EventBridge's ``Scheduled
        Event``). A firing is an async invocation, as EventBridge's; the timer itself is no
        work in flight, so a run settles between firings. On a clock faster than
        :data:`MIN_SCHEDULE_PERIOD_SECONDS` a period, firings are that far apart instead: a
        one-minute tick on a 0.05 s minute would otherwise run back to back and take a core
        from the work the run waits for, and on a 0.25 s minute still cost a run more CPU than
        its rows (a tick's period changes how soon it acts, never what it does)."""
        assert self._scheduler is not None
        stopped = threading.Event()
        # Registered after the pools: closed first, so no firing meets a shut-down pool.
        self._stack.callback(stopped.set)
        for spec in self.assembly.scheduled_rules():
            if not spec.enabled:
                continue
            period = max(
                spec.period_seconds * self.settings.seconds_per_minute / 60.0,
                MIN_SCHEDULE_PERIOD_SECONDS,
            )
            for target in spec.targets:
                if target.resource_type != "AWS::Lambda::Function":
                    raise AssemblyError(
                        f"{spec.display_name}: scheduled target type {target.resource_type} "
                        "is not emulated (Lambda functions only)"
                    )
                function = self.functions[str(target.resource_logical_id)]
                self._schedule(spec, function, self._scheduled_event(spec, target), period, stopped)

    def _scheduled_event(self, spec: Any, target: TargetSpec) -> dict[str, Any]:
        if target.input is not None:
            event: dict[str, Any] = json.loads(str(target.input))
            return event
        return {
            "version": "0",
            "id": "scheduled",
            "detail-type": "Scheduled Event",
            "source": "aws.events",
            "account": LOCAL_ACCOUNT,
            "time": "",
            "region": LOCAL_REGION,
            "resources": [f"arn:aws:events:{LOCAL_REGION}:{LOCAL_ACCOUNT}:rule/{spec.logical_id}"],
            "detail": {},
        }

    def _schedule(
        self,
        spec: Any,
        function: AsyncFunction,
        event: dict[str, Any],
        period: float,
        stopped: threading.Event,
    ) -> None:
        """Fire ``function`` every ``period`` local seconds. The firings run as a twin of the
        function (same handler, role and on-failure destination) whose invocations are no
        work in flight: a run settles between them (a batch step's open submissions are
        waited for instead), and on a fast clock they cannot keep a run from settling. A
        firing still running when the next is due takes its place (a 1-minute tick takes
        milliseconds; only a compressed clock meets this)."""
        assert self._scheduler is not None
        scheduler = self._scheduler
        twin = self._scheduled_twin(function)
        running = threading.Event()

        def done(_ok: bool) -> None:
            running.clear()
            with self._firing_settled:
                self._firings_settled += 1
                self._firing_settled.notify_all()

        def fire() -> None:
            if stopped.is_set():
                return
            if not running.is_set():
                running.set()
                if event.get("detail-type") == "Scheduled Event":
                    event["id"] = str(uuid.uuid4())
                with self._counter_lock:
                    self.scheduled_invocations[function.spec.logical_id] += 1
                twin.invoke(event, on_done=done)
            scheduler.call_later(period, fire)

        scheduler.call_later(period, fire)

    def _scheduled_twin(self, function: AsyncFunction) -> AsyncFunction:
        assert self._scheduler is not None
        spec = function.spec
        return AsyncFunction(
            spec,
            function.handler,
            function.identity,
            executor=self._pool,
            scheduler=self._scheduler,
            tracker=_UntrackedWork(self.tracker),
            settings=_batch_timeout_cap(self._async_settings)
            if spec.is_batch
            else self._async_settings,
            on_failure=self._on_failure_sender(spec),
            scope=self._invocation_scope(spec),
        )

    def variable(self, name: str) -> str:
        """A variable of the stack's functions: the union's, or, for a name two model steps
        scope to themselves, the one value every function setting it agrees on (the shared
        idempotency table, the API key secret). Raises ``KeyError`` when unset or when the
        functions disagree."""
        if name in self.environment:
            return self.environment[name]
        values = {env[name] for env in self.function_environments.values() if name in env}
        if len(values) != 1:
            raise KeyError(f"{name}: {len(values)} values over the functions")
        return values.pop()

    def _batch_work_left(self) -> int:
        """Message Batches submissions not yet done, over every batch step (issue 19): staged
        rows waiting for ``max_wait``, creates, batches in processing or being collected. The
        run has not settled while any is open, even with no invocation in flight."""
        return sum(len(store.open_submissions()) for store in self._open_submission_stores())

    def _open_submission_stores(self) -> list[Any]:
        """One ``BatchStore`` per batch step, on one client, made at the first look (a client
        per look cost more than the look: the run looks after every tick)."""
        if self._batch_stores is None:
            steps = [spec for spec in self.assembly.functions() if spec.is_batch]
            stores = []
            if steps:
                batch_store = self.runtime.module("model_step.batch_store")
                client = self.aws.client("dynamodb")
                for spec in steps:
                    table = self.aws.resolver.resolve(
                        spec.environment["IDEMPOTENCY_TABLE_NAME"], f"{spec.logical_id}.Environment"
                    )
                    prefix = str(spec.environment.get("IDEMPOTENCY_RECORD_PREFIX") or "model-step")
                    stores.append(batch_store.BatchStore(client, str(table), prefix, 0))
            self._batch_stores = stores
        return self._batch_stores

    def _firings(self) -> int:
        """Scheduled firings settled so far."""
        with self._firing_settled:
            return self._firings_settled

    def _wait_for_firing(self, seen: int, timeout: float) -> None:
        """Block until a scheduled firing settles after ``seen`` were, at most ``timeout``."""
        with self._firing_settled:
            self._firing_settled.wait_for(lambda: self._firings_settled > seen, timeout)

    # -- EventBridge v2 ------------------------------------------------------------------------
    def _create_v2_buses(self, buses: EventBusesV2) -> None:
        aws = self.aws
        for resource in self.assembly.of_type("AWS::EventsV2::EventBus"):
            physical = aws.physical[resource.logical_id]
            buses.add(LocalBusV2(physical.attributes["Name"], physical.attributes["Arn"]))
        for spec in self.assembly.subscribers():
            if not spec.enabled:
                continue
            where = f"{spec.display_name}.EventBusArn"
            bus = buses.buses.get(str(aws.resolver.resolve(spec.event_bus_arn, where)))
            if bus is None:
                raise AssemblyError(f"{where}: not a v2 bus of the stack")
            try:
                patterns = [EventPattern(dict(p)) for p in spec.patterns]
            except PatternError as exc:
                raise AssemblyError(f"{spec.display_name}.FilterConfiguration: {exc}") from exc
            bus.subscribers.append(
                LocalSubscriber(
                    spec.display_name,
                    patterns,
                    self._subscriber_target(spec),
                    max_retry_attempts=int(
                        spec.retry_policy.get("MaxRetryAttempts", DEFAULT_V2_RETRY_ATTEMPTS)
                    ),
                    max_event_age_seconds=int(
                        spec.retry_policy.get("MaxEventAgeInSeconds", DEFAULT_V2_EVENT_AGE)
                    ),
                    may_deliver=self._subscriber_permission(spec),
                    on_failure=self._subscriber_on_failure(spec),
                )
            )

    def _subscriber_target(self, spec: SubscriberSpec) -> Target:
        if spec.target_type == "AWS::SQS::Queue":
            target = TargetSpec(
                spec.logical_id, spec.target_arn, spec.target_logical_id, spec.target_type
            )
            return self._sqs_target(spec.display_name, target)
        if spec.target_type == "AWS::Lambda::Function":
            function = self.functions[str(spec.target_logical_id)]
            return LambdaTarget(function, self.tracker, self.settings.duplicates)
        raise AssemblyError(
            f"{spec.display_name}: subscriber target type {spec.target_type} is not emulated"
        )

    def _subscriber_permission(self, spec: SubscriberSpec) -> Callable[[], None]:
        if self.iam is None or spec.role_arn is None:
            return lambda: None
        key = f"subscriber:{spec.logical_id}"
        self.iam.add_role(
            key,
            policies_of_role(self.assembly, self.aws.resolver, spec.role_arn, spec.display_name),
        )
        target_arn = str(self.aws.resolver.resolve(spec.target_arn, spec.display_name))
        action = (
            "sqs:SendMessage"
            if spec.target_type == "AWS::SQS::Queue"
            else ("lambda:InvokeFunction")
        )
        iam = self.iam

        def check() -> None:
            missing = iam.evaluate(key, [Permission(action, target_arn)])
            if missing is not None:
                raise DeliveryDenied(
                    f"the subscriber's role may not {missing.action} on {missing.resource}"
                )

        return check

    def _subscriber_on_failure(
        self, spec: SubscriberSpec
    ) -> Callable[[Mapping[str, Any], Exception], None] | None:
        if spec.on_failure_arn is None:
            return None
        arn = str(self.aws.resolver.resolve(spec.on_failure_arn, spec.display_name))
        local = self.queues.by_url_or_arn(arn)
        url = queue_url_for_arn(self.aws.physical, arn)
        sqs = self.aws.client("sqs")
        iam = self.iam if spec.role_arn is not None else None
        role_key = f"subscriber:{spec.logical_id}"

        def send(event: Mapping[str, Any], error: Exception) -> None:
            # The subscriber sends to its on-failure queue with its own role, as it delivers.
            if iam is not None and iam.evaluate(role_key, [Permission("sqs:SendMessage", arn)]):
                logger.error(
                    "%s: the subscriber's role may not send to its on-failure queue; "
                    "the event is lost",
                    spec.display_name,
                )
                return
            attributes = {
                "ERROR_CODE": {"DataType": "String", "StringValue": type(error).__name__},
                "ERROR_MESSAGE": {"DataType": "String", "StringValue": str(error)[:256]},
                "SUBSCRIBER": {"DataType": "String", "StringValue": spec.display_name},
            }
            body = json.dumps(event, default=str)
            if local is not None:
                local.send(body, attributes=attributes)
            elif url is not None:
                sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attributes)

        return send

    # -- queues and their event source mappings --------------------------------------------------
    def _create_local_queues(self) -> None:
        """A compressed-clock queue for every mapped queue and its redrive target."""
        assert self._scheduler is not None
        aws = self.aws
        wanted = [m.source_logical_id for m in self.assembly.event_source_mappings() if m.enabled]
        dead_letters: dict[str, str] = {}  # queue logical id -> its redrive target's
        created: dict[str, LocalQueue] = {}
        while wanted:
            logical_id = wanted.pop(0)
            if logical_id in created:
                continue
            props = self.assembly.resources[logical_id].properties
            attributes = aws.physical[logical_id].attributes
            redrive = props.get("RedrivePolicy") or {}
            created[logical_id] = LocalQueue(
                attributes["QueueName"],
                attributes["QueueUrl"],
                attributes["Arn"],
                visibility_timeout=int(props.get("VisibilityTimeout", 30)),
                delay_seconds=int(props.get("DelaySeconds", 0)),
                max_receive_count=int(redrive["maxReceiveCount"]) if redrive else None,
                seconds_per_minute=self.settings.seconds_per_minute,
                scheduler=self._scheduler,
                tracker=self.tracker,
            )
            self.queues.add(created[logical_id])
            self._queue_paths[attributes["QueueName"]] = short_path(
                self.assembly.resources[logical_id].path
            )
            if redrive:
                where = f"{logical_id}.RedrivePolicy"
                target = aws.resolver.resolve(redrive["deadLetterTargetArn"], where)
                target_id = next(
                    (
                        lid
                        for lid, r in aws.physical.items()
                        if r.resource_type == "AWS::SQS::Queue" and r.attributes["Arn"] == target
                    ),
                    None,
                )
                if target_id is None:
                    raise AssemblyError(f"{where}: {target} is not a queue of the stack")
                dead_letters[logical_id] = target_id
                wanted.append(target_id)
        for logical_id, target_id in dead_letters.items():
            created[logical_id].dead_letter = created[target_id]

    def _start_pollers(self) -> None:
        for mapping in self.assembly.event_source_mappings():
            if not mapping.enabled:
                continue
            function = self.functions[mapping.function_logical_id]
            queue_name = self.aws.physical[mapping.source_logical_id].attributes["QueueName"]
            queue = self.queues.queues[queue_name]
            limit = mapping.max_concurrency or self.settings.concurrency
            pool = ThreadPoolExecutor(
                max_workers=min(limit, 64), thread_name_prefix=f"poller-{queue_name[-12:]}"
            )
            self._stack.callback(pool.shutdown, wait=True, cancel_futures=True)
            poller = MappingPoller(
                queue,
                self._synchronous_invoke(function),
                name=function.spec.display_name,
                batch_size=mapping.batch_size,
                report_batch_item_failures=mapping.report_batch_item_failures,
                max_concurrency=limit,
                executor=pool,
                tracker=self.tracker,
                may_receive=self._poller_permission(function, queue, "sqs:ReceiveMessage"),
                on_delete=self._delete_permission(function, queue),
                faults=self.faults,
                batching_window_seconds=mapping.max_batching_window_seconds,
                scheduler=self._scheduler,
                seconds_per_minute=self.settings.seconds_per_minute,
            )
            self.pollers.append(poller)
            # Lambda checks these when it creates the mapping, and polls from then on, with
            # messages or without.
            self._poller_permission(function, queue, "sqs:GetQueueAttributes")()
            self._poller_permission(function, queue, "sqs:ReceiveMessage")()

    def _poller_permission(
        self, function: AsyncFunction, queue: LocalQueue, action: str
    ) -> Callable[[], bool]:
        """Lambda's poller reads and deletes with the function's execution role."""

        def allowed() -> bool:
            if self.iam is None:
                return True
            missing = self.iam.evaluate(function.spec.logical_id, [Permission(action, queue.arn)])
            if missing is None:
                return True
            self.tracker.fail(
                EmulatorError(
                    f"the event source mapping of {function.spec.display_name} cannot use its "
                    f"queue {queue.name}: the role lacks {action}"
                )
            )
            return False

        return allowed

    def _delete_permission(
        self, function: AsyncFunction, queue: LocalQueue
    ) -> Callable[[int], None]:
        """The poller's DeleteMessage check, made after each batch it deletes."""
        allowed = self._poller_permission(function, queue, "sqs:DeleteMessage")

        def check(_deleted: int) -> None:
            allowed()

        return check

    def _synchronous_invoke(self, function: AsyncFunction) -> Callable[[dict[str, Any]], Any]:
        def invoke(event: dict[str, Any]) -> Any:
            context = function.context(str(uuid.uuid4()))
            with function.stats.lock:
                function.stats.attempts += 1
            try:
                with identity.acting_as(function.spec.logical_id), function.scope(event):
                    try:
                        result = function.handler(event, context)
                    finally:
                        function.count_overrun(context)
            except LambdaKilled:
                with function.stats.lock:
                    function.stats.kills += 1
                raise
            except Exception as error:
                with function.stats.lock:
                    name = type(error).__name__
                    function.stats.errors[name] = function.stats.errors.get(name, 0) + 1
                raise
            with function.stats.lock:
                function.stats.succeeded += 1
            return result

        return invoke

    def _invocation_scope(self, spec: FunctionSpec) -> Callable[[Any], Any]:
        """Around each handler call: model requests count against the event's record key
        (the business key a model step reads from ``IDEMPOTENCY_KEY``)."""
        expression = spec.environment.get(MODEL_STEP_MARKER_ENV)
        key_expression = expression if isinstance(expression, str) else None
        requests = self.model_requests

        def scope(event: Any) -> Any:
            return requests.for_key(record_key_of(event, key_expression))

        return scope

    def _queue_consumer(self, queue_name: str) -> AsyncFunction | None:
        for mapping in self.assembly.event_source_mappings():
            if not mapping.enabled:
                continue
            name = self.aws.physical[mapping.source_logical_id].attributes["QueueName"]
            if name == queue_name:
                return self.functions[mapping.function_logical_id]
        return None

    def _sqs_target(self, rule: str, target: Any) -> SqsTarget:
        assert self._scheduler is not None
        resolved = _resolved_target(self.aws.resolver, target, rule)
        queue = self.queues.by_url_or_arn(str(resolved.arn))
        if queue is not None:
            local_queue = queue

            def send(body: str) -> None:
                local_queue.send(body)
        else:
            url = queue_url_for_arn(self.aws.physical, str(resolved.arn))
            if url is None:
                raise AssemblyError(
                    f"{rule}: SQS target {resolved.arn} is not a queue of the stack"
                )
            sqs = self.aws.client("sqs")

            def send(body: str) -> None:
                sqs.send_message(QueueUrl=url, MessageBody=body)

        consumer = self._queue_consumer(queue_name_of(str(resolved.arn)))

        def delivered() -> None:
            if consumer is not None:
                with consumer.stats.lock:
                    consumer.stats.deliveries += 1

        return SqsTarget(
            f"{rule} -> queue",
            resolved,
            send,
            duplicates=self.settings.duplicates,
            later=self._scheduler.call_later,
            seconds_per_minute=self.settings.seconds_per_minute,
            tracker=self.tracker,
            on_delivery=delivered,
        )

    def _on_failure_sender(self, spec: FunctionSpec) -> Callable[[dict[str, Any]], None] | None:
        if spec.on_failure is None:
            return None
        aws = self.aws
        arn = aws.resolver.resolve(spec.on_failure, f"{spec.logical_id}.OnFailure")
        queue_url = queue_url_for_arn(aws.physical, arn)
        if queue_url is None:
            raise AssemblyError(
                f"{spec.display_name}: on-failure destination {arn} is not an SQS queue of "
                "the stack; only SQS destinations are emulated"
            )
        sqs = aws.client("sqs")

        def send(record: dict[str, Any]) -> None:
            error_type = (record.get("responsePayload") or {}).get("errorType")
            if error_type == IN_PROGRESS_ERROR:
                with self._counter_lock:
                    self.in_progress_exhausted += 1
            logger.warning(
                "%s: on-failure record (%s, %s)",
                spec.display_name,
                record["requestContext"]["condition"],
                error_type,
            )
            sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps(record, default=str))

        return send

    def _local_rules(self) -> list[LocalRule]:
        resolver = self.aws.resolver
        rules = []
        for spec in self.assembly.rules():
            if not spec.enabled:
                continue
            where = f"{spec.display_name}.EventPattern"
            try:
                pattern = EventPattern(resolver.resolve(dict(spec.event_pattern), where))
            except PatternError as exc:
                raise AssemblyError(f"{where}: {exc}") from exc
            targets: list[Target] = []
            for target in spec.targets:
                if target.resource_type == "AWS::Lambda::Function":
                    function = self.functions[str(target.resource_logical_id)]
                    targets.append(
                        LambdaTarget(
                            function,
                            self.tracker,
                            self.settings.duplicates,
                            self.settings.redelivery_hooks.get(function.spec.display_name),
                        )
                    )
                elif target.resource_type == "AWS::SQS::Queue":
                    targets.append(self._sqs_target(spec.display_name, target))
                elif target.resource_type == "AWS::SNS::Topic":
                    resolved = _resolved_target(resolver, target, spec.display_name)
                    sns = SnsTarget(
                        f"{spec.display_name} -> topic",
                        resolved.arn,
                        resolved,
                        self.aws.client("sns"),
                    )
                    self.sns_targets.append(sns)
                    targets.append(sns)
                else:
                    raise AssemblyError(
                        f"{spec.display_name}: target type {target.resource_type} is not emulated"
                    )
            bus = bus_name(resolver.resolve(spec.event_bus, where) if spec.event_bus else None)
            rules.append(LocalRule(spec.display_name, bus, pattern, targets))
        return rules

    # -- running ---------------------------------------------------------------------------
    def put_event(self, bus: str, event: Mapping[str, Any]) -> list[str]:
        """Route one event (as an AWS service would emit it); returns the targets it reached."""
        return self.router.put(bus, event)

    def wait_until_settled(self) -> None:
        """Block until no invocation is queued, running or waiting for a retry.

        Raises :class:`EmulatorError` for a failure of the emulation itself and
        :class:`RunTimeoutError` when the run does not settle in ``run_timeout_seconds``.
        """
        deadline = time.monotonic() + self.settings.run_timeout_seconds
        # Without a progress line to redraw, the wait wakes only when the run settles.
        shown = self.progress is not None and self.progress.enabled
        try:
            while True:
                remaining = max(0.0, deadline - time.monotonic())
                idle = self.tracker.wait_idle(remaining, self._tick if shown else None)
                # Rows waiting in a Message Batch are work no invocation holds (issue 19);
                # only a tick moves them on, so the run looks again once one has settled.
                seen = self._firings()
                if not idle or self.tracker.errors or self._batch_work_left() == 0:
                    break
                if time.monotonic() >= deadline:
                    idle = False
                    break
                self._wait_for_firing(seen, min(SETTLE_LOOK_SECONDS, deadline - time.monotonic()))
        finally:
            if self.progress is not None:
                self.progress.close()
        if self.tracker.errors:
            error = self.tracker.errors[0]
            logger.error("emulator error", exc_info=error)
            raise EmulatorError(f"the local run failed internally: {type(error).__name__}: {error}")
        if not idle:
            note = self.settings.run_timeout_note
            raise RunTimeoutError(
                f"the pipeline had not settled after {self.settings.run_timeout_seconds:.0f} s "
                f"({self.tracker.pending} invocations still in flight)"
                + (f"; {note}" if note else "")
            )

    def _tick(self) -> None:
        progress = self.progress
        if progress is None or not progress.enabled:
            return
        stats = [snapshot(f.stats) for f in self.functions.values()]
        total = sum(s["deliveries"] for s in stats)
        done = sum(s["succeeded"] + s["on_failure"] for s in stats)
        requests = self._model_request_count() if self._model_request_count else 0
        progress.update(
            done,
            total,
            f"invocations settled, {requests} model requests "
            f"(bound {self.settings.run_timeout_seconds:.0f} s)",
        )

    def drain_event_sources(self) -> list[DrainResult]:
        """What each event source mapping left on its queue (its poller ran all along)."""
        return [DrainResult(poller.name, len(poller.queue)) for poller in self.pollers]

    def queue_stats(self) -> dict[str, dict[str, Any]]:
        """Counters of every local queue and of the mapping that polls it, by queue name."""
        found: dict[str, dict[str, Any]] = {}
        for queue in self.queues.queues.values():
            found[queue.name] = {
                **vars(queue.stats),
                "left": len(queue),
                "path": self._queue_paths.get(queue.name, queue.name),
            }
        for poller in self.pollers:
            found[poller.queue.name].update(
                {
                    "consumer": poller.name,
                    "max_concurrency": poller.max_concurrency,
                    **{k: v for k, v in vars(poller.stats).items() if k != "errors"},
                }
            )
        return found

    def redriven(self) -> dict[str, int]:
        """Messages each queue's redrive policy moved on, by the queue's construct path."""
        return {
            self._queue_paths.get(queue.name, queue.name): queue.stats.redriven
            for queue in self.queues.queues.values()
            if queue.dead_letter is not None
        }

    def step_dead_letters(self, spec: FunctionSpec) -> list[StepDeadLetters]:
        """What reached each dead-letter queue of the model step ``spec``: the ends of its
        mapped queues' redrive chains, and the queue its ``DEAD_LETTER_QUEUE_URL`` names."""
        sources = {
            self.aws.physical[m.source_logical_id].attributes["QueueName"]
            for m in self.assembly.event_source_mappings()
            if m.enabled and m.function_logical_id == spec.logical_id
        }
        ends: dict[str, LocalQueue] = {}
        for name in sources:
            queue, visited = self.queues.queues[name], {name}
            while queue.dead_letter is not None and queue.dead_letter.name not in visited:
                queue = queue.dead_letter
                visited.add(queue.name)
            if queue.name not in sources:
                ends[queue.name] = queue
        named = spec.environment.get("DEAD_LETTER_QUEUE_URL")
        if named is not None:
            url = str(self.aws.resolver.resolve(named, f"{spec.logical_id}.DEAD_LETTER_QUEUE_URL"))
            named_queue = self.queues.by_url_or_arn(url)
            if named_queue is not None:
                ends.setdefault(named_queue.name, named_queue)
        found = []
        for queue in ends.values():
            summary = StepDeadLetters(self._queue_paths.get(queue.name, queue.name))
            for arrival, count in queue.arrivals.items():
                if arrival.how == "sent" and arrival.source == spec.logical_id:
                    if arrival.coded:
                        summary.sent += count
                    else:
                        summary.sent_uncoded += count
                elif arrival.how == "redriven" and arrival.source in sources:
                    summary.redriven += count
                    if arrival.coded:
                        continue
                    if arrival.ran or arrival.killed:
                        summary.redriven_uncoded_ran += count
                    else:
                        summary.redriven_uncoded_unrun += count
            found.append(summary)
        return found

    def function_stats(self) -> dict[str, Mapping[str, Any]]:
        """Counters of every function, by display name."""
        return {f.spec.display_name: snapshot(f.stats) for f in self.functions.values()}


class _UntrackedWork(WorkTracker):
    """The work tracker of scheduled firings: not work in flight, but an emulator failure
    in one still fails the run."""

    def __init__(self, main: WorkTracker) -> None:
        super().__init__()
        self._main = main

    def begin(self) -> None:
        return

    def end(self) -> None:
        return

    def fail(self, error: BaseException) -> None:
        self._main.fail(error)


#: The remaining time a batch step's context reports at most (issue 19): its function has
#: 15 minutes, and a tick streams results until 30 s before its deadline, so the 8 s cap of
#: a realtime step would stop every tick at its first checkpoint. 60 s stays under the batch
#: buffer queue's visibility timeout on the run's clock (5,400 s: 90 s at a run-minute of 1 s),
#: so a killed invocation's lock has expired when its message comes back.
BATCH_TIMEOUT_CAP_SECONDS = 60.0


#: The shortest local deadline of a Message Batch create, and the shortest grace after it
#: before an uncertain create is reconciled (wall seconds): a create on 2 loaded cores can
#: take a second, and a create still in flight when its submission is reconciled would be
#: sent a second time (billed twice).
MIN_LOCAL_CREATE_TIMEOUT_SECONDS = 5.0
MIN_LOCAL_RECONCILE_GRACE_SECONDS = 2.0
#: The shortest local bound (wall seconds) on collecting a batch before it is lost: moto and
#: the handlers take wall time whatever the run's clock, and a batch of thousands of rows on
#: a loaded machine is not collected in the 3.6 minutes a 36 h bound becomes at 0.1 s a
#: minute (its rows would go again, and be billed twice, for no fault of the provider's).
MIN_LOCAL_LOST_OPEN_SECONDS = 900.0


def _batch_create_on_the_run_clock(
    runtime: ExecutionEnvironment, seconds_per_minute: float
) -> None:
    """The batch runtime's times are wall seconds (``model_step.clock`` is not compressed):
    locally a kill around a create would cost three wall minutes, a batch the API lost six
    hours. They go on the run's clock (``model_step.batch_limits``): the create deadline and
    the grace after it before an uncertain create is reconciled (at least
    :data:`MIN_LOCAL_CREATE_TIMEOUT_SECONDS` and :data:`MIN_LOCAL_RECONCILE_GRACE_SECONDS`,
    keeping the order the reconcile relies on: every create has ended, answered or not,
    before its submission is reconciled), the wait before an unseen create is sent again,
    the cancel and lost bounds, the backoff of a failing batch and the late look at a lost
    one. So do the providers' own times: the minute a create refused for its API key
    waits (``anthropic_batches.KEY_PROBLEM_WAIT_SECONDS``), and Bedrock's list of jobs is
    read afresh as often as on AWS: a tick reuses a list at most ``LIST_FRESH_SECONDS``
    old, half the tick's period, so every tick lists again; on the wall clock a list 30 s
    old was reused by 30 local ticks and a job was seen ended 30 s late (as many ticks,
    each costing CPU, for nothing)."""
    limits = runtime.module("model_step.batch_limits")
    scale = seconds_per_minute / 60.0
    create = max(limits.CREATE_TIMEOUT_SECONDS * scale, MIN_LOCAL_CREATE_TIMEOUT_SECONDS)
    grace = max(limits.RECONCILE_GRACE_SECONDS * scale, MIN_LOCAL_RECONCILE_GRACE_SECONDS)
    scaled = {
        "CREATE_TIMEOUT_SECONDS": create,
        "RECONCILE_GRACE_SECONDS": grace,
        "RECONCILE_AFTER_SECONDS": create + grace,
        # Longer than the local list takes to show a batch (none: it is consistent).
        "UNSEEN_CONFIRM_SECONDS": max(limits.UNSEEN_CONFIRM_SECONDS * scale, create + grace),
    }
    for name in (
        "CANCEL_AFTER_SECONDS",
        "LOST_UNKNOWN_SECONDS",
        "LOST_OPEN_SECONDS",
        "LATE_POLL_SECONDS",
        "BACKOFF_SECONDS",
        "BACKOFF_MAX_SECONDS",
    ):
        scaled[name] = getattr(limits, name) * scale
    scaled["LOST_OPEN_SECONDS"] = max(scaled["LOST_OPEN_SECONDS"], MIN_LOCAL_LOST_OPEN_SECONDS)
    for name, value in scaled.items():
        setattr(limits, name, value)
    anthropic: Any = runtime.module("model_step.anthropic_batches")
    anthropic.KEY_PROBLEM_WAIT_SECONDS *= scale
    bedrock: Any = runtime.module("model_step.bedrock_batches")
    bedrock.LIST_FRESH_SECONDS *= scale


def _batch_timeout_cap(settings: AsyncSettings) -> AsyncSettings:
    return replace(
        settings,
        timeout_cap_seconds=max(settings.timeout_cap_seconds, BATCH_TIMEOUT_CAP_SECONDS),
    )


def _resolved_target(resolver: Any, target: Any, rule: str) -> Any:
    where = f"{rule}.Targets.{target.target_id}"
    return replace(
        target,
        arn=resolver.resolve(target.arn, where),
        input_transformer=resolver.resolve(target.input_transformer, where),
    )
