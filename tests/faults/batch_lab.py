"""A fault lab for the batch path: the real handler, moto and the strict Batches emulator, on
a clock that runs for days.

What is real: the runtime (``model_step``, ``MODEL_DELIVERY=batch``), Powertools
idempotency, the Anthropic SDK talking HTTP to the fake Messages API's batch endpoints (the
emulator of ``constructs_lib.local_engine.message_batches``: results in a new order on every
read, canceling, 404 after delete or for another Workspace, archives, faults on every call),
moto's DynamoDB and SQS, and the step's settings read from the synthesized template (the
``ClassifyBatch`` function: ``MAX_ATTEMPTS``, ``MAX_EVENT_AGE_SECONDS``, the key's memory
``IDEMPOTENCY_EXPIRES_AFTER_SECONDS``, ``BATCH_MAX_WAIT_SECONDS``, its buffer queue's
visibility timeout, its timeout).

What is emulated, as AWS does it: Lambda's SQS poller (:meth:`BatchLab.poll`: up to ten
visible messages a delivery, deleted unless reported as failures; a killed delivery leaves
them to come back after the visibility timeout), the schedule tick (:meth:`BatchLab.tick`),
and kills (:class:`~.harness.LambdaKilled`, a ``BaseException``) at a chosen point of an
invocation: before the n-th DynamoDB call or before or after the n-th batch API call. Time
is a stopped :class:`~.harness.MovableClock` (:func:`stopped_clock`): moto's SQS,
Powertools' locks and expiries, the runtime, a create's total deadline and the emulator all
read it, and it moves only when the schedule moves it, so a schedule ends the same way on
every run, on an idle machine or a loaded one.

The lab observes what the invariants need: every outcome reported to ``on_outcome``, every
DLQ message, and the emulator's billed requests per custom_id.
"""

from __future__ import annotations

import contextlib
import io
import json
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import httpx2
from model_step import ModelStep, Settings
from model_step.batch_table import custom_id_of
from model_step.key import record_key

from constructs_lib.local_engine.message_batches import MessageBatchStore
from tests.fakes import FakeMessagesAPI

from . import backends
from .harness import (
    ACCOUNT,
    REGION,
    TABLE,
    LambdaContext,
    LambdaKilled,
    MovableClock,
    sqs_record,
)

TICK = {"model_step_batch": "tick"}
UPLOAD = "u-1"
BATCHES_PATH = "/v1/messages/batches"


@dataclass(frozen=True)
class BatchSettings:
    """The batch step's settings, as a synthesized template has them."""

    function_timeout: int
    visibility_timeout: int
    max_attempts: int
    max_event_age: int
    expires_after: int
    max_wait: int

    @classmethod
    def from_template(cls, template: dict[str, Any]) -> BatchSettings:
        """The settings of the template's batch model step (``MODEL_DELIVERY=batch``)."""
        resources = template["Resources"]
        [(function, env)] = [
            (resource["Properties"], variables)
            for resource in resources.values()
            if resource["Type"] == "AWS::Lambda::Function"
            and (
                variables := resource["Properties"].get("Environment", {}).get("Variables", {})
            ).get("MODEL_DELIVERY")
            == "batch"
        ]
        buffer = resources[env["BUFFER_QUEUE_URL"]["Ref"]]["Properties"]
        return cls(
            function_timeout=int(function["Timeout"]),
            visibility_timeout=int(buffer["VisibilityTimeout"]),
            max_attempts=int(env["MAX_ATTEMPTS"]),
            max_event_age=int(env["MAX_EVENT_AGE_SECONDS"]),
            expires_after=int(env["IDEMPOTENCY_EXPIRES_AFTER_SECONDS"]),
            max_wait=int(env["BATCH_MAX_WAIT_SECONDS"]),
        )


@dataclass
class Kill:
    """Where the invocation in progress dies: before its ``at``-th hook point (each
    DynamoDB call counts once, each batch API call twice: before it is sent, after its
    answer arrived). None: it lives."""

    at: int | None = None
    point: int = 0

    def reached(self) -> bool:
        self.point += 1
        return self.at is not None and self.point == self.at


@dataclass
class Observed:
    outcomes: dict[int, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    published: set[int] = field(default_factory=set)
    changed_payloads: int = 0
    kills: Counter[str] = field(default_factory=Counter)


class BatchLab:
    """One batch step, its buffer queue and DLQ, and the emulator (see the module
    docstring)."""

    def __init__(
        self,
        api: FakeMessagesAPI,
        step_session: Any,
        prefix: str,
        clock: MovableClock,
        settings: BatchSettings,
        provider: dict[str, Any] | None = None,
    ) -> None:
        """``step_session``: the step's ``boto3_session`` (a session, or the module's
        :class:`~.harness.ClientPool`). ``provider``: settings of another provider's batch
        API (Bedrock's: its ``model_provider``, ``model_id``, bucket and role); default the
        Claude API's, through ``api``'s batch endpoints answered by :attr:`store`. The lab's
        own queue and table work is made straight on moto (:mod:`.backends`)."""
        self.api = api
        self.clock = clock
        self.settings = settings
        self.prefix = prefix
        self.observed = Observed()
        self.started_at = clock.now()
        self.kill = Kill()
        #: Rows whose ``on_outcome`` raises while it is set (a recorder that is down).
        self.failing_outcomes: set[int] = set()
        self.store = MessageBatchStore(
            lambda params, request_id: api._success_body("warm", params),
            clock=clock.now,
            answer_once=True,
        )
        if api is not None:
            api.batches = self.store
        self.dlq_url = self._queue(f"{prefix}-dlq", 30)
        self.buffer_url = self._queue(f"{prefix}-buffer", settings.visibility_timeout)
        self.buffer_arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{prefix}-buffer"
        self.step = ModelStep(
            Settings(
                idempotency_table_name=TABLE,
                dead_letter_queue_url=self.dlq_url,
                idempotency_key="[upload_id, row_number]",
                prompt_version="v1",
                system_prompt="Answer hot, warm or cold.",
                allowed_labels=("hot", "warm", "cold"),
                record_prefix=prefix,
                max_event_age_seconds=settings.max_event_age,
                expires_after_seconds=settings.expires_after,
                max_attempts=settings.max_attempts,
                buffer_queue_url=self.buffer_url,
                service_name=prefix,
                metrics_namespace="BatchLab",
                model_delivery="batch",
                batch_max_wait_seconds=settings.max_wait,
                **(provider or {}),
            ),
            on_outcome=self._on_outcome,
            boto3_session=step_session,
        )

    def _queue(self, name: str, visibility_timeout: int) -> str:
        url, _ = backends.create_queue(name, {"VisibilityTimeout": str(visibility_timeout)})
        return url

    # -- what a schedule does ------------------------------------------------------------------
    def publish(self, row: int, *, changed: bool = False) -> None:
        """EventBridge hands one copy of row ``row``'s event to the buffer queue; ``changed``:
        a copy with another payload under the same key (a producer's bug)."""
        detail: dict[str, Any] = {"upload_id": UPLOAD, "row_number": row, "company": "Acme"}
        if changed:
            detail["company"] = "Acme (changed)"
            self.observed.changed_payloads += 1
        else:
            self.observed.published.add(row)
        event = {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "Row",
            "source": "batch.lab",
            "account": ACCOUNT,
            "time": "2026-01-01T00:00:00Z",
            "region": REGION,
            "resources": [],
            "detail": detail,
        }
        backends.send_message(self.buffer_url, json.dumps(event))

    def poll(self, kill_at: int | None = None) -> bool:
        """Lambda's poller hands the visible messages (up to ten) to one invocation."""
        messages = backends.receive_message(self.buffer_url, 10)
        if not messages:
            return False
        records = [sqs_record(message, self.buffer_arn) for message in messages]
        response = self._invoke({"Records": records}, kill_at, "delivery")
        if response is None:
            return True  # killed: the messages come back after their visibility timeout
        failed = {failure["itemIdentifier"] for failure in response["batchItemFailures"]}
        for message in messages:
            if message["MessageId"] not in failed:
                backends.delete_message(self.buffer_url, message["ReceiptHandle"])
        return True

    def tick(self, kill_at: int | None = None) -> dict[str, Any] | None:
        """The schedule's tick (None: it was killed, or another tick holds the lease)."""
        response = self._invoke(TICK, kill_at, "tick")
        summary = (response or {}).get("model_step_batch")
        return summary if isinstance(summary, dict) else None

    def _invoke(self, event: dict[str, Any], kill_at: int | None, what: str) -> Any:
        context = LambdaContext(self.clock, self.clock.now() + self.settings.function_timeout)
        self.kill = Kill(kill_at)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                return self.step.handle(event, context)
        except LambdaKilled:
            self.observed.kills[what] += 1
            # Its locks end at its deadline, its lease too: that much time passes.
            self.clock.advance(self.settings.function_timeout + 1)
            return None
        finally:
            self.kill = Kill()

    def hook_point(self) -> None:
        """Called before each DynamoDB call and around each batch API call of the
        invocation in progress: the kill strikes at its point."""
        if self.kill.reached():
            raise LambdaKilled(f"killed at point {self.kill.point}")

    def drain(self, *, max_rounds: int = 60, step_seconds: float = 3 * 3600) -> None:
        """No more faults: deliveries and ticks, ``step_seconds`` apart (longer than a
        failing batch's backoff, shorter than any bound that ends a wait), until nothing
        waits."""
        self.stop_faults()
        self.failing_outcomes.clear()
        for _ in range(max_rounds):
            while self.poll():
                pass
            summary = self.tick()
            if summary is not None and summary["open"] == 0 and self._settled():
                return  # (the scan is made only once nothing is open)
            self.clock.advance(step_seconds)
        raise AssertionError("the batch path did not settle: a row keeps waiting")

    def stop_faults(self) -> None:
        """The provider's faults stop (the drain's first step)."""
        store = self.store
        store.faults = {name: [] for name in store.faults}
        store.fault_hook = None
        store.workspaces.clear()
        store.results_drop_after = None

    def billed_by_custom_id(self) -> Counter[str]:
        """The provider's billed requests per custom_id, over every batch."""
        return Counter(self.store.billed_by_custom_id)

    def _settled(self) -> bool:
        return sum(backends.queue_counts(self.buffer_url)) == 0 and not self.rows_waiting()

    # -- what the invariants read ------------------------------------------------------------
    def rows_waiting(self) -> list[str]:
        """The batch rows still staged."""
        return [item["id"]["S"] for item in self._items() if "#batch-row#" in item["id"]["S"]]

    def _items(self) -> list[dict[str, Any]]:
        return list(backends.items(TABLE, self.prefix + "#"))

    def record_id(self, row: int) -> str:
        parts = self.step._components()
        key = record_key(
            [UPLOAD, row],
            prompt_version="v1",
            model_id=parts.settings.model_id,
            fingerprint=parts.fingerprint,
        )
        return parts.persistence.record_id({"key": key})

    def custom_id(self, row: int) -> str:
        return custom_id_of(self.record_id(row))

    def stored(self, row: int) -> dict[str, Any] | None:
        """The completed result stored for ``row``'s key, or None."""
        item = backends.get_item(TABLE, self.record_id(row))
        if not item or item["status"]["S"] != "COMPLETED":
            return None
        result: dict[str, Any] = json.loads(item["data"]["S"])
        return result

    def dead_letters(self) -> list[dict[str, Any]]:
        """Every message on the DLQ that a receive would get (visible, within its
        retention), in order."""
        return [
            {
                "body": json.loads(message.body),
                "attributes": {
                    name: value.get("StringValue")
                    for name, value in (message.message_attributes or {}).items()
                },
            }
            for message in backends.receivable(self.dlq_url)
        ]

    def _on_outcome(self, event: dict[str, Any], outcome: dict[str, Any]) -> None:
        row = int(event["detail"]["row_number"])
        if row in self.failing_outcomes:
            raise RuntimeError("the recorder is down")
        self.observed.outcomes[row].append(dict(outcome))


@contextlib.contextmanager
def installed_hooks(lab_of: Any, session: boto3.session.Session) -> Iterator[None]:
    """Route every DynamoDB call of ``session`` and every batch API call to the current
    lab's kill point."""

    def before(**_: Any) -> None:
        lab = lab_of()
        if lab is not None:
            lab.hook_point()

    real = httpx2.HTTPTransport.handle_request

    def handle_request(transport: httpx2.HTTPTransport, request: httpx2.Request) -> Any:
        lab = lab_of() if request.url.path.startswith(BATCHES_PATH) else None
        if lab is not None:
            lab.hook_point()
        response = real(transport, request)
        if lab is not None:
            lab.hook_point()
        return response

    session.events.register("before-call.dynamodb", before)
    httpx2.HTTPTransport.handle_request = handle_request  # type: ignore[method-assign]
    try:
        yield
    finally:
        httpx2.HTTPTransport.handle_request = real  # type: ignore[method-assign]
        session.events.unregister("before-call.dynamodb", before)


def stopped_clock() -> MovableClock:
    """The lab's clock: stopped (it moves only when the schedule or the lab moves it), and
    started on a whole second.

    Every move of a schedule is whole seconds, so every reading is one too, and so is each
    millisecond time moto's SQS stamps (``SentTimestamp``, truncated to the millisecond).
    Started at a fraction of a second, a row's age read from such a stamp came out a hair
    over or under a bound it met exactly (``MAX_EVENT_AGE_SECONDS`` after the row was
    first seen, in a derandomized schedule), by the fraction the run happened to start
    at: the same schedule ended dead-lettered on one run and answered on the next."""
    clock = MovableClock(stopped=True)
    assert clock.stopped_at is not None
    clock.stopped_at = float(int(clock.stopped_at))
    return clock
