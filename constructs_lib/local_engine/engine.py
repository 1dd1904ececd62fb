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
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any

from . import identity
from .assembly import CloudAssembly, FunctionSpec
from .environment import UNSAFE_VARIABLES, environment_union, patched_environ
from .errors import AssemblyError, EmulatorError, RunTimeoutError
from .event_bus import EventRouter, LocalRule, bus_name, capture_put_events
from .event_patterns import EventPattern, PatternError
from .execution_environment import ExecutionEnvironment
from .iam import IamCheck, iam_check
from .intrinsics import LOCAL_REGION
from .lambda_async import (
    DEFAULT_SECONDS_PER_MINUTE,
    DEFAULT_TIMEOUT_CAP_SECONDS,
    AsyncFunction,
    AsyncSettings,
    function_identity,
    snapshot,
)
from .local_aws import LocalAws, local_aws, queue_url_for_arn, secret_arns
from .progress import Progress
from .scheduling import Scheduler, WorkTracker
from .sqs_source import DrainResult, drain_queue
from .targets import LambdaTarget, SnsTarget, Target

logger = logging.getLogger(__name__)

IN_PROGRESS_ERROR = "IdempotencyAlreadyInProgressError"
DEFAULT_RUN_TIMEOUT_SECONDS = 300.0


@dataclass(frozen=True)
class EngineSettings:
    """How the engine runs the stack (defaults in brackets).

    ``duplicates`` [1] copies of every event to each Lambda target; ``concurrency`` [4]
    worker threads; ``seconds_per_minute`` [1.0], ``timeout_cap_seconds`` [4.0] and ``seed``
    [0]: see :class:`~.lambda_async.AsyncSettings`; ``run_timeout_seconds`` [300];
    ``environment`` [none]: variables set over the functions' own (a local model's URL
    and key, for example); ``check_iam`` [True]: evaluate every AWS call a handler makes
    against its function's role (:mod:`.iam`).
    """

    duplicates: int = 1
    concurrency: int = 4
    seconds_per_minute: float = DEFAULT_SECONDS_PER_MINUTE
    timeout_cap_seconds: float = DEFAULT_TIMEOUT_CAP_SECONDS
    seed: int = 0
    run_timeout_seconds: float = DEFAULT_RUN_TIMEOUT_SECONDS
    environment: Mapping[str, str] = field(default_factory=dict)
    check_iam: bool = True


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
        self.environment = environment_union(assembly.functions(), aws.resolver)
        overlay = {
            **self.environment,
            "AWS_REGION": LOCAL_REGION,
            "AWS_DEFAULT_REGION": LOCAL_REGION,
            **settings.environment,
        }
        self._stack.enter_context(patched_environ(overlay, remove=UNSAFE_VARIABLES))
        self._runtime = runtime = self._stack.enter_context(ExecutionEnvironment(self.code_root))
        # Lambda's init phase is not on the compressed clock: import the SDK now, or the
        # first model call's ~1 s import would outlast a concurrent duplicate's retries.
        if any(spec.is_model_step for spec in assembly.functions()):
            importlib.import_module("anthropic")
        handlers = {spec.logical_id: runtime.load(spec.handler) for spec in assembly.functions()}

        pool = ThreadPoolExecutor(max_workers=settings.concurrency, thread_name_prefix="lambda")
        self._stack.callback(pool.shutdown, wait=True, cancel_futures=True)
        scheduler = Scheduler()
        self._stack.callback(scheduler.stop)
        async_settings = AsyncSettings(
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
                scheduler=scheduler,
                tracker=self.tracker,
                settings=async_settings,
                on_failure=self._on_failure_sender(spec),
            )
        self._router = EventRouter(self._local_rules())
        self._stack.enter_context(capture_put_events(self._router))

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
                    targets.append(LambdaTarget(function, self.tracker, self.settings.duplicates))
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
        try:
            idle = self.tracker.wait_idle(self.settings.run_timeout_seconds, self._tick)
        finally:
            if self.progress is not None:
                self.progress.close()
        if self.tracker.errors:
            error = self.tracker.errors[0]
            logger.error("emulator error", exc_info=error)
            raise EmulatorError(f"the local run failed internally: {type(error).__name__}: {error}")
        if not idle:
            raise RunTimeoutError(
                f"the pipeline had not settled after {self.settings.run_timeout_seconds:.0f} s "
                f"({self.tracker.pending} invocations still in flight)"
            )

    def _tick(self) -> None:
        progress = self.progress
        if progress is None or not progress.enabled:
            return
        stats = [snapshot(f.stats) for f in self.functions.values()]
        total = sum(s["deliveries"] for s in stats)
        done = sum(s["succeeded"] + s["on_failure"] for s in stats)
        requests = self._model_request_count() if self._model_request_count else 0
        progress.update(done, total, f"invocations settled, {requests} model requests")

    def drain_event_sources(self) -> list[DrainResult]:
        """Feed every SQS event source's messages to its function, as Lambda's poller does."""
        results = []
        sqs = self.aws.client("sqs")
        for mapping in self.assembly.event_source_mappings():
            if not mapping.enabled:
                continue
            queue = self.aws.physical[mapping.source_logical_id]
            function = self.functions[mapping.function_logical_id]

            def invoke(event: dict[str, Any], function: AsyncFunction = function) -> Any:
                # The poller invokes synchronously, one batch at a time.
                return function.handler(event, function.context(str(uuid.uuid4())))

            # Lambda's poller reads and deletes with the function's execution role.
            with identity.acting_as(function.spec.logical_id):
                result = drain_queue(sqs, queue.ref, queue.attributes["Arn"], mapping, invoke)
            logger.info("%s: drained %s", function.spec.display_name, result)
            results.append(result)
        return results

    def function_stats(self) -> dict[str, Mapping[str, Any]]:
        """Counters of every function, by display name."""
        return {f.spec.display_name: snapshot(f.stats) for f in self.functions.values()}


def _resolved_target(resolver: Any, target: Any, rule: str) -> Any:
    where = f"{rule}.Targets.{target.target_id}"
    return replace(
        target,
        arn=resolver.resolve(target.arn, where),
        input_transformer=resolver.resolve(target.input_transformer, where),
    )
