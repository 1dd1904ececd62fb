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

import json
import logging
import os
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import Any

from constructs_lib._runtime_environment import runtime_batch_limits
from constructs_lib.bedrock_models import claude_model_name, parse_model_id
from constructs_lib.local_engine.assembly import CloudAssembly, FunctionSpec, load_assembly
from constructs_lib.local_engine.bedrock_batch_jobs import LocalBedrockBatchJobs
from constructs_lib.local_engine.bedrock_iam import BedrockInvokeCheck
from constructs_lib.local_engine.engine import DrainResult, EngineSettings, LocalEngine
from constructs_lib.local_engine.errors import NoMatchingRuleError, RunTimeoutError, UsageError
from constructs_lib.local_engine.event_bus import DEFAULT_BUS
from constructs_lib.local_engine.handler_logs import count_emf_metric, handler_output_to
from constructs_lib.local_engine.lambda_async import model_deadline_seconds
from constructs_lib.local_engine.local_bedrock import LocalBedrockRuntime
from constructs_lib.local_engine.local_model import BILLED_USAGE, LocalMessagesAPI, RateLimiter
from constructs_lib.local_engine.message_batch_faults import BatchFaultRates, BatchFaults
from constructs_lib.local_engine.message_batches import BATCH_LIFETIME_SECONDS
from constructs_lib.local_engine.run_bound import (
    RunBound,
    RunWork,
    derive_run_bound,
    queue_horizon_seconds,
)
from constructs_lib.model_prices import request_cost

from .options import RunOptions, require_local_dependencies, validate_options
from .results import RunResult, count_csv_rows, read_outcome
from .s3_events import s3_object_created_event

logger = logging.getLogger(__name__)

LOCAL_API_KEY = "sk-ant-local-run-not-a-real-key"
#: The splitter's Powertools ``key_prefix`` (lambda_src/prospect_splitter/handler.py).
SPLIT_RECORD_PREFIX = "prospect-splitter.split_upload#"
SPLITTER_HANDLER = "prospect_splitter.handler.handler"
ROW_DETAIL_TYPE = "Prospect Row Validated"


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
        self._model: LocalMessagesAPI | None = None
        self._engine: LocalEngine | None = None
        self._bucket = ""
        self.split_retries = 0
        self._splitter_name = ""
        self.run_bound: RunBound | None = None  # None: --run-timeout was given
        #: With ``--provider bedrock`` and the IAM check: the InvokeModel check.
        self.bedrock_check: BedrockInvokeCheck | None = None
        #: The local Message Batches' injected faults (issue 33); None without the local model.
        self.batch_faults: BatchFaults | None = None
        #: Bedrock batch inference's control plane (issue 37), under ``--provider bedrock``
        #: with a batch step in the assembly.
        self.bedrock_jobs: LocalBedrockBatchJobs | None = None

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

    @property
    def model(self) -> LocalMessagesAPI | None:
        """The local Messages API (None with ``--model anthropic``)."""
        return self._model

    @property
    def engine(self) -> LocalEngine:
        """The engine running the stack."""
        if self._engine is None:
            raise RuntimeError("the pipeline is not started")
        return self._engine

    def _setup(self) -> None:
        options = self.options
        validate_options(options)
        require_local_dependencies()
        self.assembly = assembly = load_assembly(options.cdk_out, options.stack)
        self.log_path = options.log_file or _new_log_file()
        model_step = assembly.model_step_function()
        _check_provider(options, model_step)
        bedrock = options.provider == "bedrock"
        environment: dict[str, str] = {}
        if options.model == "local":
            server = LocalBedrockRuntime if bedrock else LocalMessagesAPI
            self._model = self._stack.enter_context(
                server(
                    labels=_labels(model_step),
                    fault_rate=options.fault_rate,
                    seed=options.seed,
                    # Longer than the model call's deadline the capped context leads to.
                    timeout_hold_seconds=model_deadline_seconds(options.timeout_cap_seconds) + 0.5,
                    rate_limit=RateLimiter(options.rate_limit, options.seconds_per_minute)
                    if options.rate_limit
                    else None,
                    # Prompt-cache TTLs run on the run's clock, as the retries do.
                    run_clock=lambda: time.monotonic() * 60.0 / options.seconds_per_minute,
                    batch_errored_rate=options.batch_errored_rate,
                    batch_expired_rate=options.batch_expired_rate,
                    refusal_rate=options.refusal_rate,
                )
            )
            if bedrock:
                # Read by the SDK's AnthropicBedrock; it signs with moto's fake credentials.
                environment["ANTHROPIC_BEDROCK_BASE_URL"] = self._model.base_url
                if any(spec.is_batch for spec in assembly.functions()):
                    self.bedrock_jobs = self._stack.enter_context(
                        self._bedrock_jobs_on_the_run_clock(self._model)
                    )
                    # Read by botocore: the batch step's bedrock client, signed as any other.
                    environment["AWS_ENDPOINT_URL_BEDROCK"] = self.bedrock_jobs.base_url
            else:
                self._batches_on_the_run_clock(self._model)
                # ANTHROPIC_API_KEY wins over the secret, so Secrets Manager is never called.
                environment["ANTHROPIC_API_KEY"] = LOCAL_API_KEY
                environment["ANTHROPIC_BASE_URL"] = self._model.base_url
        environment.update(self._delivery_environment(assembly))
        self._stack.enter_context(handler_output_to(self.log_path))
        run_timeout, note = options.run_timeout_seconds, "the bound --run-timeout gave"
        if run_timeout is None:
            self.run_bound = self._derived_bound(assembly, model_step)
            run_timeout = self.run_bound.total
            note = (
                f"the default bound, derived from the work, was {self.run_bound.describe()}; "
                "pass --run-timeout SECONDS to allow more"
            )
        settings = EngineSettings(
            duplicates=options.duplicates,
            concurrency=options.concurrency,
            seconds_per_minute=options.seconds_per_minute,
            timeout_cap_seconds=options.timeout_cap_seconds,
            seed=options.seed,
            run_timeout_seconds=run_timeout,
            run_timeout_note=note,
            environment=environment,
            redelivery_hooks=self._split_retry_hooks(assembly),
            kill_rate=options.kill_rate,
            throttle_rate=options.throttle_rate,
            batch_create_kill_rate=options.batch_create_kill_rate,
        )
        model = self._model
        self._engine = self._stack.enter_context(
            LocalEngine(
                assembly,
                settings,
                code_root=options.code_root or _default_code_root(),
                progress=options.progress,
                log_path=self.log_path,
                model_request_count=(lambda: model.request_count) if model else None,
            )
        )
        engine = self._engine
        if bedrock and engine.iam is not None and model is not None:
            # Entered last, so it wraps the model requests' observer: a denied InvokeModel
            # never reaches the local model, as a denied AWS call never reaches moto.
            self.bedrock_check = self._stack.enter_context(
                BedrockInvokeCheck(engine.iam, model.base_url).installed()
            )

    # -- Message Batches delivery (issue 19) -----------------------------------------------
    def _batches_on_the_run_clock(self, model: LocalMessagesAPI) -> None:
        """The local Message Batches keep epoch time (the runtime compares a batch's
        ``created_at`` with its own clock to reconcile and to cancel), and their processing
        delay and 24 h lifetime are converted to the run's clock instead."""
        options = self.options
        scale = options.seconds_per_minute / 60.0
        store = model.batches
        store.clock = time.time
        store.processing_delay = options.batch_delay_seconds * scale
        store.lifetime_seconds = BATCH_LIFETIME_SECONDS * scale
        store.cancel_delay_seconds *= scale
        store.archive_after_seconds *= scale
        store.seed = options.seed
        store.decide = self._per_occurrence(model)
        self.batch_faults = BatchFaults(
            BatchFaultRates(
                canceled_rate=options.batch_canceled_rate,
                lost_rate=options.batch_lost_rate,
                broken_read_rate=options.batch_broken_read_rate,
            ),
            options.seed,
        )
        if self.batch_faults.rates.any:
            self.batch_faults.install(store)

    def _bedrock_jobs_on_the_run_clock(self, model: LocalMessagesAPI) -> LocalBedrockBatchJobs:
        """Bedrock batch inference's control plane (issue 37): jobs read their input from and
        write their output to moto's S3 (through the engine's session, as Bedrock's own
        service role would: not a function's call, so not IAM-checked as one),
        end ``--batch-delay`` run seconds after their submission and expire after their
        timeout in run hours; each record is answered by the local model as a batch request,
        its faults drawn per occurrence as the Message Batches' are."""
        options = self.options
        scale = options.seconds_per_minute / 60.0
        decide = self._per_occurrence(model)
        record_errors: dict[str, str | int] = {
            "succeeded": "succeeded",
            "invalid_request_error": 400,
            "api_error": 500,
            "expired": 429,
        }
        ids = iter(range(1, 1 << 62))

        def answer(model_input: dict[str, Any], record_id: str, model_id: str) -> dict[str, Any]:
            parsed = parse_model_id(model_id)
            name = claude_model_name(parsed) if parsed else model.model
            return model.batches.answer({**model_input, "model": name}, f"req_job_{next(ids)}")

        return LocalBedrockBatchJobs(
            lambda: self.engine.aws.client("s3"),
            answer,
            decide=lambda record_id, model_input: record_errors[decide(record_id, model_input)],
            clock=time.time,
            processing_delay=options.batch_delay_seconds * scale,
            hour_seconds=3600.0 * scale,
            seed=options.seed,
        )

    def _per_occurrence(self, model: LocalMessagesAPI) -> Any:
        """Batch result faults drawn per occurrence of a custom_id, not per custom_id: the
        local model's own draw is fixed per custom_id, so a row drawn ``expired`` would be
        resubmitted forever (its age is on the wall clock: MAX_EVENT_AGE_SECONDS never binds
        locally). The n-th submission of a row meets the same fate whatever the timing."""
        seen: Counter[str] = Counter()
        lock = threading.Lock()
        seed = self.options.seed

        def decide(custom_id: str, params: dict[str, Any]) -> str:
            # A request the model refuses is refused inside a batch too.
            if model.model_problem({"model": model.model, **params}) is not None:
                return "invalid_request_error"
            with lock:
                occurrence = seen[custom_id]
                seen[custom_id] += 1
            draw = random.Random(f"{seed}:batch:{custom_id}:{occurrence}").random()
            if draw < model.batch_errored_rate:
                return "api_error"
            if draw < model.batch_errored_rate + model.batch_expired_rate:
                return "expired"
            return "succeeded"

        return decide

    def _delivery_environment(self, assembly: CloudAssembly) -> dict[str, str]:
        """``--delivery``: the splitter's ``DELIVERY``, exactly as ``-c delivery=...`` sets it
        (with a batch step in the template, the context changes nothing else)."""
        delivery = self.options.delivery
        if delivery is None:
            return {}
        if delivery != "realtime" and not any(spec.is_batch for spec in assembly.functions()):
            raise UsageError(
                f"--delivery {delivery} needs a Message Batches step in the assembly, which "
                "`-c delivery=realtime` leaves out: synthesize with -c delivery=auto (the "
                "default) or batch"
            )
        return {"DELIVERY": delivery}

    def _collect_batches(self, result: RunResult) -> None:
        """What the local Message Batches did: batches, requests, billed results."""
        engine = self.engine
        splitter = next(
            (s for s in engine.assembly.functions() if s.handler == SPLITTER_HANDLER), None
        )
        template = splitter.environment.get("DELIVERY") if splitter else None
        result.delivery = self.options.delivery or (
            template if isinstance(template, str) else "realtime"
        )
        if self._model is None:
            return
        if self.bedrock_jobs is not None:
            self._collect_bedrock_jobs(result, self.bedrock_jobs)
            return
        store = self._model.batches
        if self.batch_faults is not None:
            result.batch_faults = dict(sorted(self.batch_faults.injected.items()))
        batches = list(store.batches.values())
        result.batches = len(batches)
        result.batch_requests = sum(len(batch.requests) for batch in batches)
        result.batch_billed = store.billed
        result.batch_results = dict(store.result_counts)
        result.billed_requests += store.billed
        result.max_requests_per_key = max(
            result.max_requests_per_key, max(store.billed_by_custom_id.values(), default=0)
        )

    def _collect_bedrock_jobs(self, result: RunResult, jobs: LocalBedrockBatchJobs) -> None:
        """What the local Bedrock batch jobs did (issue 37): jobs, records, billed records."""
        made = list(jobs.jobs.values())
        result.batches = len(made)
        result.batch_requests = sum(len(job.records) for job in made)
        result.batch_billed = jobs.billed
        answered = sum(job.answered for job in made)
        errored = sum(job.errored for job in made)
        result.batch_results = {
            "succeeded": answered,
            "errored": errored,
            "unanswered": result.batch_requests - answered - errored,
        }
        result.billed_requests += jobs.billed
        result.max_requests_per_key = max(
            result.max_requests_per_key, max(jobs.billed_by_record.values(), default=0)
        )

    def _derived_bound(self, assembly: CloudAssembly, model_step: FunctionSpec) -> RunBound:
        """The default run timeout: the work of this file under these options."""
        options = self.options
        return derive_run_bound(
            RunWork(
                rows=count_csv_rows(options.csv_path) or 0,
                duplicates=options.duplicates,
                seconds_per_minute=options.seconds_per_minute,
                rate_limit=options.rate_limit,
                max_attempts=_attempt_budget(model_step),
                max_event_age_seconds=_max_event_age(model_step),
                queue_horizon_seconds=queue_horizon_seconds(assembly, model_step),
                fault_rate=options.fault_rate,
                kill_rate=options.kill_rate,
                throttle_rate=options.throttle_rate,
                batch_tail_seconds=self._batch_tail_seconds(_attempt_budget(model_step)),
            )
        )

    def _batch_tail_seconds(self, attempts: int) -> float:
        """How long (run-clock seconds) a row may wait on failing batches: once per attempt,
        a lost batch's bound (it must be seen ended, then unknown that long) or a canceled
        one's ``canceling``, each with its processing, a resubmission's wait and ticks."""
        options = self.options
        limits = runtime_batch_limits
        wait = options.batch_delay_seconds + 3 * limits.TICK_PERIOD_SECONDS
        if options.batch_lost_rate > 0:
            wait += limits.LOST_UNKNOWN_SECONDS + limits.BACKOFF_MAX_SECONDS
        elif options.batch_canceled_rate > 0 or options.batch_broken_read_rate > 0:
            wait += limits.BACKOFF_MAX_SECONDS
        else:
            return 0.0
        return float(attempts * wait)

    def _split_retry_hooks(self, assembly: CloudAssembly) -> dict[str, Any]:
        """``--duplicates N`` runs the split N times, as Lambda's retries of an attempt that
        failed after publishing every row (a PutEvents error on the summary, a timeout on
        the last write): Powertools releases the record of a failed attempt, so each retry
        re-splits from row 1, one after another, within the bus's 300 s dedup window. A
        plain redelivery of the S3 event would only be answered from the splitter's record
        and publish nothing, so it could not show publish-side dedup."""
        names = [s.display_name for s in assembly.functions() if s.handler == SPLITTER_HANDLER]
        self._splitter_name = names[0] if names else ""
        return dict.fromkeys(names, self._release_split_record)

    def _release_split_record(self, _event: Any) -> None:
        """Delete the splitter's idempotency records, as a failed attempt leaves them."""
        engine = self.engine
        table = engine.aws.session.resource("dynamodb").Table(
            engine.variable("IDEMPOTENCY_TABLE_NAME")
        )
        released = 0
        for item in table.scan(ProjectionExpression="id").get("Items", []):
            if str(item["id"]).startswith(SPLIT_RECORD_PREFIX):
                table.delete_item(Key={"id": item["id"]})
                released += 1
        self.split_retries += 1
        logger.info("split retry %s: released %s splitter record(s)", self.split_retries, released)

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> RunResult:
        """Upload, route until settled, drain the failure queue, and read the outcome."""
        options = self.options
        key = options.object_key or options.csv_path.name
        started = time.monotonic()
        event = self._upload(key)
        delivered = self.engine.put_event(DEFAULT_BUS, event)
        if not delivered:
            raise NoMatchingRuleError(
                f"the upload s3://…/{key} matched no rule of the stack; its S3 rule only "
                f"starts on keys matching {self._s3_key_pattern()} (rename the file or pass "
                "--key)"
            )
        try:
            self.engine.wait_until_settled()
        except RunTimeoutError as unsettled:
            # Issue 36: a run that does not settle still reports what it saw, denied calls
            # first (a refused grant keeps every row waiting); the caller prints it.
            unsettled.result = self._unsettled_result(key, started)
            raise
        return self._finish(key, started)

    def _finish(self, key: str, started: float, *, settled: bool = True) -> RunResult:
        drains = self.engine.drain_event_sources()
        result = self._collect(key, drains)
        result.settled = settled
        result.elapsed_s = round(time.monotonic() - started, 3)
        result.run_minutes = round(result.elapsed_s / self.options.seconds_per_minute, 3)
        return result

    def _unsettled_result(self, key: str, started: float) -> RunResult | None:
        """The counts of a run that did not settle (work still in flight), or None when they
        cannot be read."""
        try:
            return self._finish(key, started, settled=False)
        except Exception:
            logger.exception("the counts of the unsettled run could not be read")
            return None

    def _upload(self, key: str) -> dict[str, Any]:
        assert self.assembly is not None
        aws = self.engine.aws
        bucket = aws.ref(self.assembly.upload_bucket().logical_id)
        body = self.options.csv_path.read_bytes()
        response = aws.client("s3").put_object(Bucket=bucket, Key=key, Body=body)
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

    def _collect(self, key: str, drains: list[DrainResult]) -> RunResult:
        assert self.assembly is not None
        engine = self.engine
        options = self.options
        model_step = self.assembly.model_step_function()
        result = RunResult(
            file=str(options.csv_path),
            object_key=key,
            bucket=self._bucket,
            rows=count_csv_rows(options.csv_path),
            duplicates=options.duplicates,
            # A lost batch may have billed its rows before they go again, and errored
            # results can spend a row's budget: the run is checked against the budget then.
            faults_enabled=options.fault_rate > 0
            or options.kill_rate > 0
            or options.batch_lost_rate > 0
            or options.batch_errored_rate > 0,
            rate_limit=options.rate_limit,
            retry_attempts=_attempt_budget(model_step) - 1,
            model=options.model,
            provider=options.provider,
            log_file=str(self.log_path),
        )
        dynamodb = engine.aws.session.resource("dynamodb")
        read_outcome(
            result,
            dynamodb.Table(engine.variable("FAILURES_TABLE_NAME")),
            dynamodb.Table(engine.variable("PROSPECTS_TABLE_NAME")),
        )
        result.upload = self._upload_counts(result.upload_id)
        stats = engine.function_stats()
        result.functions = dict(stats)
        result.queues = engine.queue_stats()
        if engine.buses_v2 is not None:
            buses = engine.buses_v2.buses.values()
            result.deduplicated = sum(bus.stats.deduplicated for bus in buses)
            result.published = sum(bus.stats.published for bus in buses)
        result.row_entries_sent = (
            result.published + result.deduplicated + engine.router.published.get(ROW_DETAIL_TYPE, 0)
        )
        result.split_runs = stats.get(self._splitter_name, {}).get("deliveries", 0)
        # Every classify step's row deliveries (a batch step's schedule ticks are not in its
        # stats: the engine runs them apart).
        steps = self.assembly.model_step_functions()
        result.deliveries = sum(stats[step.display_name]["deliveries"] for step in steps)
        result.lambda_retries = sum(s["retries"] for s in stats.values())
        result.on_failure_records = sum(s["on_failure"] for s in stats.values())
        result.in_progress_exhausted = engine.in_progress_exhausted
        result.run_timeout_s = round(engine.settings.run_timeout_seconds, 1)
        requests = engine.model_requests
        result.billed_requests = sum(requests.billed.values())
        result.model_transport_errors = requests.transport_errors
        result.overruns = sum(stats[step.display_name]["overruns"] for step in steps)
        result.max_requests_per_key = requests.max_billed_per_key
        result.model_answer_ms = requests.answer_ms()
        result.kills = engine.faults.kills
        result.throttles = engine.faults.throttles
        result.batch_create_kills = engine.faults.batch_create_kills
        result.redriven_by_queue = engine.redriven()
        for step in steps:
            for dead_letters in engine.step_dead_letters(step):
                result.uncoded_dead_letters += dead_letters.uncoded
                result.unrun_dead_letters += dead_letters.redriven_uncoded_unrun
        result.left_on_queue = sum(d.left for d in drains)
        result.alert_messages = [m for target in engine.sns_targets for m in target.messages]
        result.alerts = len(result.alert_messages)
        if engine.iam is not None:
            result.iam_checked = True
            result.aws_calls = engine.iam.calls
            result.denied = len(engine.iam.denials)
            result.denials = [
                f"{d.function}: {d.action} on {d.resource}" for d in engine.iam.denials
            ]
            result.unused_grants = engine.iam.unused_grants()
            result.unevaluated_conditions = engine.iam.unevaluated_conditions
        if self.bedrock_check is not None:
            result.bedrock_invocations_checked = self.bedrock_check.evaluated
            result.bedrock_destinations = dict(self.bedrock_check.destinations)
        self._collect_batches(result)
        if self._model is not None:
            # Billed requests of both paths: realtime HTTP requests and batch results (Message
            # Batches', or Bedrock jobs' answered records).
            jobs = self.bedrock_jobs
            batch_billed = self._model.batches.billed if jobs is None else jobs.billed
            result.model_requests = self._model.request_count + batch_billed
            result.model_outcomes = dict(self._model.outcomes)
            result.requests_per_row = self._model.requests_per_row_by_plan()
            result.rate_limited = self._model.outcomes.get("429", 0)
            result.input_tokens = self._model.input_tokens
            result.output_tokens = self._model.output_tokens
            result.cache_creation_input_tokens = self._model.cache_creation_input_tokens
            result.cache_read_input_tokens = self._model.cache_read_input_tokens
            result.cache_writes = self._model.prompt_cache.writes
            result.cache_reads = self._model.prompt_cache.reads
            # Priced as the deployed step prices it: each billed request at its own tier (and
            # batch discount) at the step's MODEL_RATES (prop and context overrides
            # included), summed as the ledger sums them; null for a model without a price.
            result.cost_usd = billed_cost_usd(
                self._model.billed_usages,
                _step_variable(engine, "MODEL_RATES"),
                _step_variable(engine, "PROMPT_CACHE") or "5m",
            )
        else:
            # The real API cannot be asked; the step's own ModelRequests metric (EMF) can.
            sys.stdout.flush()  # The handler log while the run is open: EMF lines to disk.
            result.model_requests = count_emf_metric(self.log_path, "ModelRequests")
        return result

    def _upload_counts(self, upload_id: str | None) -> dict[str, Any] | None:
        """The upload's state and counts as the viewer and the mail tell them: the one
        counting rule (``prospect_contract.upload_status``) over its UploadsTable item."""
        if upload_id is None:
            return None
        table = self.engine.aws.session.resource("dynamodb").Table(
            self.engine.variable("UPLOADS_TABLE_NAME")
        )
        item = table.get_item(Key={"upload_id": upload_id}, ConsistentRead=True).get("Item")
        if item is None:
            return None
        rule = self.engine.runtime.module("prospect_contract.upload_status")
        counts: dict[str, Any] = rule.upload_counts(item, time.time())
        return counts

    # -- viewer ----------------------------------------------------------------------------
    def serve_viewer(self, host: str = "127.0.0.1", port: int = 0) -> Any:
        """Start the Prospect Viewer on this run's tables; returns its ``LocalServer``."""
        assert self.assembly is not None
        resource = self.assembly.by_path_suffix("/Viewer/Resource", "AWS::Lambda::Function")
        spec = self.assembly.function(resource.logical_id)
        package = spec.handler.split(".", 1)[0]
        local_server = self.engine.runtime.module(f"{package}.local_server")
        return local_server.serve(host, port, app=self.engine.functions[spec.logical_id].handler)


def _check_provider(options: RunOptions, model_step: FunctionSpec) -> None:
    """Refuse a run whose ``--provider`` is not the provider the template's step calls: a
    Bedrock step run as an Anthropic one would sign requests for the real bedrock-runtime,
    and the other way round the local model would never be called."""
    provider = str(model_step.environment.get("MODEL_PROVIDER") or "anthropic")
    if provider == options.provider:
        return
    if provider == "bedrock":
        raise UsageError(
            f"the stack's {model_step.display_name} calls Claude on Bedrock "
            "(MODEL_PROVIDER=bedrock): run it with --provider bedrock"
        )
    raise UsageError(
        f"--provider {options.provider} needs a stack whose {model_step.display_name} calls "
        f"{options.provider}, and {options.cdk_out}/{options.stack}.template.json calls the "
        f"Claude API: synthesize it with `cdk synth -c model_provider={options.provider}` "
        "(see docs/local-run.md)"
    )


def _attempt_budget(spec: FunctionSpec) -> int:
    """Billed attempts a row may use: the step's MAX_ATTEMPTS (buffer-queue path), else
    Lambda's async retries + 1 (direct path)."""
    raw = spec.environment.get("MAX_ATTEMPTS")
    if isinstance(raw, str) and raw.isdigit():
        return int(raw)
    return spec.retry_attempts + 1


def _max_event_age(spec: FunctionSpec) -> int:
    """How long the step holds a row (``MAX_EVENT_AGE_SECONDS``), else Lambda's async age."""
    raw = spec.environment.get("MAX_EVENT_AGE_SECONDS")
    if isinstance(raw, str) and raw.isdigit():
        return int(raw)
    return spec.max_event_age_seconds


def _labels(spec: FunctionSpec) -> tuple[str, ...]:
    raw = spec.environment.get("ALLOWED_LABELS")
    if not isinstance(raw, str):
        return ("hot", "warm", "cold")
    return tuple(part.strip() for part in raw.split(",") if part.strip()) or ("hot", "warm", "cold")


def run_pipeline(options: RunOptions) -> RunResult:
    """Run once and return the result (everything is torn down before returning)."""
    with LocalPipeline(options) as pipeline:
        return pipeline.run()


def _step_variable(engine: LocalEngine, name: str) -> str | None:
    """A variable every model step sets alike (two steps scope theirs), or None if unset."""
    try:
        return engine.variable(name)
    except KeyError:
        return None


def billed_cost_usd(
    usages: Mapping[tuple[tuple[int, ...], bool], int], model_rates: str | None, prompt_cache: str
) -> float | None:
    """Dollars of the local model's billed answers (``LocalMessagesAPI.billed_usages``: a
    count per usage and batch flag) at a step's ``MODEL_RATES``, each priced as the runtime
    prices it; None without a price."""
    if not model_rates:
        return None
    price = request_cost().StepPrice.from_json(model_rates)
    total = 0.0
    for (shape, batch), count in usages.items():
        usage = dict(zip(BILLED_USAGE, shape, strict=True))
        total += count * price.cost_usd(usage, prompt_cache=prompt_cache, batch=batch)
    return round(float(total), 9)
