"""SQS queues that feed a Lambda event source mapping, on the run's compressed clock.

moto's SQS keeps real time: a 540 s visibility timeout or a 900 s ``DelaySeconds`` would hold
a local run for minutes. So every queue that is the source of an ``AWS::Lambda::
EventSourceMapping`` is kept here instead, and every SQS call any client in the process
makes to it (a handler's ``SendMessage`` with ``DelaySeconds``, ``ChangeMessageVisibility``,
the Lambda on-failure send, ...) is answered by a botocore ``before-call`` hook from this
queue, after :mod:`.iam` has evaluated it. Times are converted with ``seconds_per_minute``
(local seconds per minute of AWS time): a delay of 60 s lasts ``seconds_per_minute`` locally.

Emulated, per queue (from the template): ``VisibilityTimeout`` (default 30 s),
``DelaySeconds``, ``RedrivePolicy`` (``maxReceiveCount``: a receive beyond it moves the
message to the dead-letter queue instead), message attributes, and the attributes Lambda
puts in a record (``ApproximateReceiveCount``, ``SentTimestamp``,
``ApproximateFirstReceiveTimestamp``, ``SenderId``). Per mapping: ``BatchSize``,
``ReportBatchItemFailures`` and ``ScalingConfig.MaximumConcurrency`` (at most that many
invocations at once; without it, the engine's ``concurrency``). The poller calls the
function synchronously, deletes what succeeded, and leaves failures to their visibility
timeout, as Lambda's does.

Batching windows (``MaximumBatchingWindowInSeconds``, issue 19): a mapping with one waits,
on the run's clock, until its window has passed since the oldest visible message became
visible (or ``BatchSize`` messages are visible when it looks), then receives up to
``BatchSize`` (at most 10,000) messages of at most 6 MB together (Lambda's payload limit;
each record counted as its body plus :data:`RECORD_OVERHEAD_BYTES`). ``SentTimestamp`` is
on the run's clock too: a message that waited one run-minute reads as sent 60 s before the
wall time, so a handler that computes an age from it (the batch delivery's ``max_wait``)
sees the run's time.

Not emulated: retention (a run is minutes long), FIFO, long polling, and SQS's occasional
duplicate receive of a standard queue.

Lambda faults (:mod:`.lambda_faults`): a poller given ``faults`` throttles a received batch
(never invokes; the messages come back after their visibility timeout) and treats an
invocation that raised :class:`~.lambda_faults.LambdaKilled` as killed (nothing deleted).
Each message remembers, per queue, how often the function ran with it, was killed or was
throttled; a message moved by a redrive policy leaves that history in the dead-letter
queue's :attr:`LocalQueue.arrivals`, beside every message sent there (with its sender and
whether it carried an ``ERROR_CODE`` attribute).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Executor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import boto3
from botocore.awsrequest import AWSResponse

from . import identity
from .call_hooks import before_call_hooks
from .iam import DENIED_KEY
from .intrinsics import LOCAL_ACCOUNT, LOCAL_REGION
from .lambda_faults import LambdaFaults, LambdaKilled
from .scheduling import Scheduler, WorkTracker

logger = logging.getLogger(__name__)

DEFAULT_VISIBILITY_TIMEOUT = 30
#: The most records a mapping hands one invocation (SQS standard queues) and their payload.
MAX_BATCH_SIZE = 10_000
MAX_BATCH_BYTES = 6 * 1024 * 1024
#: What a Lambda SQS record adds to its body (ids, receipt, attributes, ARN), about.
RECORD_OVERHEAD_BYTES = 500
MAX_DELAY_SECONDS = 900
MAX_VISIBILITY_TIMEOUT = 43_200
_PARAMS_KEY = "local_engine.sqs.params"


class QueueCallError(Exception):
    """An SQS call this emulation answers with an error (``code``), as SQS would."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class _Message:
    message_id: str
    body: str
    attributes: dict[str, Any]
    sent_ms: int
    visible_at: float  # time.monotonic()
    sent_at: float = 0.0  # time.monotonic() at SendMessage
    receive_count: int = 0
    first_receive_ms: int | None = None
    receipt: str | None = None
    in_flight: bool = False
    # An invocation of the poller holds it: never received again until that invocation ends.
    held: bool = False
    # On the queue it is on now: invocations that ran with it (returned or raised), were
    # killed, or were throttled (received, never invoked).
    ran: int = 0
    killed: int = 0
    throttled: int = 0


#: Attribute the model step (and EventBridge) put on every dead letter they send.
ERROR_CODE_ATTRIBUTE = "ERROR_CODE"


@dataclass(frozen=True)
class Arrival:
    """How a message reached a queue: ``sent`` by ``sender`` (a function's logical id, None
    for the engine or an AWS service), or ``redriven`` from ``source`` (a queue name) after
    ``receives`` receives, of which the function ran ``ran`` times, was killed ``killed``
    times and was throttled ``throttled`` times. ``coded``: it has an ``ERROR_CODE``."""

    how: str  # "sent" | "redriven"
    source: str | None
    coded: bool
    receives: int = 0
    ran: int = 0
    killed: int = 0
    throttled: int = 0


@dataclass
class QueueStats:
    """Counters of one queue."""

    sent: int = 0
    received: int = 0
    deleted: int = 0
    redriven: int = 0  # moved to the dead-letter queue by maxReceiveCount
    visibility_changes: int = 0
    delayed_sends: int = 0


class LocalQueue:
    """One standard queue on the compressed clock."""

    def __init__(
        self,
        name: str,
        url: str,
        arn: str,
        *,
        visibility_timeout: int = DEFAULT_VISIBILITY_TIMEOUT,
        delay_seconds: int = 0,
        max_receive_count: int | None = None,
        seconds_per_minute: float,
        scheduler: Scheduler,
        tracker: WorkTracker,
    ) -> None:
        self.name, self.url, self.arn = name, url, arn
        self.visibility_timeout = visibility_timeout
        self.delay_seconds = delay_seconds
        self.max_receive_count = max_receive_count
        self.dead_letter: LocalQueue | None = None
        self.stats = QueueStats()
        self.on_visible: Callable[[], None] = lambda: None
        self.tracked = False  # a consumer exists: messages count as work in flight
        self._scale = seconds_per_minute / 60.0
        self._scheduler = scheduler
        self._tracker = tracker
        self._messages: dict[str, _Message] = {}
        self._by_receipt: dict[str, str] = {}
        self._lock = threading.Lock()
        self.arrivals: Counter[Arrival] = Counter()

    # -- producers -----------------------------------------------------------------------------
    def send(
        self,
        body: str,
        *,
        delay_seconds: int | None = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> str:
        """SendMessage; returns the message id. ``delay_seconds`` in AWS seconds (0-900)."""
        delay = self.delay_seconds if delay_seconds is None else int(delay_seconds)
        if not 0 <= delay <= MAX_DELAY_SECONDS:
            raise QueueCallError(
                "InvalidParameterValue",
                f"Value {delay} for parameter DelaySeconds is invalid. Reason: must be "
                f"between 0 and {MAX_DELAY_SECONDS}, if provided.",
            )
        message = _Message(
            message_id=str(uuid.uuid4()),
            body=body,
            attributes=dict(attributes or {}),
            sent_ms=int(time.time() * 1000),
            visible_at=time.monotonic() + delay * self._scale,
            sent_at=time.monotonic(),
        )
        self._add(message)
        arrival = Arrival("sent", identity.current(), _is_coded(body, message.attributes))
        with self._lock:
            self.arrivals[arrival] += 1
            self.stats.sent += 1
            self.stats.delayed_sends += 1 if delay else 0
        self._wake_at(message.visible_at)
        return message.message_id

    def _add(self, message: _Message) -> None:
        if self.tracked:
            self._tracker.begin()
        with self._lock:
            self._messages[message.message_id] = message

    # -- consumers -----------------------------------------------------------------------------
    def visible(self) -> tuple[int, float | None]:
        """How many messages are visible now, and since when the oldest of them is."""
        now = time.monotonic()
        with self._lock:
            times = [
                m.visible_at for m in self._messages.values() if m.visible_at <= now and not m.held
            ]
        return len(times), min(times, default=None)

    def receive(
        self, max_messages: int, max_bytes: int | None = None, *, hold: bool = False
    ) -> tuple[list[dict[str, Any]], list[_Message]]:
        """Up to ``max_messages`` visible messages (of at most ``max_bytes`` together, each
        counted with :data:`RECORD_OVERHEAD_BYTES`), now in flight for the visibility
        timeout; also the messages moved to the dead-letter queue by this receive.

        ``hold`` (the event source mapping's receive): the messages are also held until
        :meth:`release` or :meth:`delete`. On AWS the function timeout is at most the
        visibility timeout, so a message never reappears while its invocation runs; on the
        compressed clock a handler's wall time could outlast it, and a held message cannot
        be received twice at once however slow the machine is."""
        now = time.monotonic()
        taken: list[dict[str, Any]] = []
        redriven: list[_Message] = []
        size = 0
        with self._lock:
            for message in sorted(self._messages.values(), key=lambda m: m.visible_at):
                if len(taken) >= max_messages:
                    break
                if max_bytes is not None and message.visible_at <= now:
                    size += len(message.body) + RECORD_OVERHEAD_BYTES
                    if taken and size > max_bytes:
                        break
                if message.visible_at > now or message.held:
                    continue  # delayed, in flight within its visibility timeout, or held
                if (
                    self.max_receive_count is not None
                    and self.dead_letter is not None
                    and message.receive_count >= self.max_receive_count
                ):
                    del self._messages[message.message_id]
                    redriven.append(message)
                    continue
                message.receive_count += 1
                message.first_receive_ms = message.first_receive_ms or int(time.time() * 1000)
                if message.receipt:
                    self._by_receipt.pop(message.receipt, None)
                message.receipt = uuid.uuid4().hex + message.message_id
                self._by_receipt[message.receipt] = message.message_id
                message.in_flight, message.held = True, hold
                message.visible_at = now + self.visibility_timeout * self._scale
                taken.append(self._view(message))
                self.stats.received += 1
            self.stats.redriven += len(redriven)
        for view in taken:
            self._wake_at(self._messages_visible_at(view["MessageId"]))
        for message in redriven:
            assert self.dead_letter is not None
            arrival = Arrival(
                "redriven",
                self.name,
                ERROR_CODE_ATTRIBUTE in message.attributes,
                receives=message.receive_count,
                ran=message.ran,
                killed=message.killed,
                throttled=message.throttled,
            )
            with self.dead_letter._lock:
                self.dead_letter.arrivals[arrival] += 1
            # SQS keeps the message id, body, attributes and receive count when it moves a
            # message; the history of invocations belongs to the queue it left.
            message.ran = message.killed = message.throttled = 0
            message.in_flight, message.receipt = False, None
            message.visible_at = time.monotonic()
            self.dead_letter._add(message)
            self.dead_letter._wake_at(message.visible_at)
            if self.tracked:
                self._tracker.end()
        return taken, redriven

    def _messages_visible_at(self, message_id: str) -> float:
        with self._lock:
            message = self._messages.get(message_id)
            return message.visible_at if message else time.monotonic()

    def _view(self, message: _Message) -> dict[str, Any]:
        return {
            "MessageId": message.message_id,
            "ReceiptHandle": message.receipt,
            "Body": message.body,
            "MD5OfBody": hashlib.md5(message.body.encode()).hexdigest(),
            "MessageAttributes": dict(message.attributes),
            "Attributes": {
                "ApproximateReceiveCount": str(message.receive_count),
                "SentTimestamp": str(self._sent_on_run_clock(message)),
                "ApproximateFirstReceiveTimestamp": str(message.first_receive_ms),
                "SenderId": LOCAL_ACCOUNT,
            },
        }

    def _sent_on_run_clock(self, message: _Message) -> int:
        """``SentTimestamp`` (epoch ms) as old as the message is on the run's clock."""
        age = (time.monotonic() - message.sent_at) / self._scale if message.sent_at else 0.0
        return int(time.time() * 1000 - age * 1000)

    def delete(self, receipt: str) -> None:
        """DeleteMessage (a stale or unknown receipt handle is accepted, as SQS does)."""
        with self._lock:
            message_id = self._by_receipt.pop(receipt, None)
            message = self._messages.pop(message_id, None) if message_id else None
            if message is not None:
                self.stats.deleted += 1
        if message is not None and self.tracked:
            self._tracker.end()

    def change_visibility(self, receipt: str, timeout: int) -> None:
        """ChangeMessageVisibility of an in-flight message (``timeout`` in AWS seconds)."""
        if not 0 <= int(timeout) <= MAX_VISIBILITY_TIMEOUT:
            raise QueueCallError(
                "InvalidParameterValue",
                f"Value {timeout} for parameter VisibilityTimeout is invalid. Reason: must be "
                f"between 0 and {MAX_VISIBILITY_TIMEOUT}.",
            )
        with self._lock:
            message = self._messages.get(self._by_receipt.get(receipt, ""))
            if message is None or not message.in_flight:
                raise QueueCallError(
                    "MessageNotInflight", "The message referred to isn't in flight."
                )
            message.visible_at = time.monotonic() + int(timeout) * self._scale
            self.stats.visibility_changes += 1
            visible_at = message.visible_at
        self._wake_at(visible_at)

    def release(self, message_id: str) -> None:
        """The consumer is done with an in-flight message it did not delete: it becomes
        visible again when its visibility timeout ends, or now if a held message's
        invocation outlasted that on the compressed clock (the consumer is woken then)."""
        with self._lock:
            message = self._messages.get(message_id)
            if message is not None and message.held:
                message.held = False
                message.visible_at = max(message.visible_at, time.monotonic())
        self._wake_at(self._messages_visible_at(message_id))

    def note(self, message_id: str, outcome: str) -> None:
        """Remember what Lambda did with a received message: ``ran``, ``killed`` or
        ``throttled`` (a deleted message is forgotten)."""
        with self._lock:
            message = self._messages.get(message_id)
            if message is not None:
                setattr(message, outcome, getattr(message, outcome) + 1)

    def attributes(self) -> dict[str, str]:
        """GetQueueAttributes: the approximate counts and the settings."""
        now = time.monotonic()
        with self._lock:
            messages = list(self._messages.values())
        visible = sum(1 for m in messages if m.visible_at <= now and not m.held)
        return {
            "QueueArn": self.arn,
            "ApproximateNumberOfMessages": str(visible),
            "ApproximateNumberOfMessagesNotVisible": str(
                sum(1 for m in messages if m.held or (m.in_flight and m.visible_at > now))
            ),
            "ApproximateNumberOfMessagesDelayed": str(
                sum(1 for m in messages if not m.in_flight and not m.held and m.visible_at > now)
            ),
            "VisibilityTimeout": str(self.visibility_timeout),
            "DelaySeconds": str(self.delay_seconds),
        }

    def __len__(self) -> int:
        with self._lock:
            return len(self._messages)

    def _wake_at(self, when: float) -> None:
        self._scheduler.call_later(max(0.0, when - time.monotonic()), self.on_visible)


Invoke = Callable[[dict[str, Any]], Any]


@dataclass
class PollerStats:
    """Counters of one event source mapping."""

    invocations: int = 0
    records: int = 0
    first_receives: int = 0  # records with ApproximateReceiveCount 1
    function_errors: int = 0
    throttles: int = 0  # batches received and never handed to the function
    kills: int = 0  # invocations killed (nothing deleted)
    item_failures: int = 0
    peak_concurrency: int = 0
    errors: dict[str, int] = field(default_factory=dict)


class MappingPoller:
    """Lambda's SQS poller for one mapping: at most ``max_concurrency`` invocations at once,
    each with up to ``batch_size`` records, started as soon as messages are visible."""

    def __init__(
        self,
        queue: LocalQueue,
        invoke: Invoke,
        *,
        name: str,
        batch_size: int,
        report_batch_item_failures: bool,
        max_concurrency: int,
        executor: Executor,
        tracker: WorkTracker,
        may_receive: Callable[[], bool] = lambda: True,
        on_delete: Callable[[int], None] = lambda _n: None,
        faults: LambdaFaults | None = None,
        batching_window_seconds: int = 0,
        scheduler: Scheduler | None = None,
        seconds_per_minute: float = 60.0,
    ) -> None:
        self.queue = queue
        self._faults = faults
        self.name = name
        self.stats = PollerStats()
        self._invoke = invoke
        # Batches above 10 need a batching window (as the mapping requires one).
        largest = MAX_BATCH_SIZE if batching_window_seconds else 10
        self._batch_size = max(1, min(largest, batch_size))
        #: MaximumBatchingWindowInSeconds, in local seconds (0: none).
        self._window = batching_window_seconds * seconds_per_minute / 60.0
        self._scheduler = scheduler
        self._window_wake = False
        self._report_failures = report_batch_item_failures
        self.max_concurrency = self._max = max(1, max_concurrency)
        self._executor = executor
        self._tracker = tracker
        self._may_receive = may_receive
        self._on_delete = on_delete
        self._running = 0
        self._lock = threading.Lock()
        queue.on_visible = self.kick
        queue.tracked = True

    def kick(self) -> None:
        """Start invocations while there is room and visible messages (never blocks)."""
        while True:
            with self._lock:
                if self._running >= self._max:
                    return
                self._running += 1
            started = False
            try:
                if self._waiting_for_window():
                    return
                if not self._may_receive():
                    return
                records, _ = self.queue.receive(
                    self._batch_size, MAX_BATCH_BYTES if self._window else None, hold=True
                )
                if records and self._throttled(records):
                    continue  # the finally gives the slot back; try the next batch
                if records:
                    self._tracker.begin()
                    self._executor.submit(self._run, records)
                    started = True
            except RuntimeError:  # the executor is shut down: the run is over
                return
            finally:
                if not started:
                    with self._lock:
                        self._running -= 1
            if not started:
                return
            with self._lock:
                self.stats.peak_concurrency = max(self.stats.peak_concurrency, self._running)

    def _waiting_for_window(self) -> bool:
        """With a batching window: True while fewer than a batch of messages are visible and
        the oldest became visible less than the window ago (a wake-up is then scheduled)."""
        if not self._window or self._scheduler is None:
            return False
        with self._lock:
            if self._window_wake:
                return True  # the wake-up decides (a scan per message would be quadratic)
        count, oldest = self.queue.visible()
        if oldest is None or count >= self._batch_size:
            return False
        due = oldest + self._window - time.monotonic()
        if due <= 0:
            return False
        if not self._claim_wake():
            return True  # another thread scheduled the wake-up meanwhile

        def wake() -> None:
            with self._lock:
                self._window_wake = False
            self.kick()

        self._scheduler.call_later(due, wake)
        return True

    def _claim_wake(self) -> bool:
        """Take the one pending window wake-up; False when another thread holds it."""
        with self._lock:
            if self._window_wake:
                return False
            self._window_wake = True
            return True

    def _throttled(self, messages: list[dict[str, Any]]) -> bool:
        """Lambda received the batch and had no concurrency left to invoke: the messages
        stay in flight until their visibility timeout, as a throttled batch does."""
        if self._faults is None or not self._faults.throttle_receive(
            [str(m.get("Body", "")) for m in messages]
        ):
            return False
        with self._lock:
            self.stats.throttles += 1
        for message in messages:
            self.queue.note(message["MessageId"], "throttled")
            self.queue.release(message["MessageId"])
        return True

    def _run(self, messages: list[dict[str, Any]]) -> None:
        try:
            self._invoke_batch(messages)
        except BaseException as exc:  # an emulator bug
            self._tracker.fail(exc)
        finally:
            with self._lock:
                self._running -= 1
            self._tracker.end()
            self.kick()

    def _invoke_batch(self, messages: list[dict[str, Any]]) -> None:
        records = [lambda_sqs_record(message, self.queue.arn) for message in messages]
        with self._lock:
            self.stats.invocations += 1
            self.stats.records += len(records)
            self.stats.first_receives += sum(
                1 for m in messages if m["Attributes"]["ApproximateReceiveCount"] == "1"
            )
        try:
            response = self._invoke({"Records": records})
        except LambdaKilled:  # the sandbox died: nothing is deleted, the batch comes back
            with self._lock:
                self.stats.kills += 1
            for message in messages:
                self.queue.note(message["MessageId"], "killed")
                self.queue.release(message["MessageId"])
            return
        except Exception as exc:  # a function error: the whole batch stays
            with self._lock:
                self.stats.function_errors += 1
                name = type(exc).__name__
                self.stats.errors[name] = self.stats.errors.get(name, 0) + 1
            for message in messages:
                self.queue.note(message["MessageId"], "ran")
                self.queue.release(message["MessageId"])
            return
        for message in messages:
            self.queue.note(message["MessageId"], "ran")
        failed: set[str] = set()
        if self._report_failures and isinstance(response, dict):
            failed = {
                str(item.get("itemIdentifier"))
                for item in response.get("batchItemFailures") or []
                if isinstance(item, dict)
            }
        with self._lock:
            self.stats.item_failures += len(failed)
        done = [m for m in messages if m["MessageId"] not in failed]
        for message in done:
            self.queue.delete(message["ReceiptHandle"])
        if done:
            self._on_delete(len(done))
        for message in messages:
            if message["MessageId"] in failed:
                self.queue.release(message["MessageId"])


def lambda_sqs_record(message: Mapping[str, Any], queue_arn: str) -> dict[str, Any]:
    """One record of the SQS event Lambda sends, from a ReceiveMessage entry."""
    attributes = {
        name: {
            "stringValue": value.get("StringValue"),
            "binaryValue": value.get("BinaryValue"),
            "stringListValues": [],
            "binaryListValues": [],
            "dataType": value.get("DataType", "String"),
        }
        for name, value in (message.get("MessageAttributes") or {}).items()
    }
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message.get("Body", ""),
        "attributes": dict(message.get("Attributes") or {}),
        "messageAttributes": attributes,
        "md5OfBody": message.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": LOCAL_REGION,
    }


def queue_name_of(url_or_arn: str) -> str:
    """The queue name in a queue URL or ARN."""
    if url_or_arn.startswith("arn:"):
        return url_or_arn.rsplit(":", 1)[-1]
    return urlparse(url_or_arn).path.rstrip("/").rsplit("/", 1)[-1]


class LocalQueues:
    """The queues kept here, by name, and the botocore hook that answers calls to them."""

    def __init__(self) -> None:
        self.queues: dict[str, LocalQueue] = {}
        self._batch_ids = itertools.count()

    def add(self, queue: LocalQueue) -> None:
        """Keep ``queue`` (its name must be unique)."""
        self.queues[queue.name] = queue

    def by_url_or_arn(self, value: str) -> LocalQueue | None:
        """The local queue a URL or ARN names, else None (a moto queue)."""
        return self.queues.get(queue_name_of(value))

    # -- the hook ------------------------------------------------------------------------------
    def _before_call(self, model: Any, context: Mapping[str, Any], **_: Any) -> Any:
        if model.service_model.service_name != "sqs" or context.get(DENIED_KEY):
            return None
        params = context.get(_PARAMS_KEY) or {}
        if "QueueUrl" in params:
            queue = self.by_url_or_arn(str(params["QueueUrl"]))
        elif "QueueName" in params:
            queue = self.queues.get(str(params["QueueName"]))
        else:
            queue = None
        if queue is None:
            return None  # moto answers
        try:
            parsed = self._answer(queue, model.name, params)
        except QueueCallError as exc:
            response = AWSResponse(queue.url, 400, {}, None)
            return response, {
                "Error": {"Code": exc.code, "Message": str(exc)},
                "ResponseMetadata": {"HTTPStatusCode": 400},
            }
        parsed.setdefault("ResponseMetadata", {"HTTPStatusCode": 200})
        return AWSResponse(queue.url, 200, {}, None), parsed

    def _answer(
        self, queue: LocalQueue, operation: str, params: Mapping[str, Any]
    ) -> dict[str, Any]:
        if operation == "SendMessage":
            body = str(params["MessageBody"])
            message_id = queue.send(
                body,
                delay_seconds=params.get("DelaySeconds"),
                attributes=params.get("MessageAttributes"),
            )
            return {"MessageId": message_id, "MD5OfMessageBody": _md5(body)}
        if operation == "SendMessageBatch":
            successful = []
            for entry in params.get("Entries") or []:
                body = str(entry["MessageBody"])
                message_id = queue.send(
                    body,
                    delay_seconds=entry.get("DelaySeconds"),
                    attributes=entry.get("MessageAttributes"),
                )
                successful.append(
                    {"Id": entry["Id"], "MessageId": message_id, "MD5OfMessageBody": _md5(body)}
                )
            return {"Successful": successful, "Failed": []}
        if operation == "ChangeMessageVisibility":
            queue.change_visibility(str(params["ReceiptHandle"]), int(params["VisibilityTimeout"]))
            return {}
        if operation == "DeleteMessage":
            queue.delete(str(params["ReceiptHandle"]))
            return {}
        if operation == "DeleteMessageBatch":
            for entry in params.get("Entries") or []:
                queue.delete(str(entry["ReceiptHandle"]))
            return {"Successful": [{"Id": e["Id"]} for e in params.get("Entries") or []]}
        if operation == "ReceiveMessage":
            messages, _ = queue.receive(int(params.get("MaxNumberOfMessages", 1)))
            return {"Messages": messages} if messages else {}
        if operation == "GetQueueAttributes":
            return {"Attributes": queue.attributes()}
        if operation == "GetQueueUrl":
            return {"QueueUrl": queue.url}
        raise QueueCallError(
            "UnsupportedOperation", f"{operation} is not emulated on the local queue {queue.name}"
        )

    @contextmanager
    def installed(self, *sessions: boto3.session.Session) -> Iterator[LocalQueues]:
        """Answer SQS calls to the local queues while open (every session, as iam does)."""

        with before_call_hooks(_PARAMS_KEY, self._before_call, *sessions):
            yield self


def _is_coded(body: str, attributes: Mapping[str, Any]) -> bool:
    """Whether a dead letter says why it failed: an ``ERROR_CODE`` attribute (the model step,
    EventBridge), or a Lambda on-failure record (its ``responsePayload`` or condition)."""
    if ERROR_CODE_ATTRIBUTE in attributes:
        return True
    if '"requestContext"' not in body:
        return False
    try:
        record = json.loads(body)
    except ValueError:
        return False
    return isinstance(record, dict) and "condition" in (record.get("requestContext") or {})


def _md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()
