"""Emulation of Lambda's asynchronous invocation (what EventBridge uses to invoke a function).

Per invocation, as Lambda does it:

- one request id for every attempt of the same async invocation;
- a function error (any exception, including Powertools' ``IdempotencyAlreadyInProgressError``:
  to Lambda it is just an error) is retried ``MaximumRetryAttempts`` times (0-2, from the
  template's EventInvokeConfig), one minute before the first retry and two minutes before
  the second; locally those waits are compressed (``AsyncSettings.seconds_per_minute``);
- when retries are exhausted (condition ``RetriesExhausted``) or the event is older than
  ``MaximumEventAgeInSeconds`` (``EventAgeExceeded``), the on-failure destination receives a
  record ``{"version","timestamp","requestContext","requestPayload","responseContext",
  "responsePayload"}`` exactly as Lambda writes it.

A killed attempt (:class:`~.lambda_faults.LambdaKilled` escaped the handler) is a function
error like any other to Lambda's async queue, and is retried; it is counted in
``FunctionStats.kills``.

Not emulated: Lambda's own timeout kill (a handler that overruns is counted in
``FunctionStats.overruns``, not stopped), throttling, and separate execution environments per
concurrent invocation (all invocations share one set of modules in this process).
"""

from __future__ import annotations

import copy
import datetime as dt
import random
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from . import identity
from .assembly import FunctionSpec
from .intrinsics import LOCAL_ACCOUNT, LOCAL_REGION
from .lambda_faults import LambdaKilled
from .scheduling import Scheduler, WorkTracker

Handler = Callable[[Any, Any], Any]
#: Opened around each handler call with its event (the engine attributes model requests).
InvocationScope = Callable[[Any], AbstractContextManager[None]]
# Lambda's documented async retry waits: 1 minute, then 2 minutes.
RETRY_WAIT_MINUTES = (1.0, 2.0)
DEFAULT_SECONDS_PER_MINUTE = 1.0
DEFAULT_RETRY_JITTER = 0.5
# 8 s: the model call's deadline is then 5 s (8 - the runtime's 3 s margin). At 4 s it was
# 1 s, and on 2 busy cores the local model took up to 1.1 s to answer (p99 0.27 s), so a
# request it had counted timed out and was billed again. 5 s is 4.5x that worst answer; and
# 8 s stays under the buffer queue's 540 s visibility timeout on the run's clock (9 s), as
# AWS keeps the Lambda timeout under it, so a killed invocation's lock has expired when its
# message comes back. See docs/local-run.md, "The model call's deadline".
DEFAULT_TIMEOUT_CAP_SECONDS = 8.0
# The model step's total deadline for a request is the remaining time minus this margin, at
# least MIN_MODEL_DEADLINE_SECONDS (lambda_src/model_step/model_call.py, model_timeout).
MODEL_DEADLINE_MARGIN_SECONDS = 3.0
MIN_MODEL_DEADLINE_SECONDS = 1.0


def model_deadline_seconds(remaining_seconds: float) -> float:
    """The deadline the model step gives a request with ``remaining_seconds`` left."""
    return max(MIN_MODEL_DEADLINE_SECONDS, remaining_seconds - MODEL_DEADLINE_MARGIN_SECONDS)


@dataclass(frozen=True)
class AsyncSettings:
    """Local time scale.

    ``seconds_per_minute`` [1.0]: local seconds per minute of Lambda's retry wait, so the
    first retry comes about 1 s after a failure and the second about 2 s after the next one.
    On the async (direct) path keep it longer than the longest attempt (a model timeout
    lasts the model deadline, 5 s with the default cap): a concurrent duplicate that meets
    the first delivery's idempotency record IN_PROGRESS is retried, and with waits shorter
    than that attempt it would use up its retries on ``IdempotencyAlreadyInProgressError``
    where minute-long waits let the first finish. The buffer-queue path waits for the
    holder's lock instead, whatever the clock.

    ``retry_jitter`` [0.5]: each wait is multiplied by a seeded factor in
    ``[1, 1 + retry_jitter)``. Lambda's waits are not exact; without a spread, two copies
    that failed together in this millisecond-precise emulator would retry in lockstep and
    keep meeting each other's record, which real waits (seconds of spread against
    sub-second attempts) make rare. ``seed`` [0] seeds the factors.

    ``timeout_cap_seconds`` [8.0]: the context never reports more remaining time than this
    (the template's Timeout when smaller). The model step gives a request the remaining
    time minus 3 s (at least 1 s, :func:`model_deadline_seconds`), so a hung model request
    ends after about 5 s locally, and a killed invocation's lock expires 8 s after it began.
    """

    seconds_per_minute: float = DEFAULT_SECONDS_PER_MINUTE
    timeout_cap_seconds: float = DEFAULT_TIMEOUT_CAP_SECONDS
    retry_jitter: float = DEFAULT_RETRY_JITTER
    seed: int = 0


@dataclass
class LambdaContext:
    """The Lambda context object handlers receive (the attributes Powertools reads)."""

    function_name: str
    memory_limit_in_mb: int
    invoked_function_arn: str
    aws_request_id: str
    deadline: float  # time.monotonic() value at which the invocation times out
    function_version: str = "$LATEST"
    identity: Any = None
    client_context: Any = None

    @property
    def log_group_name(self) -> str:
        """``/aws/lambda/<function name>``."""
        return f"/aws/lambda/{self.function_name}"

    @property
    def log_stream_name(self) -> str:
        """A stream name shaped like Lambda's."""
        return f"{dt.date.today():%Y/%m/%d}/[$LATEST]local"

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds until the (capped) timeout, never negative."""
        return max(0, int((self.deadline - time.monotonic()) * 1000))


@dataclass
class FunctionStats:
    """Counters of one function (thread-safe through ``lock``)."""

    deliveries: int = 0  # async invocations requested (first attempts)
    attempts: int = 0  # handler calls, retries included
    retries: int = 0
    succeeded: int = 0
    on_failure: int = 0  # invocations sent to the on-failure destination
    overruns: int = 0  # attempts that ran past the (capped) timeout
    kills: int = 0  # attempts killed (LambdaKilled): no cleanup ran
    errors: dict[str, int] = field(default_factory=dict)  # by exception type
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


@dataclass(frozen=True)
class FunctionIdentity:
    """Names the context and the on-failure record carry."""

    name: str
    arn: str


@dataclass
class _Invocation:
    event: Any
    request_id: str
    enqueued: float
    on_done: Callable[[bool], None] | None
    attempts: int = 0
    waited_nominal: float = 0.0  # Lambda-time seconds spent waiting between attempts
    waited_local: float = 0.0


def on_failure_record(
    *,
    event: Any,
    request_id: str,
    function_arn: str,
    condition: str,
    attempts: int,
    error: BaseException | None,
) -> dict[str, Any]:
    """The record Lambda sends to an on-failure destination of an async invocation."""
    response: dict[str, Any] | None = None
    if error is not None:
        response = {
            "errorMessage": str(error),
            "errorType": type(error).__name__,
            "requestId": request_id,
            "stackTrace": traceback.format_tb(error.__traceback__),
        }
    return {
        "version": "1.0",
        "timestamp": dt.datetime.now(dt.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z"),
        "requestContext": {
            "requestId": request_id,
            "functionArn": f"{function_arn}:$LATEST",
            "condition": condition,
            "approximateInvokeCount": attempts,
        },
        "requestPayload": event,
        "responseContext": {
            "statusCode": 200,
            "executedVersion": "$LATEST",
            "functionError": "Unhandled",
        },
        "responsePayload": response,
    }


class AsyncFunction:
    """One function's async invocation queue in front of its in-process handler.

    ``on_failure(record)`` delivers the on-failure record (None: the record is dropped, as
    Lambda does without a destination). Work runs on ``executor``; retry waits on
    ``scheduler``; ``tracker`` counts everything not yet settled.
    """

    def __init__(
        self,
        spec: FunctionSpec,
        handler: Handler,
        identity: FunctionIdentity,
        *,
        executor: Executor,
        scheduler: Scheduler,
        tracker: WorkTracker,
        settings: AsyncSettings,
        on_failure: Callable[[dict[str, Any]], None] | None,
        scope: InvocationScope | None = None,
    ) -> None:
        self.spec = spec
        self.scope: InvocationScope = scope or (lambda _event: nullcontext())
        self.identity = identity
        self.stats = FunctionStats()
        self._handler = handler
        self._executor = executor
        self._scheduler = scheduler
        self._tracker = tracker
        self._settings = settings
        self._on_failure = on_failure
        self._rng = random.Random(f"{settings.seed}:{spec.logical_id}")
        self._rng_lock = threading.Lock()

    @property
    def handler(self) -> Handler:
        """The in-process handler (for synchronous callers such as an SQS poller)."""
        return self._handler

    def invoke(self, event: Any, on_done: Callable[[bool], None] | None = None) -> None:
        """Queue one async invocation (``InvocationType=Event``); returns at once.

        ``on_done(succeeded)`` runs once the invocation is settled: a successful attempt,
        or the on-failure record sent.
        """
        invocation = _Invocation(
            # Each delivery gets its own copy: a handler must not see another's mutations.
            event=copy.deepcopy(event),
            request_id=str(uuid.uuid4()),
            enqueued=time.monotonic(),
            on_done=on_done,
        )
        with self.stats.lock:
            self.stats.deliveries += 1
        self._tracker.begin()
        self._submit(invocation)

    def context(self, request_id: str) -> LambdaContext:
        """A context for one attempt, its deadline capped by ``timeout_cap_seconds``."""
        timeout = min(float(self.spec.timeout_seconds), self._settings.timeout_cap_seconds)
        return LambdaContext(
            function_name=self.identity.name,
            memory_limit_in_mb=self.spec.memory_mb,
            invoked_function_arn=self.identity.arn,
            aws_request_id=request_id,
            deadline=time.monotonic() + timeout,
        )

    # -- internals ---------------------------------------------------------------------------
    def _submit(self, invocation: _Invocation) -> None:
        try:
            self._executor.submit(self._guarded_attempt, invocation)
        except RuntimeError as exc:  # executor shut down: the run is over
            self._tracker.fail(exc)
            self._tracker.end()

    def _guarded_attempt(self, invocation: _Invocation) -> None:
        try:
            # A worker thread may have been started inside another function's handler (a
            # PutEvents routed synchronously): outside the handler call it acts for nobody.
            with identity.acting_as(None):
                self._attempt(invocation)
        except BaseException as exc:  # A bug in the emulator, not in the handler.
            self._tracker.fail(exc)
            self._tracker.end()

    def _attempt(self, invocation: _Invocation) -> None:
        invocation.attempts += 1
        context = self.context(invocation.request_id)
        with self.stats.lock:
            self.stats.attempts += 1
        try:
            with identity.acting_as(self.spec.logical_id), self.scope(invocation.event):
                self._handler(invocation.event, context)
        except LambdaKilled as killed:  # A dead sandbox is a function error to Lambda too.
            with self.stats.lock:
                self.stats.kills += 1
            self._after_error(invocation, killed)
            return
        except Exception as error:  # Lambda treats every exception as a function error.
            self._count_error(error, context)
            self._after_error(invocation, error)
            return
        self.count_overrun(context)
        with self.stats.lock:
            self.stats.succeeded += 1
        self._settle(invocation, succeeded=True)

    def _after_error(self, invocation: _Invocation, error: BaseException) -> None:
        retries_done = invocation.attempts - 1
        if retries_done >= self.spec.retry_attempts:
            self._fail(invocation, "RetriesExhausted", error)
            return
        wait_minutes = RETRY_WAIT_MINUTES[min(retries_done, len(RETRY_WAIT_MINUTES) - 1)]
        with self._rng_lock:
            spread = 1.0 + self._rng.random() * self._settings.retry_jitter
        local_wait = wait_minutes * self._settings.seconds_per_minute * spread
        invocation.waited_nominal += wait_minutes * 60
        invocation.waited_local += local_wait
        if self._event_age(invocation) > self.spec.max_event_age_seconds:
            self._fail(invocation, "EventAgeExceeded", error)
            return
        with self.stats.lock:
            self.stats.retries += 1
        self._scheduler.call_later(local_wait, lambda: self._submit(invocation))

    def _event_age(self, invocation: _Invocation) -> float:
        """Age in Lambda time: real run time so far plus the uncompressed waits."""
        real = time.monotonic() - invocation.enqueued
        return real - invocation.waited_local + invocation.waited_nominal

    def _fail(self, invocation: _Invocation, condition: str, error: BaseException) -> None:
        with self.stats.lock:
            self.stats.on_failure += 1
        if self._on_failure is not None:
            # Lambda sends to the on-failure destination with the function's execution role.
            with identity.acting_as(self.spec.logical_id):
                self._on_failure(
                    on_failure_record(
                        event=invocation.event,
                        request_id=invocation.request_id,
                        function_arn=self.identity.arn,
                        condition=condition,
                        attempts=invocation.attempts,
                        error=error,
                    )
                )
        self._settle(invocation, succeeded=False)

    def _settle(self, invocation: _Invocation, *, succeeded: bool) -> None:
        try:
            if invocation.on_done is not None:
                invocation.on_done(succeeded)
        except BaseException as exc:  # The caller's callback failed: an emulator bug.
            self._tracker.fail(exc)
        finally:
            self._tracker.end()

    def _count_error(self, error: Exception, context: LambdaContext) -> None:
        self.count_overrun(context)
        with self.stats.lock:
            name = type(error).__name__
            self.stats.errors[name] = self.stats.errors.get(name, 0) + 1

    def count_overrun(self, context: LambdaContext) -> None:
        """Count an attempt that ended past ``context``'s deadline: Lambda would have killed
        it, and its lock may have expired under it (a loaded machine's, never injected)."""
        if context.get_remaining_time_in_millis() <= 0:
            with self.stats.lock:
                self.stats.overruns += 1


def function_identity(name: str, region: str = LOCAL_REGION) -> FunctionIdentity:
    """Name and ARN of a local function."""
    return FunctionIdentity(name, f"arn:aws:lambda:{region}:{LOCAL_ACCOUNT}:function:{name}")


def snapshot(stats: FunctionStats) -> Mapping[str, Any]:
    """A plain-dict copy of ``stats`` for reports."""
    with stats.lock:
        return {
            "deliveries": stats.deliveries,
            "attempts": stats.attempts,
            "retries": stats.retries,
            "succeeded": stats.succeeded,
            "on_failure": stats.on_failure,
            "overruns": stats.overruns,
            "kills": stats.kills,
            "errors": dict(stats.errors),
        }
