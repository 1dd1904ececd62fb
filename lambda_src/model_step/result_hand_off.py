"""A key's result event: at most once whatever the kills, and in a bounded number of tries.

:meth:`ResultHandOff.publish` is the unit of work of the ``#result-event`` hand-off record (a
duplicate of a published key replays that record and publishes nothing). Inside it:

1. **Intent first.** Before PutEvents the delivery writes an intent (a token and the time) on
   the hand-off's item (:class:`.hand_off_item.HandOffItem`), conditional on none being
   there. A kill after PutEvents leaves the intent; the next delivery finds it.
2. **Reconcile what was left.** A delivery that finds an intent (a kill, or an earlier
   failure after which the bus may have taken the event) does not publish blindly. On a
   **classic** bus, which cannot deduplicate, it publishes nothing: the event is out or lost,
   and nobody can tell which, so it counts ``ResultEventsUncertain`` (the construct alarms on
   it; docs/operations.md says what to do) and completes the hand-off. On a **v2** bus it
   sends again under the same ``DeduplicationId`` while the intent is younger than the
   bus's 300 s deduplication window less :data:`RESEND_MARGIN_SECONDS`, so the bus drops the
   repeat; older, it is uncertain as on a classic bus.
3. **Certain refusals are counted.** A refusal (an error answer, or an entry with an
   ``ErrorCode``) clears this delivery's own intent, counts a failure on the key and raises:
   the delivery is retried and replays the stored result, never calling the model. The
   :data:`~.hand_off_item.MAX_HAND_OFF_FAILURES`-th refusal ends the tries: a coded dead
   letter ``ResultEventUndeliverable`` goes to the DLQ (its marker names the key's record),
   the stored result is kept, and the row is acknowledged.
4. **An operator's redrive of that dead letter republishes** (:meth:`ResultHandOff.republish`):
   the stored result of the named record is published under a hand-off of its own, keyed
   on the dead letter's id, and the model is never called.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from . import clock
from .delivery import Delivery
from .errors import (
    MemoryExpiredError,
    ResultEventError,
    ResultEventUndeliverableError,
)
from .hand_off_item import MAX_HAND_OFF_FAILURES, Begun, Intent
from .key import dead_key_of_life
from .outcome import DeadLetteredResult, StepResult

if TYPE_CHECKING:
    from .step_parts import HandOffParts

#: EventBridge v2's deduplication window: a repeat of a DeduplicationId within it is dropped.
V2_DEDUPLICATION_WINDOW_SECONDS = 300
#: Kept from the end of that window before re-sending: the re-send's own time (the client's
#: 5 s connect and 10 s read timeouts, three sends) and clock skew between Lambda and the bus.
RESEND_MARGIN_SECONDS = 60
#: The dead-lettered hand-off of a key whose result event could not be delivered.
UNDELIVERABLE_KEY = "undeliverable"
#: The marker member naming the record whose stored result a redrive republishes.
RECORD_MEMBER = "record"


class ResultHandOff:
    """The result-event hand-off of a step (one per container)."""

    def __init__(self, parts: HandOffParts) -> None:
        self._parts = parts

    def publish(self, *, request: dict[str, Any], delivery: Delivery) -> dict[str, Any]:
        """The unit of work of the ``#result-event`` record: ``request`` is ``{"key": the
        hand-off key, "result": the stored result, "record_id": the key's record id}``."""
        parts = self._parts
        publisher = parts.result_events
        assert publisher is not None
        item = parts.result_event_item(request)
        begun = item.begin()
        if not begun.written and begun.intent is None:
            return self._undeliverable(request, delivery, begun.failures)
        intent = begun.intent
        assert intent is not None
        if not begun.written and not self._may_resend(intent):
            delivery.log.result_event_uncertain(publisher.kind, clock.now() - intent.at)
            return {"result_event_id": None, "uncertain": True}
        try:
            event_id = publisher.publish(request["result"], request["record_id"])
        except ResultEventError as error:
            return self._refused(error, request, delivery, begun)
        return {"result_event_id": event_id}

    def _may_resend(self, intent: Intent) -> bool:
        """A publish left unfinished may be sent again only where the bus drops a repeat."""
        publisher = self._parts.result_events
        assert publisher is not None
        age = clock.now() - intent.at
        return publisher.kind == "v2" and age < (
            V2_DEDUPLICATION_WINDOW_SECONDS - RESEND_MARGIN_SECONDS
        )

    def _refused(
        self, error: ResultEventError, request: dict[str, Any], delivery: Delivery, begun: Begun
    ) -> dict[str, Any]:
        """An uncertain failure keeps the intent (the next delivery reconciles) and raises; a
        certain refusal clears it, counts a failure, and raises until the last one."""
        if error.uncertain:
            raise error
        item = self._parts.result_event_item(request)
        assert begun.intent is not None
        item.clear(begun.intent.token)
        failures = item.failed()
        if failures < MAX_HAND_OFF_FAILURES:
            raise error
        return self._undeliverable(request, delivery, failures, str(error))

    def _undeliverable(
        self, request: dict[str, Any], delivery: Delivery, failures: int, cause: str = ""
    ) -> dict[str, Any]:
        """The last try: the key's result event becomes a coded dead letter (sent once, by its
        own hand-off), and the hand-off completes, so the row is acknowledged."""
        work = self._parts.work
        result: StepResult = request["result"]
        owner = _result_key(result)
        # In the key's life, as its own dead letter is: a later life's redrive republishes
        # its own result, never replays the earlier life's republish.
        first_seen = self._parts.budget(request).read().first_seen
        dead_key = dead_key_of_life(request["key"], first_seen)
        dead_key[UNDELIVERABLE_KEY] = "result-event"
        error = ResultEventUndeliverableError(
            f"the result bus refused this key's result event on {failures} deliveries"
            + (f" (last: {cause})" if cause else "")
            + "; the stored result is kept, and a redrive of this dead letter publishes it"
        )
        dead = work.dead_letter(error, owner, dead_key)
        sent = work.hand_off_result(dead, dead_key, delivery, record_id=request["record_id"])
        return {"result_event_id": None, "dead_letter_id": sent.get("dead_letter_id")}

    def republish(
        self, marker: Mapping[str, Any], business_key: list[Any], delivery: Delivery
    ) -> StepResult:
        """An operator's redrive of a ``ResultEventUndeliverable`` dead letter: the stored
        result of the record its marker names, published under a hand-off of its own (keyed
        on this dead letter's id) and returned as a replay. The model is never called; a
        record that is gone, or that is not this row's, is a ``KeyMemoryExpired`` dead
        letter."""
        parts = self._parts
        record_id = marker.get(RECORD_MEMBER)
        prefix = parts.settings.record_prefix + "#"
        stored = None
        if isinstance(record_id, str) and record_id.startswith(prefix):
            stored = parts.persistence.stored_result_of(record_id)
        if stored is None or stored.get("key") != business_key:
            return self._nothing_to_republish(marker, business_key, delivery)
        delivery.record_id = str(record_id)
        delivery.log.fields["record_id"] = delivery.record_id  # never the key's parts
        if parts.result_events is not None:
            hand_off_key = {RECORD_MEMBER: record_id, "republish_of": marker["id"]}
            parts.publish_result(
                request={"key": hand_off_key, "result": stored, "record_id": record_id},
                delivery=delivery,
            )
        return cast(StepResult, stored)

    def _nothing_to_republish(
        self, marker: Mapping[str, Any], business_key: list[Any], delivery: Delivery
    ) -> DeadLetteredResult:
        work = self._parts.work
        dead_key = {"business_key": business_key, "republish_of": marker["id"]}
        error = MemoryExpiredError(
            "a redrive of a ResultEventUndeliverable dead letter whose key's stored result "
            "is gone (or is not this row's): nothing to publish, and the model is not called"
        )
        dead = work.dead_letter(error, {"business_key": business_key}, dead_key)
        return work.hand_off_result(dead, dead_key, delivery)


def _result_key(result: Mapping[str, Any]) -> dict[str, Any] | None:
    """The record-key fields a dead letter of ``result``'s key reports: its business key and
    its operator retry's generation."""
    if result.get("key") is None:
        return None
    owner: dict[str, Any] = {"business_key": result["key"]}
    if "replay_generation" in result:
        owner["replay_generation"] = result["replay_generation"]
    return owner
