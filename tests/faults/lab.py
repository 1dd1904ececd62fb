"""``FaultLab``: one model step, its three queues and its result bus, driven by a schedule.

See :mod:`.harness` for what is real and what is emulated. A schedule calls
:meth:`FaultLab.publish`, :meth:`~FaultLab.poll`, :meth:`~FaultLab.redrive_dead_letters`
and moves the clock; :meth:`~FaultLab.drain` ends it. The hook points (:mod:`.hooks`) call
:meth:`~FaultLab.before_call`, :meth:`~FaultLab.after_call`, :meth:`~FaultLab.model_point`,
:meth:`~FaultLab.on_send` and :meth:`~FaultLab.on_request`.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError
from model_step import ModelStep, Settings
from model_step.budget import BUDGET_SUFFIX
from model_step.key import record_key

from . import backends, model_api, sqs_rules
from .harness import (
    BEDROCK_MODEL_ID,
    MAX_DRAIN_POLLS,
    MAX_INVOCATIONS_PER_LIFE,
    READ_WAIT_SECONDS,
    TABLE,
    Fault,
    LabWorld,
    LambdaContext,
    LambdaKilled,
    Persistent,
    Poll,
    Unbounded,
    sqs_record,
)
from .lab_settings import QueueSettings
from .observed import Life, LifeRecord, Scope, Send, emf_metrics, scope_of
from .result_bus import ResultBus
from .rows import REGION, Row

#: The header that names the send a model request belongs to (see :meth:`FaultLab.on_send`).
SEND_HEADER = "x-fault-lab-send"
#: DynamoDB calls that write: the first one after a model request reports that attempt.
WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"})
AWS_SERVICES = ("dynamodb", "sqs", "events", "eventbridgev2")


class FaultLab:
    """One model step and its queues (see the module docstring)."""

    def __init__(
        self,
        world: LabWorld,
        prefix: str,
        settings: QueueSettings,
        *,
        provider: str = "anthropic",
        bus_kind: str | None = None,
        model_timeout_seconds: float = 0.3,
    ) -> None:
        """``model_timeout_seconds``: the step's total deadline for a model request, on the
        lab's clock (``LabWorld.deadlines_on_the_clock``, else in real time) [0.3: shorter
        than a slow answer's pieces]. Hand-written scenarios that assert exact counts and
        send no slow answer pass a longer one."""
        self.world = world
        self.settings = settings
        self.model_timeout_seconds = model_timeout_seconds
        self.clock = world.clock
        self.provider = provider
        self.prefix = prefix
        self.started_at = self.clock.now()
        self.real_started_at = time.monotonic()
        self.lives: dict[Life, LifeRecord] = {}
        self.current: dict[Scope, int] = {}
        self.published: set[Life] = set()
        self.persistent = Persistent()
        self.poll_state: Poll | None = None
        self.sends: dict[str, Send] = {}
        self.failed_redrive_receives: Counter[str] = Counter()
        #: The DLQ messages the step sent itself (by message id), each with the life whose
        #: delivery sent it; any other was moved there by a redrive policy, its body as the
        #: row's copy had it.
        self.step_dead_letters: dict[str, Life] = {}
        #: Messages an operator moved back with their receive count already past both
        #: queues' ``maxReceiveCount`` (SQS may keep it: FIELD_NOTES, "DLQ redrive").
        self.spent_on_arrival: set[str] = set()
        self.redriven_dlq_messages: list[dict[str, Any]] = []
        #: Faults injected: by poll, and by the schedule (``actions``).
        self.faults = 0
        self.actions: Counter[str] = Counter()
        self.unbounded: str | None = None
        self._record_ids: dict[tuple[Scope, tuple[type, ...]], str | None] = {}
        self._create_queues()
        self.bus = (
            ResultBus.create(bus_kind, prefix, world.lab_client("events"), self.clock.now)
            if bus_kind
            else None
        )
        self.step = ModelStep(self._step_settings(), on_outcome=self._on_outcome,
                              boto3_session=world.step_clients)  # fmt: skip
        parts = self.step._components()
        if parts.result_events is not None:
            # The publisher's pause between sends of a throttled entry runs on the lab's clock.
            parts.result_events._sleep = self.clock.advance

    def _create_queues(self) -> None:
        """The DLQ, the redrive queue and the buffer queue, as the template sets them."""
        settings, prefix = self.settings, self.prefix
        self.dlq_url, self.dlq_arn = self._queue(
            f"{prefix}-dlq",
            retention=settings.dlq_retention,
            max_bytes=settings.dlq_max_message_bytes,
        )
        self.redrive_url, self.redrive_arn = self._queue(
            f"{prefix}-redrive",
            retention=settings.redrive_retention,
            max_bytes=settings.redrive_max_message_bytes,
            redrive=(self.dlq_arn, settings.redrive_max_receive_count),
            visibility=settings.redrive_visibility_timeout,
        )
        self.buffer_url, self.buffer_arn = self._queue(
            f"{prefix}-buffer",
            retention=settings.buffer_retention,
            max_bytes=settings.buffer_max_message_bytes,
            redrive=(self.redrive_arn, settings.buffer_max_receive_count),
            visibility=settings.visibility_timeout,
        )

    def _step_settings(self) -> Settings:
        bedrock = self.provider == "bedrock"
        bus = self.bus
        return Settings(
            idempotency_table_name=TABLE,
            dead_letter_queue_url=self.dlq_url,
            idempotency_key="[upload_id, row_number]",
            prompt_version="v1",
            system_prompt="Answer hot, warm or cold.",
            allowed_labels=("hot", "warm", "cold"),
            model_timeout_seconds=self.model_timeout_seconds,
            record_prefix=self.prefix,
            max_event_age_seconds=self.settings.max_event_age,
            expires_after_seconds=self.settings.expires_after,
            max_attempts=self.settings.max_attempts,
            buffer_queue_url=self.buffer_url,
            redrive_queue_arn=self.redrive_arn,
            service_name=self.prefix,
            metrics_namespace="FaultLab",
            model_provider=self.provider,
            model_id=BEDROCK_MODEL_ID if bedrock else "claude-haiku-5-5",
            # As the template's classifier asks (issue 32): thinking off, so each answer bills
            # the fakes' 3 output tokens and no thinking tokens.
            thinking="disabled",
            max_tokens=16,
            aws_region=REGION,
            result_bus_arn=None if bus is None else bus.arn,
            result_bus_kind="classic" if bus is None else bus.kind,
            result_event_source=self.prefix,
        )

    def _queue(
        self,
        name: str,
        *,
        retention: int,
        max_bytes: int,
        redrive: tuple[str, int] | None = None,
        visibility: int = 30,
    ) -> tuple[str, str]:
        attributes = {
            "VisibilityTimeout": str(visibility),
            "MessageRetentionPeriod": str(retention),
            "MaximumMessageSize": str(max_bytes),
        }
        if redrive:
            target, count = redrive
            attributes["RedrivePolicy"] = json.dumps(
                {"deadLetterTargetArn": target, "maxReceiveCount": count}
            )
        return backends.create_queue(name, attributes)

    # -- lives --------------------------------------------------------------------------------
    def life_of(self, scope: Scope) -> Life:
        """The scope's life now."""
        return Life(scope, self.current.get(scope, 0))

    def record(self, life: Life) -> LifeRecord:
        """What the lab saw of ``life`` (created on first sight)."""
        if life not in self.lives:
            self.lives[life] = LifeRecord(started_at=self.clock.now())
            self.current.setdefault(life.scope, life.index)
        return self.lives[life]

    def held(self, scope: Scope) -> bool:
        """Whether the buffer or redrive queue holds a copy of ``scope``."""
        urls = (self.buffer_url, self.redrive_url)
        return any(scope_of(body) == scope for body in sqs_rules.held_bodies(urls))

    def memory_alive(self, scope: Scope) -> bool:
        """Whether any item the step keeps about ``scope`` (its record, budget, hand-offs)
        is still alive: present and not past its ``expiration``."""
        record_id = self.record_id(scope)
        if record_id is None:
            return False
        digest = record_id.rsplit("#", 1)[-1]
        now = self.clock.now()
        for item in backends.items(TABLE, self.prefix + "#"):
            if digest not in item["id"]["S"]:
                continue
            expiration = item.get("expiration", {}).get("N")
            if expiration is None or float(expiration) >= now:
                return True
        return False

    def _start_life_if_forgotten(self, scope: Scope) -> None:
        """A new copy of a forgotten key starts a new life (see :mod:`.observed`)."""
        if scope not in self.current or self.held(scope) or self.memory_alive(scope):
            return
        self.current[scope] += 1

    # -- what a schedule does ----------------------------------------------------------------
    def publish(self, row: Row, spelling: int = 0, *, generation: int | None = None) -> Life:
        """EventBridge delivers one copy of ``row``'s event to the buffer queue."""
        body = row.body(spelling, generation=generation)
        scope = scope_of(body)
        self._start_life_if_forgotten(scope)
        life = self.life_of(scope)
        self.record(life)
        self.published.add(life)
        backends.send_message(self.buffer_url, body)
        return life

    def redrive_dead_letters(self, *, keep_attributes: bool, keep_receive_count: bool) -> int:
        """The operator's "Start DLQ redrive": every DLQ message back to the buffer queue, as
        a new message (new id, new enqueue time). SQS does not say whether a moved message
        keeps its attributes and receive count: with ``keep_receive_count`` moto's own
        message object moves, with its count, else it is sent again."""
        dlq = sqs_rules.moto_queue(self.dlq_url)
        buffer = sqs_rules.moto_queue(self.buffer_url)
        moved = list(dlq._messages)
        for message in moved:
            self.redriven_dlq_messages.append(_moto_view(message))
            dlq._messages.remove(message)
            dlq.pending_messages.discard(message)
            if keep_receive_count:
                message.id = str(uuid.uuid4())
                if message.approximate_receive_count >= self.settings.redrive_max_receive_count:
                    # Its receives are spent: SQS moves it on at its next receive of each
                    # queue, and the function never sees it.
                    self.spent_on_arrival.add(message.id)
                message.sent_timestamp = int(self.clock.now() * 1000)
                message.visible_at = message.delayed_until = 0
                if not keep_attributes:
                    message.message_attributes = {}
                buffer.add_message(message)
                continue
            attributes = {
                name: dict(value)
                for name, value in (message.message_attributes or {}).items()
                if keep_attributes
            }
            backends.send_message(self.buffer_url, message.body, attributes)
        return len(moved)

    def poll(self, queue: str, fault: Fault) -> bool:
        """Lambda's poller takes one message from ``queue`` (``buffer`` or ``redrive``)."""
        self.expire_retention()
        url, arn = (
            (self.buffer_url, self.buffer_arn)
            if queue == "buffer"
            else (self.redrive_url, self.redrive_arn)
        )
        messages = backends.receive_message(url)
        if not messages:
            return False
        message = messages[0]
        scope = scope_of(message["Body"])
        life = self.life_of(scope)
        record = self.record(life)
        self.faults += fault.count  # the poll's own faults; persistent ones count once
        fault = self._with_persistent(fault, scope)
        if fault.throttle:
            if queue == "redrive":
                self.failed_redrive_receives[message["MessageId"]] += 1
            return True  # never invoked; it comes back after its visibility timeout
        record.invocations += 1
        if record.invocations > MAX_INVOCATIONS_PER_LIFE:
            raise Unbounded(f"{life}: more than {MAX_INVOCATIONS_PER_LIFE} invocations")
        if queue == "redrive":
            record.redrive_messages.add(message["MessageId"])
        failed = self._invoke(message, arn, life, fault)
        if failed:
            if queue == "redrive":
                self.failed_redrive_receives[message["MessageId"]] += 1
        else:
            backends.delete_message(url, message["ReceiptHandle"])
        return True

    def _invoke(self, message: dict[str, Any], arn: str, life: Life, fault: Fault) -> bool:
        """One invocation of the handler; True when the message comes back (a kill or a
        batch item failure)."""
        record = self.record(life)
        record_id = self.record_id(life.scope)
        self.poll_state = state = Poll(life, fault, record_id)
        self._target(state, life.scope)
        context = LambdaContext(self.clock, self.clock.now() + self.settings.function_timeout)
        out = io.StringIO()
        killed = False
        try:
            with contextlib.redirect_stdout(out):
                response = self.step.handle({"Records": [sqs_record(message, arn)]}, context)
        except LambdaKilled:
            killed = True
        finally:
            state, self.poll_state = self.poll_state, None
            record.metrics.update(emf_metrics(out.getvalue()))
        if state.claimed_unsent:
            # Claimed and never sent nor settled: the invocation was killed, or a call failed
            # (a claim whose answer was lost), before it could tell. Nobody can tell this
            # attempt from one whose request was sent and lost, so a count may include it.
            record.unsent_claims += 1
        for send in state.unreported:
            # Sent, and its invocation never wrote what became of it: killed, or its write to
            # the key's budget failed (the next delivery finds the claim pending, as after a
            # kill). An invocation that tried no such write had the answer and owed it (a
            # failed save of the result is not an excuse: the budget is its fallback).
            send.interrupted = killed
            send.unrecorded = not killed and state.report_tried
            send.reported = not killed and not state.report_tried
        if killed:
            return True
        return bool(response["batchItemFailures"])

    def _target(self, state: Poll, scope: Scope) -> None:
        """Give the invocation its row's next targeted kill and fail points (a poll's own
        named points win)."""
        row = scope.business_key[1]
        kills = self.persistent.kill_points.get(row)
        if kills and state.fault.kill_on is None:
            state.fault.kill_on = state.targeted_kill = kills[0]
        fails = self.persistent.fail_points.get(row)
        if fails and state.fault.fail_on is None:
            state.fault.fail_on = state.targeted_fail = fails[0]

    def _with_persistent(self, fault: Fault, scope: Scope) -> Fault:
        row = scope.business_key[1]
        merged = Fault(**vars(fault))
        if row in self.persistent.api:
            merged.api = self.persistent.api[row]
        if row in self.persistent.killed_after_answer and merged.kill_on is None:
            merged.kill_on = ("after", "model", 1)
        return merged

    def drain(self) -> None:
        """The schedule's faults end (persistent ones hold): let time pass and poll until the
        buffer and redrive queues are empty."""
        persistent = self.persistent
        persistent.hook_failures = 0
        if not persistent.dlq_persistent:
            persistent.dlq_refuses = False
        if self.bus is not None and not self.bus.persistent:
            self.bus.refuse(None)
        # A life that cycles meets its own cap first; this one bounds the drain as a whole.
        polls = MAX_DRAIN_POLLS + MAX_INVOCATIONS_PER_LIFE * len(self.lives)
        for _ in range(polls):
            if self.poll("buffer", Fault()) or self.poll("redrive", Fault()):
                continue
            moment = sqs_rules.next_visible_at((self.buffer_url, self.redrive_url))
            if moment is None:
                return
            self.clock.advance(max(0.01, moment - self.clock.now() + 0.01))
        raise Unbounded(f"the queues did not drain in {polls} polls")

    def expire_retention(self) -> None:
        """SQS deletes what is past its retention (see :mod:`.sqs_rules`)."""
        for url in (self.buffer_url, self.redrive_url):
            for body in sqs_rules.expire(url, self.clock.now()):
                self.record(self.life_of(scope_of(body))).retention_drops += 1

    def wait_for_reads(self) -> None:
        """Wait (real time, bounded) until the fake API has read every request sent: a
        request the client gave up on may be read late."""
        deadline = time.monotonic() + READ_WAIT_SECONDS
        while any(not send.read for send in self.sends.values()):
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)

    # -- reading the step's state ---------------------------------------------------------------
    def record_id(self, scope: Scope) -> str | None:
        """The record id the runtime keys ``scope`` under (None for a keyless scope), worked
        out once per scope: the lab asks for it at every poll, write and send, and it is a
        hash of the scope and the step's fixed settings. Kept with the types of the key's
        parts: ``1`` and ``1.0`` make equal scopes, not always the same record id."""
        kept = (scope, tuple(type(part) for part in scope.business_key))
        if kept not in self._record_ids:
            self._record_ids[kept] = self._work_out_record_id(scope)
        return self._record_ids[kept]

    def _work_out_record_id(self, scope: Scope) -> str | None:
        if any(part is None for part in scope.business_key):
            return None
        parts = self.step._components()
        key = record_key(
            list(scope.business_key),
            prompt_version=parts.settings.prompt_version,
            model_id=parts.settings.model_id,
            fingerprint=parts.fingerprint,
            replay_generation=scope.generation,
            redrive_of=scope.redrive_of,
        )
        return parts.persistence.record_id({"key": key})

    def stored(self, scope: Scope) -> dict[str, Any] | None:
        """The completed result stored for ``scope`` and still remembered, or None."""
        record_id = self.record_id(scope)
        if record_id is None:
            return None
        item = backends.get_item(TABLE, record_id)
        if not item or item["status"]["S"] != "COMPLETED":
            return None
        expiration = item.get("expiration", {}).get("N")
        if expiration is not None and float(expiration) < self.clock.now():
            return None
        result: dict[str, Any] = json.loads(item["data"]["S"])
        return result

    def dead_letters(self) -> list[dict[str, Any]]:
        """Every message on the DLQ now, in flight or not."""
        return [_moto_view(m) for m in sqs_rules.moto_queue(self.dlq_url)._messages]

    def queue_depth(self, url: str) -> int:
        return len(sqs_rules.moto_queue(url)._messages)

    # -- hooks: faults in, observations out -------------------------------------------------------
    def before_call(self, operation: str, params: Mapping[str, Any]) -> Any:
        """Before an AWS call of the step: kill or fail it, or answer it as SQS's rules, the
        refusing DLQ or the result bus would."""
        state = self.poll_state
        if state is None:
            return None
        key = _item_id(params)
        if operation in WRITES and state.record_id and key == state.record_id + BUDGET_SUFFIX:
            state.report_tried = True
        self._point("before", operation)
        if operation == "SendMessage":
            if params.get("QueueUrl") == self.dlq_url and self.persistent.dlq_refuses:
                return _refused("AccessDenied", "lab: the DLQ refuses every send", 403)
            return sqs_rules.refuse_oversized(params)
        if operation == "PutEvents" and self.bus is not None:
            return self.bus.answer(params)
        return None

    def after_call(
        self, operation: str, params: Mapping[str, Any], parsed: Mapping[str, Any], status: int
    ) -> None:
        """After an AWS call of the step answered: note what it did, then kill or fail."""
        state = self.poll_state
        if state is None:
            return
        record = self.record(state.life)
        if status < 300 and operation in WRITES:
            key = _item_id(params)
            if _records_send(operation, key, state.record_id):
                for send in state.unreported:
                    send.reported = True
                state.unreported.clear()
            if key is not None and state.record_id is not None:
                if key == state.record_id + BUDGET_SUFFIX:
                    state.claimed_unsent = _claims(operation, params, state.claimed_unsent)
                    if record.first_seen is None:
                        record.first_seen = self.clock.now()
                if key == state.record_id and self.stored(state.life.scope) is not None:
                    record.stored_once = True
        if status < 300 and operation == "SendMessage" and params.get("QueueUrl") == self.dlq_url:
            self.step_dead_letters[str(parsed.get("MessageId"))] = state.life
        if status < 300 and operation == "PutEvents":
            for event in ResultBus.accepted(params, parsed):
                record.events.append((event.detail_type, event.event_id))
        counted = "#counted" in (params.get("ExpressionAttributeNames") or {})
        self._point("after", operation, counted=counted)

    def model_point(self, kind: str) -> None:
        if self.poll_state is not None:
            self._point(kind, "model")

    def _point(self, kind: str, operation: str, *, counted: bool = False) -> None:
        state = self.poll_state
        assert state is not None
        state.points += 1
        state.by_operation[(kind, operation)] += 1
        named = (kind, operation, state.by_operation[(kind, operation)])
        fault = state.fault
        if fault.kill_at == state.points or fault.kill_on == named:
            if named == state.targeted_kill:
                self.persistent.kill_points[state.life.scope.business_key[1]].pop(0)
            record = self.record(state.life)
            if counted:
                record.count_window_kill = True
            if self.stored(state.life.scope) is not None:
                record.kills_after_result += 1
            raise LambdaKilled(f"killed {kind} {operation}")
        if operation != "model" and (fault.fail_at == state.points or fault.fail_on == named):
            if named == state.targeted_fail:
                self.persistent.fail_points[state.life.scope.business_key[1]].pop(0)
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": f"lab: {kind} {operation}"}},
                operation,
            )

    def on_send(self, headers: Any) -> Send | None:
        """Called in the invocation's thread as the runtime sends a model request: tag it with
        its send (returned), and note it if the key's result is already stored. Both are
        decided here, not when the server reads it: on a loaded machine the server can read a
        request after the client gave up on it and the lab moved on to the next poll."""
        state = self.poll_state
        if state is None:
            return None
        state.claimed_unsent = False
        state.report_tried = False
        send = Send(state.life, state.fault.api)
        number = str(len(self.world.sent) + 1)
        self.world.sent[number] = send
        self.sends[number] = send
        headers[SEND_HEADER] = number
        record = self.record(state.life)
        record.sends.append(send)
        state.unreported.append(send)
        state.sends.append(send)
        stored = self.stored(state.life.scope)
        if stored is not None or record.stored_once:
            stored = stored or {}
            record.requests_after_stored.append(
                f"sent at +{self.clock.now() - self.started_at:.0f} s, after a result stored "
                f"at {stored.get('completed_at')} ({stored.get('status')}), fault {state.fault}"
            )
        return send

    def _on_outcome(self, event: Mapping[str, Any], outcome: Mapping[str, Any]) -> None:
        state = self.poll_state
        life = state.life if state is not None else self.life_of(scope_of(json.dumps(event)))
        fails = (state is not None and state.fault.hook_fails) or self.persistent.hook_failures > 0
        if fails and self.persistent.hook_failures > 0:
            self.persistent.hook_failures -= 1
        self.record(life).outcomes.append((self.clock.now(), dict(outcome), not fails))
        if state is not None:
            # This delivery's own count, against what it sent and what it read of it.
            read = sum(1 for send in state.sends if send.billed and send.answered)
            self.record(life).deliveries.append(
                (int(outcome.get("model_requests") or 0), read, len(state.sends))
            )
        if fails:
            raise RuntimeError("lab: on_outcome failed")


def answer_request(world: LabWorld, provider: str, index: int, fake: Any) -> Any:
    """A fake API's script: count request ``index`` against the send it belongs to, and
    answer as that send's behaviour says (a request of no send, read after its schedule
    ended, gets a 200 and is not counted)."""
    number = fake.requests[index].headers.get(SEND_HEADER)
    send = world.sent.get(number or "")
    if send is None:
        return 200
    send.billed = model_api.billed(provider, send.behaviour)
    send.tokens = model_api.answered_with_tokens(send.behaviour)
    send.read = True
    if send.behaviour == "slow" and world.deadlines_on_the_clock:
        return 200  # whole, at once: the hooks pace its pieces on the lab's clock
    return model_api.reply(provider, send.behaviour)


def _item_id(params: Mapping[str, Any]) -> str | None:
    """The ``id`` of the DynamoDB item a call reads or writes (its ``Key`` or ``Item``)."""
    return (params.get("Key") or params.get("Item") or {}).get("id", {}).get("S")


def _refused(code: str, message: str, status: int) -> tuple[Any, dict[str, Any]]:
    from botocore.awsrequest import AWSResponse

    return AWSResponse("lab", status, {}, None), {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }


def _moto_view(message: Any) -> dict[str, Any]:
    try:
        body = json.loads(message.body)
    except ValueError:
        body = None
    return {
        "message_id": message.id,
        "text": message.body,
        "body": body,
        "bytes": len(message.body.encode()),
        "attributes": {
            name: value.get("StringValue")
            for name, value in (message.message_attributes or {}).items()
        },
    }


def _records_send(operation: str, key: str | None, record_id: str | None) -> bool:
    """Whether a write records what became of the invocation's sent request: any write of the
    budget item (a report, a give-back, a settle), or the idempotency record's update that
    saves a result. Powertools' own writes around it (the in-progress ``PutItem``, the
    ``DeleteItem`` when the handler raised) record nothing about the request."""
    if key is None or record_id is None:
        return False
    return key == record_id + BUDGET_SUFFIX or (key == record_id and operation == "UpdateItem")


def _claims(operation: str, params: Mapping[str, Any], claimed: bool) -> bool:
    """Whether a write of the budget item leaves an attempt claimed and not yet sent: a claim
    (``ADD #attempts :one``, or a restart that puts a pending token) sets it; a write that
    settles the pending attempt (a report, a give-back, a settled interruption: each
    ``REMOVE #pending``) clears it; any other write leaves it as it was."""
    if operation == "PutItem":
        return "pending" in (params.get("Item") or {})
    expression = str(params.get("UpdateExpression") or "")
    if "ADD #attempts :one" in expression:
        return True
    if "REMOVE #pending" in expression:
        return False
    return claimed
