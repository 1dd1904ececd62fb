"""A fault lab for the model step: the real handler behind moto's SQS, on a movable clock.

What is real: the runtime (``model_step``), Powertools idempotency, the Anthropic SDK talking
HTTP to the fake Messages API on 127.0.0.1, moto's DynamoDB and SQS with the step's own
settings read from the synthesized template (cdk.out: the buffer queue's visibility timeout
and redrive to the redrive queue after ``maxReceiveCount`` receives, the redrive queue's
own redrive to the DLQ, the function's timeout, ``MAX_ATTEMPTS``, ``MAX_EVENT_AGE_SECONDS``),
and ``DelaySeconds``.

What is emulated, as AWS does it:

- **Lambda's SQS poller** (:meth:`FaultLab.poll`): receive one message (batch size 1), hand
  it to the handler in Lambda's record shape, delete it unless it is reported as a batch
  item failure. A *throttle* receives the message and never invokes: it comes back after its
  visibility timeout with a higher receive count. A *kill* ends the invocation at a chosen
  point (:class:`LambdaKilled` is a ``BaseException``: no ``except Exception`` and no
  Powertools cleanup runs, just as nothing runs after a real kill); the message comes back
  after its visibility timeout and the record's lock expires at the invocation's deadline.
- **Time** (:class:`MovableClock`): real time plus an offset the schedule moves forward, read
  by moto's SQS, Powertools' lock and record expiries, the runtime's clock and the Lambda
  context. HTTP requests take real time, so a slow answer really meets the total deadline.
- **An operator** moving DLQ messages back to the buffer queue (the console's "Start DLQ
  redrive"): each becomes a new message; whether its attributes and receive count survive
  is not documented, so both are exercised.

The lab observes what the invariants need: every request the fake API gets, attributed to
the record key of the message being processed; every outcome reported to ``on_outcome``;
every ``NonRetryableFailures`` metric the runtime emits; every DLQ message.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import threading
import time
import types
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import boto3
import httpx2
from botocore.exceptions import ClientError
from model_step import ModelStep, Settings
from model_step.key import canonical, record_key, redrive_marker
from moto.sqs import models as sqs_models

from tests.fakes import FakeMessagesAPI, Reply
from tests.stack_tables import PROSPECT_IDEMPOTENCY_TABLE, create_stack_table

REGION = "us-east-1"
ACCOUNT = "123456789012"
TABLE = "fault-lab-idempotency"
#: The lab's ``max_event_age``: see :meth:`QueueSettings.for_the_lab`.
LAB_MAX_EVENT_AGE = 4 * 3600


@dataclass(frozen=True)
class QueueSettings:
    """A step's queue and function settings, as a synthesized template has them."""

    function_timeout: int
    visibility_timeout: int
    buffer_max_receive_count: int
    redrive_visibility_timeout: int
    redrive_max_receive_count: int
    max_attempts: int
    max_event_age: int
    expires_after: int

    @classmethod
    def from_template(cls, template: dict[str, Any]) -> QueueSettings:
        """The settings of the realtime model step in ``template``: the function whose
        environment names a redrive queue and no batch delivery (the Prospect stack also
        has a Message Batches step), and its buffer and redrive queues."""
        resources = template["Resources"]
        [(function, env)] = [
            (resource["Properties"], variables)
            for resource in resources.values()
            if resource["Type"] == "AWS::Lambda::Function"
            and "REDRIVE_QUEUE_ARN"
            in (variables := resource["Properties"].get("Environment", {}).get("Variables", {}))
            and variables.get("MODEL_DELIVERY", "realtime") == "realtime"
        ]
        buffer = resources[env["BUFFER_QUEUE_URL"]["Ref"]]["Properties"]
        redrive = resources[env["REDRIVE_QUEUE_ARN"]["Fn::GetAtt"][0]]["Properties"]
        return cls(
            function_timeout=int(function["Timeout"]),
            visibility_timeout=int(buffer["VisibilityTimeout"]),
            buffer_max_receive_count=int(buffer["RedrivePolicy"]["maxReceiveCount"]),
            redrive_visibility_timeout=int(redrive["VisibilityTimeout"]),
            redrive_max_receive_count=int(redrive["RedrivePolicy"]["maxReceiveCount"]),
            max_attempts=int(env["MAX_ATTEMPTS"]),
            max_event_age=int(env["MAX_EVENT_AGE_SECONDS"]),
            expires_after=int(env["IDEMPOTENCY_EXPIRES_AFTER_SECONDS"]),
        )

    def for_the_lab(self) -> QueueSettings:
        """The same, with ``max_event_age`` cut to :data:`LAB_MAX_EVENT_AGE` (a valid setting:
        the construct requires ``expires_after >= max_event_age``), so a schedule of a few
        virtual hours reaches the end of the rate-limit and redrive windows while every
        record stays alive for the whole schedule."""
        return replace(self, max_event_age=min(self.max_event_age, LAB_MAX_EVENT_AGE))


class LambdaKilled(BaseException):
    """The invocation was killed (timeout, out of memory): nothing after this point runs."""


class MovableClock:
    """Real time plus an offset; :meth:`advance` moves every reader forward at once."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

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
                moment = dt.datetime.fromtimestamp(clock.now(), tz)
                return cls(*moment.timetuple()[:6], moment.microsecond, moment.tzinfo)

        shim = types.SimpleNamespace(datetime=_Datetime, timedelta=dt.timedelta, UTC=dt.UTC)
        patches: list[tuple[Any, str, Any]] = [
            (sqs_models, "unix_time", lambda when=None: clock.now()),
            (sqs_models, "unix_time_millis", lambda when=None: clock.now() * 1000.0),
            (model_step.clock, "now", clock.now),
        ]
        patches += [(module, "dt", shim) for module in (pt_base, pt_persistence, pt_record)]
        patches.append((pt_dynamodb, "dt", shim))
        saved = [(target, name, getattr(target, name)) for target, name, _ in patches]
        for target, name, value in patches:
            setattr(target, name, value)
        try:
            yield
        finally:
            for target, name, value in saved:
                setattr(target, name, value)


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


#: The header that names the poll a model request came from (see :meth:`FaultLab.on_send`).
SEND_HEADER = "x-fault-lab-send"
#: What the fake Messages API does with one request.
API_BEHAVIOURS = ("ok", "500", "429", "529", "disconnect", "slow", "400", "lukewarm")
#: Answers that are not billed: the provider did not serve the request.
UNBILLED = {"429", "529"}


def _reply(behaviour: str) -> Any:
    if behaviour == "ok":
        return 200
    if behaviour in ("429", "529"):
        return Reply(status=int(behaviour), headers={"retry-after": "20"})
    if behaviour == "slow":
        # Three pieces 0.2 s apart against a 0.3 s total deadline: no single read is slow.
        return Reply(chunks=3, chunk_delay=0.2)
    if behaviour == "disconnect":
        return "disconnect"
    if behaviour == "lukewarm":  # a complete answer that is not an allowed label
        return Reply(text="lukewarm")
    return int(behaviour)


@dataclass
class Fault:
    """What happens to one poll: a throttle, or a kill / failed call at a hook point.

    Hook points are counted through the invocation: each AWS call counts twice (before it is
    made, after it applied) and the model request twice (before it is sent, after it was
    answered). ``kill_at`` kills at that point; ``fail_at`` makes the AWS call there fail
    with a throttling error (after it applied, when it is an "after" point: a timeout whose
    write went through).
    """

    throttle: bool = False
    kill_at: int | None = None
    fail_at: int | None = None
    api: str = "ok"


@dataclass(frozen=True)
class Scope:
    """The record key of a message, as the lab attributes requests."""

    business_key: tuple[Any, ...]
    generation: int | None
    redrive_of: str | None


@dataclass
class Observed:
    requests: Counter[Scope] = field(default_factory=Counter)  # billed requests
    unbilled: Counter[Scope] = field(default_factory=Counter)
    outcomes: dict[Scope, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    counted: Counter[Scope] = field(default_factory=Counter)  # NonRetryableFailures metrics
    requests_after_stored: list[Scope] = field(default_factory=list)
    redriven_dlq_messages: list[dict[str, Any]] = field(default_factory=list)
    failed_redrive_receives: Counter[str] = field(default_factory=Counter)
    #: Scopes whose invocation was killed right after the write that counts its dead
    #: letter and before the metric line: the one window no write order can close.
    count_window_kills: set[Scope] = field(default_factory=set)
    published: set[tuple[Any, ...]] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)


class FaultLab:
    """One model step and its three queues (see the module docstring)."""

    def __init__(
        self,
        api: FakeMessagesAPI,
        step_session: boto3.session.Session,
        lab_session: boto3.session.Session,
        prefix: str,
        clock: MovableClock,
        settings: QueueSettings,
    ) -> None:
        """``step_session`` carries the fault hooks; the lab's own calls use ``lab_session``."""
        self.settings = settings
        self.clock = clock
        self.api = api
        self.sqs = lab_session.client("sqs")
        self.dynamodb = lab_session.client("dynamodb")
        self.observed = Observed()
        self.started_at = clock.now()
        self._fault = Fault()
        self._point = 0
        self._scope: Scope | None = None
        #: By send number (the ``SEND_HEADER`` of the request), the scope and fault of the
        #: poll that sent it: the server may read a request after that poll ended.
        self._sends: dict[str, tuple[Scope, Fault]] = {}
        self.prefix = prefix
        self.dlq_url, self.dlq_arn = self._queue(f"{prefix}-dlq")
        self.redrive_url, self.redrive_arn = self._queue(
            f"{prefix}-redrive",
            self.dlq_arn,
            settings.redrive_max_receive_count,
            settings.redrive_visibility_timeout,
        )
        self.buffer_url, self.buffer_arn = self._queue(
            f"{prefix}-buffer",
            self.redrive_arn,
            settings.buffer_max_receive_count,
            settings.visibility_timeout,
        )
        self.step = ModelStep(
            Settings(
                idempotency_table_name=TABLE,
                dead_letter_queue_url=self.dlq_url,
                idempotency_key="[upload_id, row_number]",
                prompt_version="v1",
                system_prompt="Answer hot, warm or cold.",
                allowed_labels=("hot", "warm", "cold"),
                model_timeout_seconds=0.3,
                record_prefix=prefix,
                max_event_age_seconds=self.settings.max_event_age,
                expires_after_seconds=self.settings.expires_after,
                max_attempts=self.settings.max_attempts,
                buffer_queue_url=self.buffer_url,
                redrive_queue_arn=self.redrive_arn,
                service_name=prefix,
                metrics_namespace="FaultLab",
            ),
            on_outcome=self._on_outcome,
            boto3_session=step_session,
        )

    # -- set-up ------------------------------------------------------------------------------
    def _queue(
        self,
        name: str,
        dead_letter_arn: str | None = None,
        max_receive_count: int = 0,
        visibility_timeout: int = 30,
    ) -> tuple[str, str]:
        attributes = {"VisibilityTimeout": str(visibility_timeout)}
        if dead_letter_arn:
            attributes["RedrivePolicy"] = json.dumps(
                {"deadLetterTargetArn": dead_letter_arn, "maxReceiveCount": max_receive_count}
            )
        url = self.sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        arn = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        return url, arn

    # -- what a schedule does ------------------------------------------------------------------
    def publish(self, row: int, *, generation: int | None = None) -> None:
        """EventBridge delivers one copy of row ``row``'s event to the buffer queue."""
        detail: dict[str, Any] = {"upload_id": "u-1", "row_number": row, "company": "Acme"}
        if generation is not None:
            detail["replay_generation"] = generation
        event = {
            "version": "0",
            "id": str(uuid.uuid4()),  # every copy has its own event id: never the key
            "detail-type": "Row",
            "source": "fault.lab",
            "account": ACCOUNT,
            "time": "2026-01-01T00:00:00Z",  # a producer's time long ago: never the window
            "region": REGION,
            "resources": [],
            "detail": detail,
        }
        self.observed.published.add(("u-1", row))
        self.sqs.send_message(QueueUrl=self.buffer_url, MessageBody=json.dumps(event))

    def redrive_dead_letters(self, *, keep_attributes: bool, keep_receive_count: bool) -> int:
        """The operator's "Start DLQ redrive": every DLQ message back to the buffer queue. SQS
        does not say whether a moved message keeps its attributes and receive count: with
        ``keep_receive_count`` the message itself moves (moto's own object, as its redrive
        policy moves one), else it is sent again as a new message."""
        if keep_receive_count:
            return self._move_dead_letters()
        moved = 0
        while True:
            messages = self.sqs.receive_message(
                QueueUrl=self.dlq_url,
                MaxNumberOfMessages=10,
                MessageAttributeNames=["All"],
                VisibilityTimeout=30,
            ).get("Messages", [])
            if not messages:
                return moved
            for message in messages:
                self.observed.redriven_dlq_messages.append(_dlq_view(message))
                extra: dict[str, Any] = {}
                if keep_attributes and message.get("MessageAttributes"):
                    extra["MessageAttributes"] = message["MessageAttributes"]
                self.sqs.send_message(
                    QueueUrl=self.buffer_url, MessageBody=message["Body"], **extra
                )
                self.sqs.delete_message(
                    QueueUrl=self.dlq_url, ReceiptHandle=message["ReceiptHandle"]
                )
                moved += 1

    def _move_dead_letters(self) -> int:
        backend = sqs_models.sqs_backends[ACCOUNT][REGION]
        dlq = backend.queues[self.dlq_url.rsplit("/", 1)[-1]]
        buffer = backend.queues[self.buffer_url.rsplit("/", 1)[-1]]
        moved = list(dlq._messages)
        for message in moved:
            self.observed.redriven_dlq_messages.append(
                {
                    "message_id": message.id,
                    "body": json.loads(message.body),
                    "attributes": {
                        name: value.get("StringValue")
                        for name, value in (message.message_attributes or {}).items()
                    },
                }
            )
            dlq._messages.remove(message)
            message.visible_at = 0
            buffer.add_message(message)
        return len(moved)

    def poll(self, queue: str, fault: Fault) -> bool:
        """Lambda's poller takes one message from ``queue`` (``buffer`` or ``redrive``)."""
        url, arn = (
            (self.buffer_url, self.buffer_arn)
            if queue == "buffer"
            else (self.redrive_url, self.redrive_arn)
        )
        messages = self.sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=1,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        if not messages:
            return False
        message = messages[0]
        if fault.throttle:
            if queue == "redrive":
                self.observed.failed_redrive_receives[message["MessageId"]] += 1
            return True  # never invoked; it comes back after its visibility timeout
        self._fault, self._point = fault, 0
        self._scope = _scope_of(message["Body"])
        context = LambdaContext(self.clock, self.clock.now() + self.settings.function_timeout)
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                response = self.step.handle({"Records": [_record(message, arn)]}, context)
        except LambdaKilled:
            if queue == "redrive":
                self.observed.failed_redrive_receives[message["MessageId"]] += 1
            return True
        finally:
            self._count_metrics(out.getvalue())
            self._fault, self._scope = Fault(), None
        if response["batchItemFailures"]:
            if queue == "redrive":
                self.observed.failed_redrive_receives[message["MessageId"]] += 1
        else:
            self.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return True

    def drain(self, *, max_rounds: int = 400) -> None:
        """No more faults: let time pass and poll until both queues are empty."""
        for _ in range(max_rounds):
            if not (self.poll("buffer", Fault()) or self.poll("redrive", Fault())):
                if self.queue_depth(self.buffer_url) + self.queue_depth(self.redrive_url) == 0:
                    return
                self.clock.advance(
                    max(self.settings.visibility_timeout, self.settings.redrive_visibility_timeout)
                    + 1
                )
        raise AssertionError("the queues did not drain: a row keeps coming back")

    def queue_depth(self, url: str) -> int:
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )["Attributes"]
        return sum(int(value) for value in attributes.values())

    def dead_letters(self) -> list[dict[str, Any]]:
        """Every message on the DLQ now (left there)."""
        found = []
        for message in self.sqs.receive_message(
            QueueUrl=self.dlq_url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            AttributeNames=["All"],
            VisibilityTimeout=0,
        ).get("Messages", []):
            found.append(_dlq_view(message))
        return found

    def stored(self, scope: Scope) -> dict[str, Any] | None:
        """The completed result stored for ``scope``, or None."""
        parts = self.step._components()
        key = record_key(
            list(scope.business_key),
            prompt_version="v1",
            model_id=parts.settings.model_id,
            fingerprint=parts.fingerprint,
            replay_generation=scope.generation,
            redrive_of=scope.redrive_of,
        )
        record_id = parts.persistence.record_id({"key": key})
        item = self.dynamodb.get_item(
            TableName=TABLE, Key={"id": {"S": record_id}}, ConsistentRead=True
        ).get("Item")
        if not item or item["status"]["S"] != "COMPLETED":
            return None
        result: dict[str, Any] = json.loads(item["data"]["S"])
        return result

    # -- hooks: faults in, observations out -----------------------------------------------------
    def hook_point(self, kind: str, operation: str, body: bytes = b"") -> None:
        """Called at each hook point of an invocation; kills or fails where the fault says."""
        if self._scope is None:
            return
        self._point += 1
        fault = self._fault
        if fault.kill_at == self._point:
            if kind == "after" and b'"#counted"' in body:
                self.observed.count_window_kills.add(self._scope)
            raise LambdaKilled(f"killed {kind} {operation}")
        if fault.fail_at == self._point and operation != "model":
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": f"lab: {kind} {operation}"}},
                operation,
            )

    def on_send(self, headers: Any) -> None:
        """Called in the invocation's thread as the runtime sends a model request: tag it with
        the poll that sends it, and note it if the key's result is already stored. Both are
        decided here, not when the server reads it: on a loaded machine the server can read a
        request after the client gave up on it and the lab moved on to the next poll."""
        scope = self._scope
        if scope is None:
            return
        send = str(len(self._sends) + 1)
        self._sends[send] = (scope, self._fault)
        headers[SEND_HEADER] = send
        stored = self.stored(scope)
        if stored is not None:
            self.observed.requests_after_stored.append(scope)
            self.observed.notes.append(
                f"request for {scope} sent at +{self.clock.offset:.0f} s, after a result "
                f"stored at {stored.get('completed_at')} ({stored.get('status')}), fault "
                f"{self._fault}"
            )

    def on_request(self, index: int) -> Any:
        """The fake API's script: count request ``index`` against the poll that sent it and
        answer as that poll's fault says."""
        send = self.api.requests[index].headers.get(SEND_HEADER)
        scope, fault = self._sends.get(send or "", (self._scope, self._fault))
        if scope is not None:
            if fault.api in UNBILLED:
                self.observed.unbilled[scope] += 1
            else:
                self.observed.requests[scope] += 1
        return _reply(fault.api)

    def _on_outcome(self, event: dict[str, Any], outcome: dict[str, Any]) -> None:
        scope = _scope_of(json.dumps(event))
        self.observed.outcomes[scope].append(dict(outcome))

    def _count_metrics(self, printed: str) -> None:
        if self._scope is None:
            return
        for line in printed.splitlines():
            if '"_aws"' in line and '"NonRetryableFailures"' in line:
                self.observed.counted[self._scope] += 1


@contextlib.contextmanager
def installed_hooks(lab_of: Callable[[], FaultLab | None], session: boto3.session.Session):
    """Route every AWS call of ``session`` and every HTTP request to the current lab."""

    def before(event_name: str, **_: Any) -> None:
        lab = lab_of()
        if lab is not None:
            lab.hook_point("before", event_name.rsplit(".", 1)[-1])

    def before_send(request: Any, **_: Any) -> None:
        sent_bodies[threading.get_ident()] = bytes(request.body or b"")

    def after(event_name: str, **_: Any) -> None:
        lab = lab_of()
        if lab is not None:
            body = sent_bodies.pop(threading.get_ident(), b"")
            lab.hook_point("after", event_name.rsplit(".", 1)[-1], body)

    real = httpx2.HTTPTransport.handle_request

    def handle_request(transport: httpx2.HTTPTransport, request: httpx2.Request) -> Any:
        lab = lab_of()
        if lab is not None:
            lab.hook_point("before", "model")
            lab.on_send(request.headers)
        response = real(transport, request)
        if lab is not None:
            lab.hook_point("after", "model")
        return response

    sent_bodies: dict[int, bytes] = {}
    events = session.events
    for service in ("dynamodb", "sqs"):
        events.register(f"before-call.{service}", before)
        events.register(f"before-send.{service}", before_send)
        events.register(f"after-call.{service}", after)
    httpx2.HTTPTransport.handle_request = handle_request  # type: ignore[method-assign]
    try:
        yield
    finally:
        httpx2.HTTPTransport.handle_request = real  # type: ignore[method-assign]
        for service in ("dynamodb", "sqs"):
            events.unregister(f"before-call.{service}", before)
            events.unregister(f"before-send.{service}", before_send)
            events.unregister(f"after-call.{service}", after)


def create_table(session: boto3.session.Session) -> None:
    """The idempotency table, laid out as the Prospect Uploader's stack defines it."""
    create_stack_table(session, PROSPECT_IDEMPOTENCY_TABLE, TABLE)


def _scope_of(body: str) -> Scope:
    event = json.loads(body)
    detail = canonical(event.get("detail") or {})
    return Scope(
        business_key=(detail.get("upload_id"), detail.get("row_number")),
        generation=detail.get("replay_generation"),
        redrive_of=redrive_marker(event),
    )


def _record(message: dict[str, Any], arn: str) -> dict[str, Any]:
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


def _dlq_view(message: dict[str, Any]) -> dict[str, Any]:
    try:
        body = json.loads(message["Body"])
    except ValueError:
        body = None
    return {
        "message_id": message["MessageId"],
        "body": body,
        "attributes": {
            name: value.get("StringValue")
            for name, value in message.get("MessageAttributes", {}).items()
        },
    }
