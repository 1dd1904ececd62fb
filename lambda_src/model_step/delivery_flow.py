"""One delivery through the step: its key, its record, its hand-offs, its logs.

:func:`deliver` is what :class:`~.runtime.ModelStep` runs for every delivery of an event,
whatever carried it (EventBridge directly, the buffer or redrive queue, a batch result):
:func:`process` builds the record key, runs the unit of work inside its idempotency record
(or replays it), hands a dead letter to the DLQ and the result to the result bus, once per
key; :func:`deliver` adds the delivery's logs and metrics. See :mod:`.runtime` for the steps.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyValidationError,
)

from . import batch_signals, lifetime, misconfiguration
from .buffer_queue import QueueDelivery
from .components import StepComponents
from .dead_letter import PAYLOAD_OMITTED
from .delivery import Delivery, Wait
from .errors import NonRetryableError, PayloadMismatchError, ResultEventUndeliverableError
from .key import (
    canonical,
    dead_letter_marker,
    extract_business_key,
    record_key,
    split_replay_generation,
)
from .model_call import default_user_message, error_code
from .outcome import StepResult

RESULT_EVENT_UNDELIVERABLE = ResultEventUndeliverableError.error_code


def requeue(
    parts: StepComponents,
    delivery: Delivery,
    event: Mapping[str, Any],
    queue: QueueDelivery,
    wait: float,
) -> None:
    """A copy of the row back on the buffer queue, visible after ``wait`` seconds, with its
    key's first-seen stamp when known (:mod:`.lifetime`). A send the deployment refuses
    (issue 36) is a configuration error like any other: counted, logged once per container,
    and the row waits on its own queue for the fix (raised, after a held visibility on the
    buffer queue); no copy was made, so none is lost."""
    stamp = None
    if delivery.first_seen is not None and delivery.record_id is not None:
        stamp = lifetime.stamp(delivery.first_seen, delivery.record_id)
    try:
        parts.buffer.requeue(event, queue, wait, stamp)
    except Exception as exc:
        denied = misconfiguration.denied_call(exc)
        if denied is None:
            raise
        delivery.log.configuration_error(denied, first=misconfiguration.first_report(denied))
        delivery.log.flush()
        if queue.source == "buffer":
            parts.buffer.hold(queue, misconfiguration.CONFIGURATION_RETRY_SECONDS)
        raise


def deliver(parts: StepComponents, delivery: Delivery) -> StepResult:
    """One delivery of the step (:func:`process`), with its logs and metrics; returns its
    result or raises."""
    log = delivery.log
    try:
        result = process(parts, delivery)
    except (batch_signals.Staged, batch_signals.BatchResubmit) as waiting:
        # Message Batches delivery (issue 19): no request now; the key waits in a batch.
        log.spent(delivery.spend)
        log.batched(getattr(waiting, "error_code", "Staged"))
        log.flush()
        raise
    except IdempotencyAlreadyInProgressError:
        log.in_progress()
        log.flush()
        raise
    except Wait as wait:
        log.spent(delivery.spend)
        status = "requeued" if wait.code == "Requeued" else wait.status
        log.waiting(status, wait.code, 0, counted=wait.counted)
        log.flush()
        raise
    except Exception as exc:
        delivery.result_not_saved(exc)
        log.spent(delivery.spend)
        denied = misconfiguration.denied_call(exc)
        if denied is None:
            log.transient(error_code(exc), getattr(exc, "request_id", None))
        else:  # issue 36: the deployment, not the row; logged once per container
            log.configuration_error(denied, first=misconfiguration.first_report(denied))
        log.flush()
        raise
    log.spent(delivery.spend)
    log.finished(
        result,
        replayed=delivery.replayed,
        sent=delivery.sent_dead_letter,
        counted=delivery.counted_dead_letter,
    )
    log.flush()
    return result


def process(parts: StepComponents, delivery: Delivery) -> StepResult:
    """The delivery's key, its record (a replay, or the unit of work under its lock), the
    dead letter's hand-off and the result event (see :mod:`.runtime`)."""
    settings = parts.settings
    event = delivery.event
    raw_detail = event.get("detail")
    marker = dead_letter_marker(event)
    redrive_of = None if marker is None else str(marker["id"])
    try:
        detail, generation = split_replay_generation(
            canonical(raw_detail) if isinstance(raw_detail, dict) else {}
        )
        business_key = extract_business_key(detail, settings.idempotency_key)
    except NonRetryableError as error:
        # No record can hold this outcome; the hand-off is keyed on the event id instead.
        dead_key = {"event_id": event.get("id"), "error_code": error.error_code}
        if redrive_of is not None:
            dead_key["redrive_of"] = redrive_of
        result = parts.work.dead_letter(error, None, dead_key)
        return parts.work.hand_off_result(result, dead_key, delivery)
    if marker is not None and marker.get("error_code") == RESULT_EVENT_UNDELIVERABLE:
        # An operator's redrive of a result event the bus refused: republish, never ask.
        return parts.result_hand_off.republish(marker, business_key, delivery)
    key = record_key(
        business_key,
        prompt_version=settings.prompt_version,
        model_id=settings.model_id,
        fingerprint=parts.fingerprint,
        replay_generation=generation,
        redrive_of=redrive_of,
    )
    request: dict[str, Any] = {"key": key, "detail": detail}
    delivery.request = request
    delivery.record_id = parts.persistence.record_id(request)
    # The record id, never the key's parts: a part can be row data (an email), and
    # every log line of the delivery carries these fields.
    delivery.log.fields["record_id"] = delivery.record_id
    delivery.first_seen = lifetime.stamped_first_seen(event, delivery.record_id)
    if marker is not None and PAYLOAD_OMITTED in marker:
        return parts.work.refuse_cut_payload(key, delivery)
    try:
        stored: StepResult = parts.complete(request=request, delivery=delivery)
    except IdempotencyValidationError as exc:
        mismatch = PayloadMismatchError(f"same idempotency key, different payload: {exc}")
        payload = hashlib.sha256(default_user_message(detail).encode()).hexdigest()
        dead_key = {**key, "payload": payload}
        result = parts.work.dead_letter(mismatch, key, dead_key)
        return parts.work.hand_off_result(result, dead_key, delivery)
    delivery.key_result = stored
    if stored["status"] == "dead_lettered":
        stored = parts.work.hand_off_result(stored, dict(key), delivery)
    _publish_result(parts, stored, request, delivery)
    return stored


def _publish_result(
    parts: StepComponents, result: StepResult, request: dict[str, Any], delivery: Delivery
) -> None:
    """The key's terminal result on the result bus, once per record key (its own hand-off
    record): a duplicate replays the hand-off, an operator's retry is a new key. Keyless
    events and payload mismatches have no outcome of a key, so they publish nothing."""
    if parts.result_events is None:
        return
    record_id = delivery.record_id or parts.persistence.record_id(request)
    parts.publish_result(
        request={"key": request["key"], "result": result, "record_id": record_id},
        delivery=delivery,
    )
