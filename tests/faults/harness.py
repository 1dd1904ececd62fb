"""A fault lab for the model step: the real handler behind moto's SQS, on a movable clock.

What is real: the runtime (``model_step``), Powertools idempotency, the Anthropic SDK talking
HTTP to the fake Messages API or (``provider="bedrock"``) to the fake Bedrock runtime on
127.0.0.1, moto's DynamoDB, SQS and EventBridge, with the step's own settings read from the
synthesized template (:mod:`.lab_settings`).

What is emulated, as AWS documents it:

- **Lambda's SQS poller** (:meth:`FaultLab.poll`): receive one message (batch size 1), hand
  it to the handler in Lambda's record shape, delete it unless it is reported as a batch
  item failure. A *throttle* receives the message and never invokes: it comes back after its
  visibility timeout with a higher receive count. A *kill* ends the invocation at a chosen
  point (:class:`LambdaKilled` is a ``BaseException``: no ``except Exception`` and no
  Powertools cleanup runs, just as nothing runs after a real kill); the message comes back
  after its visibility timeout and the record's lock expires at the invocation's deadline.
- **Time** (:class:`MovableClock`, stopped): a clock that moves only when the schedule moves
  it, read by moto's SQS, Powertools' lock and record expiries, the runtime's clock, the
  Lambda context and the model call's total deadline (:meth:`MovableClock.deadlines_installed`).
  A slow answer's pieces arrive at once and carry their delay as clock time (:mod:`.hooks`),
  so what a schedule does is the same on a loaded machine as on an idle one.
- **SQS rules moto lacks** (:mod:`.sqs_rules`): message sizes in bytes, retention.
- **The result bus** (:mod:`.result_bus`): classic in moto, v2 answered by the lab.
- **An operator** moving DLQ messages back to the buffer queue (the console's "Start DLQ
  redrive"): each becomes a new message; whether its attributes and receive count survive
  is not documented, so both are exercised.

What the lab sees is kept per key and lifetime (:mod:`.observed`); the hook points
(:mod:`.hooks`) put faults in and take observations out.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
import time
import types
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import boto3
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine
from moto.sqs import models as sqs_models

from tests.fakes import FakeBedrockRuntime, FakeMessagesAPI

from .lab_settings import QueueSettings
from .observed import Life, Send
from .rows import ACCOUNT, REGION

T = TypeVar("T")

TABLE = "fault-lab-idempotency"
#: Invocations one life of a key may take before the lab calls its cycle unbounded. A key
#: needs far fewer: three attempts, a few kills, waits for a killed holder's lock, two
#: put-backs from the redrive queue, rate-limit waits (a persistent one waits 900 s at a time
#: for at most ``max_event_age``, 16 waits in 4 hours), a few copies.
MAX_INVOCATIONS_PER_LIFE = 100
#: Polls a drain may take beyond its lives' own caps before the lab calls it unbounded.
MAX_DRAIN_POLLS = 200
#: Seconds the lab waits (real time) for the fake API to read every request sent.
READ_WAIT_SECONDS = 5.0
#: The Bedrock model id the lab's Bedrock steps call (an inference profile).
BEDROCK_MODEL_ID = "us.anthropic.claude-haiku-5-5"
#: Real seconds a model request's socket may wait when its deadline runs on the lab's clock:
#: the fakes answer at once, so only a machine that stalls that long can reach it.
REAL_TIMEOUT_SECONDS = 5.0


class LambdaKilled(BaseException):
    """The invocation was killed (timeout, out of memory): nothing after this point runs."""


class Unbounded(Exception):
    """A key cycles without end: the lab stops the schedule (a ``bounded`` violation)."""


class MovableClock:
    """Real time plus an offset; :meth:`advance` moves every reader forward at once.
    ``stopped``: the clock starts at the real time it is made and moves only by
    :meth:`advance` (the fault lab's), so no reading depends on how fast the machine is."""

    def __init__(self, *, stopped: bool = False) -> None:
        self.offset = 0.0
        #: Where a stopped clock started (None: it runs with real time).
        self.stopped_at = time.time() if stopped else None

    def now(self) -> float:
        return (time.time() if self.stopped_at is None else self.stopped_at) + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Make moto's SQS, Powertools' idempotency and the runtime read this clock."""
        import aws_lambda_powertools.utilities.idempotency.base as pt_base
        import aws_lambda_powertools.utilities.idempotency.persistence.base as pt_persistence
        import aws_lambda_powertools.utilities.idempotency.persistence.datarecord as pt_record
        import aws_lambda_powertools.utilities.idempotency.persistence.dynamodb as pt_dynamodb
        import model_step.clock

        clock = self

        class _Datetime(dt.datetime):
            @classmethod
            def now(cls, tz: dt.tzinfo | None = None) -> _Datetime:  # type: ignore[override]
                return cls.fromtimestamp(clock.now(), tz)  # a _Datetime, made once

        shim = types.SimpleNamespace(datetime=_Datetime, timedelta=dt.timedelta, UTC=dt.UTC)
        patches: list[tuple[Any, str, Any]] = [
            (sqs_models, "unix_time", lambda when=None: clock.now()),
            (sqs_models, "unix_time_millis", lambda when=None: clock.now() * 1000.0),
            (model_step.clock, "now", clock.now),
        ]
        patches += [(module, "dt", shim) for module in (pt_base, pt_persistence, pt_record)]
        patches.append((pt_dynamodb, "dt", shim))
        with _patched(patches):
            yield

    @contextlib.contextmanager
    def deadlines_installed(self) -> Iterator[None]:
        """Make the model call's total deadline (``model_step.deadline``) run on this clock.

        The deadline then passes only when the lab moves the clock: a slow answer's pieces
        move it (:mod:`.hooks`), a plain answer never does, however long a loaded machine
        takes to serve it. The deadline's watchdog, which shuts a socket down at the deadline
        in real time, is left out: no read blocks here (the fakes answer at once), and the
        check on every piece of the body still ends a slow answer at its deadline."""
        import model_step.deadline as deadline

        patches = [
            (deadline, "time", types.SimpleNamespace(monotonic=self.now)),
            (deadline, "_Watchdog", _NoWatchdog),
        ]
        with _patched(patches):
            yield


@contextlib.contextmanager
def _patched(patches: list[tuple[Any, str, Any]]) -> Iterator[None]:
    """Each ``(target, name, value)`` set for the block, the old values put back after."""
    saved = [(target, name, getattr(target, name)) for target, name, _ in patches]
    for target, name, value in patches:
        setattr(target, name, value)
    try:
        yield
    finally:
        for target, name, value in saved:
            setattr(target, name, value)


class _NoWatchdog:
    """``model_step.deadline``'s watchdog on a clock that moves only when told: nothing to
    interrupt in real time."""

    def __init__(self, response: Any, end: float) -> None:
        pass

    def cancel(self) -> None:
        pass


@dataclass
class LambdaContext:
    """The Lambda context of one invocation, its deadline on the lab's clock."""

    clock: MovableClock
    deadline: float
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_name: str = "fault-lab"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:fault-lab"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - self.clock.now()) * 1000))


@dataclass
class Fault:
    """What happens to one poll: a throttle, or a kill / failed call at a hook point.

    Hook points are counted through the invocation: each AWS call counts twice (before it is
    made, after it applied) and the model request twice (before it is sent, after it was
    answered). ``kill_at`` kills at that point; ``fail_at`` makes the AWS call there fail
    with a throttling error (after it applied, when it is an "after" point: a timeout whose
    write went through). ``kill_on`` / ``fail_on`` name the point instead: ``(kind,
    operation, n)``, the n-th ``kind`` ("before" / "after") point of ``operation``
    ("model", "PutItem", "UpdateItem", "SendMessage", "PutEvents", ...). ``hook_fails``:
    ``on_outcome`` raises in this invocation.
    """

    throttle: bool = False
    kill_at: int | None = None
    fail_at: int | None = None
    api: str = "ok"
    kill_on: tuple[str, str, int] | None = None
    fail_on: tuple[str, str, int] | None = None
    hook_fails: bool = False

    @property
    def count(self) -> int:
        """The faults this poll injects (0: a clean poll)."""
        points = (self.kill_at, self.fail_at, self.kill_on, self.fail_on)
        return (
            int(self.throttle)
            + sum(1 for point in points if point is not None)
            + int(self.api != "ok")
            + int(self.hook_fails)
        )


class ClientPool:
    """A session's clients, made once per service and config for every step of a test module:
    what ``ModelStep`` asks of its ``boto3_session`` (``client(name, config=...)``).

    Each schedule builds a new step, and each step made its three or four clients again (a
    client costs about as much CPU as twenty calls: 5 % of a schedule module). A Lambda
    container keeps its clients across invocations the same way. The clients are made after
    the lab's hooks are on the session, so each carries them. Each step registers handlers on
    the clients it gets (the runtime's ``misconfiguration.watch``, Powertools' user-agent
    feature for each persistence layer): a pooled client registers each once per event,
    however many steps ask (:func:`_register_once`)."""

    def __init__(self, session: boto3.session.Session) -> None:
        self.session = session
        self._clients: dict[tuple[str, int], tuple[Any, Any]] = {}

    def client(self, service_name: str, config: Any = None) -> Any:
        key = (service_name, id(config))
        if key not in self._clients:
            client = self.session.client(service_name, config=config)
            _register_once(client.meta.events)
            self._clients[key] = (client, config)  # the config kept: its id stays its own
        return self._clients[key][0]


def _register_once(events: Any) -> None:
    """Make ``events.register`` skip a handler that does what one already registered for the
    event does: the same function, or a new closure of the same code over the same values
    (Powertools makes one per persistence layer). Without a ``unique_id`` botocore keeps
    every registration, and calls each on every request."""
    register = events.register
    seen: set[tuple[str, Any]] = set()

    def register_once(event_name: str, handler: Any, unique_id: Any = None, **options: Any):
        if unique_id is None:
            key = (event_name, _what_it_does(handler))
            if key in seen:
                return
            seen.add(key)
        register(event_name, handler, unique_id=unique_id, **options)

    events.register = register_once


def _what_it_does(handler: Any) -> Any:
    """``handler`` itself, or for a closure its code and the values it captured."""
    cells = getattr(handler, "__closure__", None)
    if not cells:
        return handler
    try:
        captured = tuple(cell.cell_contents for cell in cells)
        hash(captured)
    except (TypeError, ValueError):  # an empty cell, or a value that is not hashable
        return handler
    return handler.__code__, captured


def unsigned(session: boto3.session.Session) -> boto3.session.Session:
    """``session``, its clients' requests sent without a SigV4 signature (every client made
    from it after this call).

    Signing was about 6 % of a schedule's CPU (canonical request, payload hash, HMACs), and
    nothing reads the signature: moto checks none (it reads only the access key from the
    ``Authorization`` header, to pick the account; without the header it picks the same
    default account, and SQS, DynamoDB and EventBridge answer the same), and the fault lab
    tests what the step does with AWS's answers, not botocore's signing. Nor can it hide a
    bug of ours from the real service: the step never signs, passes no credentials and
    picks no signer (botocore signs with the Lambda role's credentials, for the region and
    service the request is sent to, and the request's URL still carries both here, so a
    wrong region still meets an empty moto backend). Only the lab's own sessions are
    unsigned; every other test signs as in AWS."""
    session.events.register("choose-signer", _no_signature)
    return session


def _no_signature(**_: Any) -> Any:
    import botocore

    return botocore.UNSIGNED


@dataclass
class LabWorld:
    """One moto account, the two fake model APIs and the hooked session of a test module."""

    api: FakeMessagesAPI
    bedrock: FakeBedrockRuntime
    step_session: boto3.session.Session
    lab_session: boto3.session.Session
    clock: MovableClock
    settings: QueueSettings
    #: The model call's deadline runs on ``clock`` (False: on real time, for a test that
    #: needs a client to give up in real time).
    deadlines_on_the_clock: bool = True
    #: The lab of the schedule running now (None between schedules).
    lab: Any = None
    #: Every model request sent, by send number (the fakes' scripts read it).
    sent: dict[str, Send] = field(default_factory=dict)
    _lab_clients: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        #: What each schedule's step gets as its ``boto3_session``: ``step_session``'s
        #: clients, made once for the module's schedules.
        self.step_clients = ClientPool(self.step_session)

    def lab_client(self, service: str) -> Any:
        """The lab's own ``service`` client, made once for the module's schedules (creating a
        client costs about as much CPU as twenty calls)."""
        if service not in self._lab_clients:
            self._lab_clients[service] = self.lab_session.client(service)
        return self._lab_clients[service]


@dataclass
class Persistent:
    """Faults that outlast one poll: they hold through the drain unless lifted."""

    #: By row value: the behaviour of every request of that row.
    api: dict[int, str] = field(default_factory=dict)
    #: Row values whose every invocation is killed right after the model answered.
    killed_after_answer: set[int] = field(default_factory=set)
    #: The DLQ refuses every send (the drain lifts it unless ``dlq_persistent``).
    dlq_refuses: bool = False
    dlq_persistent: bool = False
    #: ``on_outcome`` raises for this many more calls.
    hook_failures: int = 0
    #: By row value: named points (``Fault.kill_on``) where the row's next invocations that
    #: reach them are killed, one invocation each, in order.
    kill_points: dict[int, list[tuple[str, str, int]]] = field(default_factory=dict)
    #: By row value: named points where the row's next calls fail, one each, in order.
    fail_points: dict[int, list[tuple[str, str, int]]] = field(default_factory=dict)


@dataclass
class Poll:
    """The invocation in progress: its life, fault, hook points and unreported sends."""

    life: Life
    fault: Fault
    #: The record id the runtime keys the life's scope under (None: keyless).
    record_id: str | None
    points: int = 0
    by_operation: Counter[tuple[str, str]] = field(default_factory=Counter)
    unreported: list[Send] = field(default_factory=list)
    #: Every model request this invocation sent.
    sends: list[Send] = field(default_factory=list)
    #: A write of the key's budget item was tried since the last request was sent.
    report_tried: bool = False
    #: The row's targeted points this invocation carries (see ``Persistent``), if any.
    targeted_kill: tuple[str, str, int] | None = None
    targeted_fail: tuple[str, str, int] | None = None
    #: An attempt was claimed and is neither sent nor settled yet (see ``lab._claims``).
    claimed_unsent: bool = False


def sqs_record(message: dict[str, Any], arn: str) -> dict[str, Any]:
    """A received SQS message in the record shape Lambda's SQS poller hands the function."""
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": dict(message.get("Attributes", {})),
        "messageAttributes": {
            name: {"stringValue": value.get("StringValue"), "dataType": value["DataType"]}
            for name, value in message.get("MessageAttributes", {}).items()
        },
        "md5OfBody": message["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": arn,
        "awsRegion": REGION,
    }


def on_a_fresh_stack(run: Callable[[], T]) -> T:
    """``run()`` in a new thread, its result or its exception handed back to the caller.

    CPython 3.11 keeps each thread's Python frames in 16 KiB chunks and gives a chunk back to
    the system (``munmap``) as soon as the frame that opened it returns. Under pytest and
    Hypothesis a schedule's handler calls (runtime, Powertools, botocore, moto) start deep
    enough that their calls cross a chunk boundary over and over: a ``mmap`` and a ``munmap``
    each time, about 450,000 of them in one schedule module, a fifth of its CPU in the kernel
    (``strace -c -f``). A new thread starts the schedules without pytest's frames under them.
    Nothing else changes: the same schedules, one at a time, in one thread."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            outcome.append(run())
        except BaseException as error:  # handed to the caller, who re-raises it
            failure.append(error)

    thread = threading.Thread(target=target, name="fault-schedules")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


def run_state_machine(machine: type[RuleBasedStateMachine], profile: str) -> None:
    """Run ``machine``'s schedules under the Hypothesis ``profile``, with no example database
    (a derandomized profile draws the same schedules every run), :func:`on_a_fresh_stack`."""
    test = machine.TestCase
    test.settings = settings(settings.get_profile(profile), database=None)
    on_a_fresh_stack(test("runTest").runTest)
