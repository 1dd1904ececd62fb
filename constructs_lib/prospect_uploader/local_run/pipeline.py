"""Orchestration of one local run: the stack from ``cdk.out``, moto, the real handlers.

Sequence: read the cloud assembly; create its buckets, tables, queue, buses and topic in
moto; set the union of the functions' environments; import the handlers fresh; upload the
CSV and emit S3's ``Object Created`` event on the default bus; route every event by the
template's rules (Lambda targets as async invocations with retries and on-failure records,
SNS targets as published messages) until nothing is left in flight; drain the failure queue
into its event-source function; read the outcome back from the tables.

Typical use::

    result = run_pipeline(RunOptions(csv_path=Path("data/prospects-sample.csv"), duplicates=3))
    checks = check_invariants(result)
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

from .assembly import CloudAssembly, FunctionSpec, load_assembly
from .environment import UNSAFE_VARIABLES, environment_union, patched_environ
from .errors import (
    AssemblyError,
    EmulatorError,
    NoMatchingRuleError,
    RunTimeoutError,
)
from .event_bus import DEFAULT_BUS, EventRouter, LocalRule, bus_name, capture_put_events
from .event_patterns import EventPattern, PatternError
from .execution_environment import ExecutionEnvironment
from .handler_logs import count_emf_metric, handler_output_to
from .intrinsics import LOCAL_REGION
from .lambda_async import (
    AsyncFunction,
    AsyncSettings,
    function_identity,
    snapshot,
)
from .local_aws import LocalAws, local_aws, queue_url_for_arn
from .local_model import LocalMessagesAPI
from .options import RunOptions, require_local_dependencies, validate_options
from .results import RunResult, count_csv_rows, read_outcome
from .s3_events import s3_object_created_event
from .scheduling import Scheduler, WorkTracker
from .sqs_source import DrainResult, drain_queue
from .targets import LambdaTarget, SnsTarget, Target

logger = logging.getLogger(__name__)

LOCAL_API_KEY = "sk-ant-local-run-not-a-real-key"
IN_PROGRESS_ERROR = "IdempotencyAlreadyInProgressError"


def _new_log_file() -> Path:
    descriptor, name = tempfile.mkstemp(prefix="prospect-uploader-", suffix=".log")
    os.close(descriptor)  # Reopened for appending by handler_output_to.
    return Path(name)


def _default_code_root() -> Path:
    from constructs_lib._paths import lambda_src_root

    return lambda_src_root()


class LocalPipeline:
    """The running local stack. ``with LocalPipeline(options) as pipeline: pipeline.run()``.

    Everything (moto state, environment, fresh handler modules, the local model) lives until
    the context closes, so :meth:`serve_viewer` can show the run's results afterwards.
    """

    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self.assembly: CloudAssembly | None = None
        self.log_path = Path()
        self._stack = ExitStack()
        self._tracker = WorkTracker()
        self._functions: dict[str, AsyncFunction] = {}
        self._sns_targets: list[SnsTarget] = []
        self._in_progress_exhausted = 0
        self._counter_lock = threading.Lock()
        self._model: LocalMessagesAPI | None = None
        self._aws: LocalAws | None = None
        self._env: dict[str, str] = {}
        self._runtime: ExecutionEnvironment | None = None
        self._router: EventRouter | None = None
        self._bucket = ""

    # -- setup -----------------------------------------------------------------------------
    def __enter__(self) -> LocalPipeline:
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

    def _setup(self) -> None:
        options = self.options
        validate_options(options)
        require_local_dependencies()
        self.assembly = assembly = load_assembly(options.cdk_out, options.stack)
        self.log_path = options.log_file or _new_log_file()
        model_step = assembly.model_step_function()
        if options.model == "local":
            self._model = self._stack.enter_context(
                LocalMessagesAPI(
                    labels=_labels(model_step),
                    fault_rate=options.fault_rate,
                    seed=options.seed,
                    # Longer than the SDK timeout the capped context leads to (>= 1 s).
                    timeout_hold_seconds=max(1.0, options.timeout_cap_seconds - 3.0) + 0.5,
                )
            )
        self._stack.enter_context(handler_output_to(self.log_path))
        self._aws = aws = self._stack.enter_context(local_aws(assembly))
        self._env = environment_union(assembly.functions(), aws.resolver)
        overlay = {**self._env, "AWS_REGION": LOCAL_REGION, "AWS_DEFAULT_REGION": LOCAL_REGION}
        if self._model is not None:
            # ANTHROPIC_API_KEY wins over the secret, so Secrets Manager is never called.
            overlay["ANTHROPIC_API_KEY"] = LOCAL_API_KEY
            overlay["ANTHROPIC_BASE_URL"] = self._model.base_url
        self._stack.enter_context(patched_environ(overlay, remove=UNSAFE_VARIABLES))
        self._runtime = runtime = self._stack.enter_context(
            ExecutionEnvironment(options.code_root or _default_code_root())
        )
        # Lambda's init phase is not on the compressed clock: import the SDK now, or the
        # first model call's ~1 s import would outlast a concurrent duplicate's retries.
        importlib.import_module("anthropic")
        handlers = {spec.logical_id: runtime.load(spec.handler) for spec in assembly.functions()}

        pool = ThreadPoolExecutor(max_workers=options.concurrency, thread_name_prefix="lambda")
        self._stack.callback(pool.shutdown, wait=True, cancel_futures=True)
        scheduler = Scheduler()
        self._stack.callback(scheduler.stop)
        settings = AsyncSettings(
            seconds_per_minute=options.seconds_per_minute,
            timeout_cap_seconds=options.timeout_cap_seconds,
            seed=options.seed,
        )
        for spec in assembly.functions():
            self._functions[spec.logical_id] = AsyncFunction(
                spec,
                handlers[spec.logical_id],
                function_identity(aws.ref(spec.logical_id)),
                executor=pool,
                scheduler=scheduler,
                tracker=self._tracker,
                settings=settings,
                on_failure=self._on_failure_sender(spec),
            )
        self._router = EventRouter(self._local_rules())
        self._stack.enter_context(capture_put_events(self._router))

    def _on_failure_sender(self, spec: FunctionSpec) -> Callable[[dict[str, Any]], None] | None:
        if spec.on_failure is None:
            return None
        assert self._aws is not None
        arn = self._aws.resolver.resolve(spec.on_failure, f"{spec.logical_id}.OnFailure")
        queue_url = queue_url_for_arn(self._aws.physical, arn)
        if queue_url is None:
            raise AssemblyError(
                f"{spec.display_name}: on-failure destination {arn} is not an SQS queue of "
                "the stack; only SQS destinations are emulated"
            )
        sqs = self._aws.client("sqs")

        def send(record: dict[str, Any]) -> None:
            error_type = (record.get("responsePayload") or {}).get("errorType")
            if error_type == IN_PROGRESS_ERROR:
                with self._counter_lock:
                    self._in_progress_exhausted += 1
            logger.warning(
                "%s: on-failure record (%s, %s)",
                spec.display_name,
                record["requestContext"]["condition"],
                error_type,
            )
            sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps(record, default=str))

        return send

    def _local_rules(self) -> list[LocalRule]:
        assert self.assembly is not None and self._aws is not None
        resolver = self._aws.resolver
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
                    function = self._functions[str(target.resource_logical_id)]
                    targets.append(LambdaTarget(function, self._tracker, self.options.duplicates))
                elif target.resource_type == "AWS::SNS::Topic":
                    resolved = _resolved_target(resolver, target, spec.display_name)
                    sns = SnsTarget(
                        f"{spec.display_name} -> topic",
                        resolved.arn,
                        resolved,
                        self._aws.client("sns"),
                    )
                    self._sns_targets.append(sns)
                    targets.append(sns)
                else:
                    raise AssemblyError(
                        f"{spec.display_name}: target type {target.resource_type} is not emulated"
                    )
            bus = bus_name(resolver.resolve(spec.event_bus, where) if spec.event_bus else None)
            rules.append(LocalRule(spec.display_name, bus, pattern, targets))
        return rules

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> RunResult:
        """Upload, route until settled, drain the failure queue, and read the outcome."""
        assert self.assembly is not None and self._aws is not None and self._router is not None
        options = self.options
        key = options.object_key or options.csv_path.name
        event = self._upload(key)
        delivered = self._router.put(DEFAULT_BUS, event)
        if not delivered:
            raise NoMatchingRuleError(
                f"the upload s3://…/{key} matched no rule of the stack; its S3 rule only "
                f"starts on keys matching {self._s3_key_pattern()} (rename the file or pass "
                "--key)"
            )
        self._wait_until_settled()
        drains = self._drain_event_sources()
        return self._collect(key, drains)

    def _upload(self, key: str) -> dict[str, Any]:
        assert self.assembly is not None and self._aws is not None
        bucket = self._aws.ref(self.assembly.upload_bucket().logical_id)
        body = self.options.csv_path.read_bytes()
        response = self._aws.client("s3").put_object(Bucket=bucket, Key=key, Body=body)
        logger.info("uploaded %s bytes to s3://%s/%s", len(body), bucket, key)
        self._bucket = bucket
        return s3_object_created_event(
            bucket, key, len(body), response["ETag"], response.get("VersionId")
        )

    def _s3_key_pattern(self) -> str:
        assert self.assembly is not None
        for rule in self.assembly.rules():
            if "aws.s3" in (rule.event_pattern.get("source") or []):
                key = ((rule.event_pattern.get("detail") or {}).get("object") or {}).get("key")
                return json.dumps(key)
        return "(no S3 rule)"

    def _wait_until_settled(self) -> None:
        progress = self.options.progress
        try:
            idle = self._tracker.wait_idle(self.options.run_timeout_seconds, self._tick)
        finally:
            if progress is not None:
                progress.close()
        if self._tracker.errors:
            error = self._tracker.errors[0]
            logger.error("emulator error", exc_info=error)
            raise EmulatorError(
                f"the local run failed internally: {type(error).__name__}: {error} "
                f"(traceback in {self.log_path})"
            )
        if not idle:
            raise RunTimeoutError(
                f"the pipeline had not settled after {self.options.run_timeout_seconds:.0f} s "
                f"({self._tracker.pending} invocations still in flight)"
            )

    def _tick(self) -> None:
        progress = self.options.progress
        if progress is None or not progress.enabled:
            return
        stats = [snapshot(f.stats) for f in self._functions.values()]
        total = sum(s["deliveries"] for s in stats)
        done = sum(s["succeeded"] + s["on_failure"] for s in stats)
        requests = self._model.request_count if self._model is not None else 0
        progress.update(done, total, f"invocations settled, {requests} model requests")

    def _drain_event_sources(self) -> list[DrainResult]:
        assert self.assembly is not None and self._aws is not None
        results = []
        sqs = self._aws.client("sqs")
        for mapping in self.assembly.event_source_mappings():
            if not mapping.enabled:
                continue
            queue = self._aws.physical[mapping.source_logical_id]
            function = self._functions[mapping.function_logical_id]

            def invoke(event: dict[str, Any], function: AsyncFunction = function) -> Any:
                # The poller invokes synchronously, one batch at a time.
                return function.handler(event, function.context(str(uuid.uuid4())))

            result = drain_queue(sqs, queue.ref, queue.attributes["Arn"], mapping, invoke)
            logger.info("%s: drained %s", function.spec.display_name, result)
            results.append(result)
        return results

    def _collect(self, key: str, drains: list[DrainResult]) -> RunResult:
        assert self.assembly is not None and self._aws is not None
        options = self.options
        model_step = self.assembly.model_step_function()
        result = RunResult(
            file=str(options.csv_path),
            object_key=key,
            bucket=self._bucket,
            rows=count_csv_rows(options.csv_path),
            duplicates=options.duplicates,
            faults_enabled=options.fault_rate > 0,
            retry_attempts=model_step.retry_attempts,
            model=options.model,
            log_file=str(self.log_path),
        )
        dynamodb = self._aws.session.resource("dynamodb")
        read_outcome(
            result,
            dynamodb.Table(self._env["FAILURES_TABLE_NAME"]),
            dynamodb.Table(self._env["PROSPECTS_TABLE_NAME"]),
        )
        stats = {f.spec.display_name: snapshot(f.stats) for f in self._functions.values()}
        result.functions = stats
        result.deliveries = stats[model_step.display_name]["deliveries"]
        result.lambda_retries = sum(s["retries"] for s in stats.values())
        result.on_failure_records = sum(s["on_failure"] for s in stats.values())
        result.in_progress_exhausted = self._in_progress_exhausted
        result.left_on_queue = sum(d.left for d in drains)
        result.alert_messages = [m for target in self._sns_targets for m in target.messages]
        result.alerts = len(result.alert_messages)
        if self._model is not None:
            result.model_requests = self._model.request_count
            result.model_outcomes = dict(self._model.outcomes)
        else:
            # The real API cannot be asked; the step's own ModelRequests metric (EMF) can.
            sys.stdout.flush()  # The handler log while the run is open: EMF lines to disk.
            result.model_requests = count_emf_metric(self.log_path, "ModelRequests")
        return result

    # -- viewer ----------------------------------------------------------------------------
    def serve_viewer(self, host: str = "127.0.0.1", port: int = 0) -> Any:
        """Start the Prospect Viewer on this run's tables; returns its ``LocalServer``."""
        assert self.assembly is not None and self._runtime is not None
        resource = self.assembly.by_path_suffix("/Viewer/Resource", "AWS::Lambda::Function")
        spec = self.assembly.function(resource.logical_id)
        package = spec.handler.split(".", 1)[0]
        local_server = self._runtime.module(f"{package}.local_server")
        return local_server.serve(host, port, app=self._functions[spec.logical_id].handler)


def _labels(spec: FunctionSpec) -> tuple[str, ...]:
    raw = spec.environment.get("ALLOWED_LABELS")
    if not isinstance(raw, str):
        return ("hot", "warm", "cold")
    return tuple(part.strip() for part in raw.split(",") if part.strip()) or ("hot", "warm", "cold")


def _resolved_target(resolver: Any, target: Any, rule: str) -> Any:
    where = f"{rule}.Targets.{target.target_id}"
    return replace(
        target,
        arn=resolver.resolve(target.arn, where),
        input_transformer=resolver.resolve(target.input_transformer, where),
    )


def run_pipeline(options: RunOptions) -> RunResult:
    """Run once and return the result (everything is torn down before returning)."""
    with LocalPipeline(options) as pipeline:
        return pipeline.run()
