"""Normalises the dead-letter message shapes into one failures-table item.

A message is filed by its shape (which service dead-lettered it) and by what the event
is: only a "Prospect Row Validated" row from the uploader is kind ``model`` (retryable
through the viewer); upload-level events are kind ``upload``; anything else ``other``.

Pure functions over the SQS record dict; no AWS calls.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any, cast

from prospect_contract import dead_letters as dl
from prospect_contract.events import (
    EVENT_SOURCE,
    ROW_VALIDATED,
    S3_SOURCE,
    UPLOAD_DETAIL_TYPES,
)
from prospect_contract.failures import KIND_DUPLICATE, KIND_MODEL, KIND_OTHER, KIND_UPLOAD

# The item limit is 400 KB; an SQS body is at most 256 KiB, so characters beyond this
# would only come from multi-byte text and are not worth risking a failed write.
RAW_BODY_MAX_CHARS = 100_000
UNATTRIBUTED_UPLOAD_ID = "unattributed"

SHAPE_EVENTBRIDGE_DLQ = "eventbridge-dlq"
SHAPE_LAMBDA_ON_FAILURE = "lambda-on-failure"
SHAPE_MODEL_STEP = "model-step"
SHAPE_LAMBDA_DLQ = "lambda-dlq"
#: The classify step's buffer queue redrove it (maxReceiveCount): SQS adds no error
#: attributes, the body is the EventBridge event, and the function crashed or timed out.
SHAPE_BUFFER_REDRIVE = "buffer-redrive"
SHAPE_UNRECOGNISED = "unrecognised"
#: The model step's dead-letter id (``dead_letter.id``, ``DEAD_LETTER_ID``).
DEAD_LETTER_ID_PATTERN = re.compile(r"[0-9a-f]{64}")

#: Error codes of a row that ran out of time or attempts on a passing condition (rate
#: limits, provider errors, timeouts, crashes), not of a row the model refused. A retry
#: of such a row is likely to succeed; the viewer may offer "Retry all retryable" on them.
TRANSIENT_ERROR_CODES = frozenset(
    {
        "RateLimitExhausted",
        "RateLimitError",
        "OverloadedError",
        "InternalServerError",
        "APITimeoutError",
        "APIConnectionError",
        "ModelTimeoutError",
        "EventAgeExceeded",
        "RetriesExhausted",
        "SDK_CLIENT_ERROR",
        "Sandbox.Timedout",
        dl.RECEIVES_EXHAUSTED,
    }
)

#: The model step raises this for a concurrent duplicate so Lambda retries it. If
#: that copy's retries run out while another delivery still holds the record, the
#: holder owns the row's outcome (its own retries and on-failure record); this
#: copy's record is kept apart so it never hides or overwrites the real cause.
IN_PROGRESS_ERROR = "IdempotencyAlreadyInProgressError"


def utc_now() -> str:
    """ISO-8601 UTC timestamp with a ``Z`` suffix."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _attributes(record: dict[str, Any]) -> dict[str, str]:
    """Flatten ``messageAttributes{NAME:{stringValue,dataType}}`` to ``{NAME: value}``."""
    flat: dict[str, str] = {}
    for name, value in (record.get("messageAttributes") or {}).items():
        if isinstance(value, dict) and value.get("stringValue") is not None:
            flat[name] = str(value["stringValue"])
    return flat


def _attribution(event: object) -> tuple[str | None, int | None, dict[str, Any]]:
    detail = event.get("detail") if isinstance(event, dict) else None
    if not isinstance(detail, dict):
        return None, None, {}
    upload_id = detail.get("upload_id")
    upload_id = upload_id if isinstance(upload_id, str) and upload_id.strip() else None
    row_number = detail.get("row_number")
    if isinstance(row_number, bool) or not isinstance(row_number, int) or row_number < 1:
        row_number = None
    return upload_id, row_number, detail


def _is_eventbridge_event(body: object) -> bool:
    return (
        isinstance(body, dict)
        and isinstance(body.get("source"), str)
        and isinstance(body.get("detail-type"), str)
        and isinstance(body.get("detail"), dict)
    )


def event_kind(event: object) -> str:
    """``model`` for a validated row of ours, ``upload`` for upload-level events, else
    ``other``: the viewer retries only ``model`` items, so nothing else is ever
    re-published onto the row bus."""
    if not _is_eventbridge_event(event):
        return KIND_OTHER
    source, detail_type = cast(dict[str, Any], event)["source"], cast(dict, event)["detail-type"]
    if source == EVENT_SOURCE and detail_type == ROW_VALIDATED:
        return KIND_MODEL
    if (source == EVENT_SOURCE and detail_type in UPLOAD_DETAIL_TYPES) or source == S3_SOURCE:
        return KIND_UPLOAD
    return KIND_OTHER


def _classify(
    body: dict[str, Any], attrs: dict[str, str], receive_count: str | None = None
) -> tuple[str, object, str, str]:
    """Return (source_shape, original_event, error_code, reason)."""
    context = body.get(dl.ON_FAILURE_CONTEXT)
    if isinstance(context, dict) and dl.ON_FAILURE_PAYLOAD in body:
        response = body.get(dl.ON_FAILURE_RESPONSE)
        response = response if isinstance(response, dict) else {}
        condition = str(context.get("condition") or "Unknown")
        error_type = response.get("errorType")
        error_message = response.get("errorMessage")
        invokes = context.get("approximateInvokeCount")
        reason = f"{condition} after {invokes} invocation(s)"
        if error_message:
            reason += f": {error_message}"
        payload = body[dl.ON_FAILURE_PAYLOAD]
        return SHAPE_LAMBDA_ON_FAILURE, payload, str(error_type or condition), reason
    if dl.RULE_ARN in attrs:
        code = attrs.get(dl.ERROR_CODE, "Unknown")
        return SHAPE_EVENTBRIDGE_DLQ, body, code, attrs.get(dl.ERROR_MESSAGE, code)
    if dl.ERROR_CODE in attrs:
        code = attrs[dl.ERROR_CODE]
        return SHAPE_MODEL_STEP, body, code, attrs.get(dl.ERROR_MESSAGE, code)
    if dl.LAMBDA_ERROR_CODE in attrs or dl.LAMBDA_REQUEST_ID in attrs:
        # A Lambda function DLQ (not an on-failure destination) uses these names.
        code = attrs.get(dl.LAMBDA_ERROR_CODE, "Unknown")
        return SHAPE_LAMBDA_DLQ, body, code, attrs.get(dl.LAMBDA_ERROR_MESSAGE, code)
    if _is_eventbridge_event(body):
        receives = receive_count if receive_count is not None else "?"
        reason = (
            f"the buffer queue gave up after {receives} receive(s): the function crashed or "
            "timed out on every one"
        )
        return SHAPE_BUFFER_REDRIVE, body, dl.RECEIVES_EXHAUSTED, reason
    return SHAPE_UNRECOGNISED, body, dl.UNRECOGNISED_DEAD_LETTER, "dead letter of an unknown shape"


def _without_dead_letter(event: object) -> object:
    """The original event: the model step's ``dead_letter`` member is not part of it, and
    a viewer retry must re-publish the event as it was."""
    if isinstance(event, dict) and dl.DEAD_LETTER_MEMBER in event:
        return {name: value for name, value in event.items() if name != dl.DEAD_LETTER_MEMBER}
    return event


def dead_letter_id(body: object, attrs: dict[str, str]) -> str | None:
    """The model step's dead-letter id: ``dead_letter.id`` in the body (it travels with the
    event even where attributes are lost), else the ``DEAD_LETTER_ID`` attribute. None when
    neither is a 64-hex id."""
    member = body.get(dl.DEAD_LETTER_MEMBER) if isinstance(body, dict) else None
    from_body = member.get("id") if isinstance(member, dict) else None
    for candidate in (from_body, attrs.get(dl.DEAD_LETTER_ID)):
        if isinstance(candidate, str) and DEAD_LETTER_ID_PATTERN.fullmatch(candidate):
            return candidate
    return None


def payload_omitted(body: object) -> dict[str, Any] | None:
    """The model step's ``dead_letter.payload_omitted`` note of a body cut to fit the queue
    (``fields``, ``bytes``, ``sha256``), or None."""
    member = body.get(dl.DEAD_LETTER_MEMBER) if isinstance(body, dict) else None
    note = member.get(dl.PAYLOAD_OMITTED) if isinstance(member, dict) else None
    if not isinstance(note, dict):
        return None
    fields = note.get("fields")
    return {
        "fields": [str(name) for name in fields] if isinstance(fields, list) else [],
        "bytes": int(note["bytes"]) if isinstance(note.get("bytes"), int) else 0,
        "sha256": str(note.get("sha256") or ""),
    }


def _note_cut_body(item: dict[str, Any], body: object) -> str:
    """Keep a cut body's ``payload_omitted`` note on ``item`` (it is then not retryable:
    its event is not whole); the words to add to its reason ("" when it was not cut)."""
    omitted = payload_omitted(body)
    if omitted is None:
        return ""
    item["payload_omitted"] = omitted
    return f" (body cut to fit the queue: {', '.join(omitted['fields'])} left out)"


def normalise(record: dict[str, Any], recorded_at: str | None = None) -> dict[str, Any]:
    """Turn one SQS record into a failures-table item.

    Kind: see ``event_kind``. Key: ``upload_id`` and ``model#%08d`` for a row
    (``detail.upload_id``/``detail.row_number``); ``event#<detail-type>`` for an
    attributed upload-level event; otherwise ``message#<messageId>`` (and upload
    ``unattributed``). A concurrent duplicate that gave up on an in-progress record is
    kind ``duplicate`` under ``duplicate#%08d``, so it never overwrites the row's real
    failure. ``retryable`` is True for a row whose error is transient
    (TRANSIENT_ERROR_CODES). The model step's ``dead_letter`` member is stored as
    ``dead_letter_id`` and left out of ``original_event``; a body the step cut to fit the
    queue keeps its ``payload_omitted`` note and is not retryable (its event is not whole).
    Never raises on bad input: a
    body that is not a JSON object is stored raw with error_code ``UnparseableDeadLetter``.
    """
    message_id = str(record.get("messageId", ""))
    body_text = record.get("body") or ""
    attrs = _attributes(record)
    item: dict[str, Any] = {
        "kind": KIND_OTHER,
        "message_id": message_id,
        "recorded_at": recorded_at or utc_now(),
        "retryable": False,
    }
    if attrs.get(dl.REQUEST_ID):
        item["request_id"] = attrs[dl.REQUEST_ID]
    try:
        body = json.loads(body_text)
    except (json.JSONDecodeError, TypeError):
        body = None
    if not isinstance(body, dict):
        item.update(
            upload_id=UNATTRIBUTED_UPLOAD_ID,
            failure_id=f"message#{message_id}",
            error_code=dl.UNPARSEABLE_DEAD_LETTER,
            reason=attrs.get(dl.ERROR_MESSAGE) or "dead-letter body is not a JSON object",
            source_shape=SHAPE_UNRECOGNISED,
            raw_body=str(body_text)[:RAW_BODY_MAX_CHARS],
        )
        return item
    receive_count = (record.get("attributes") or {}).get("ApproximateReceiveCount")
    shape, original_event, error_code, reason = _classify(body, attrs, receive_count)
    letter_id = dead_letter_id(original_event, attrs)
    if letter_id is not None:
        item["dead_letter_id"] = letter_id
    reason += _note_cut_body(item, original_event)
    original_event = _without_dead_letter(original_event)
    upload_id, row_number, detail = _attribution(original_event)
    kind = event_kind(original_event)
    if kind == KIND_MODEL and error_code == IN_PROGRESS_ERROR:
        kind = KIND_DUPLICATE
        reason = f"{reason} (a concurrent duplicate; the delivery that held the record owns "
        reason += "the row's outcome)"
    if kind in (KIND_MODEL, KIND_DUPLICATE) and upload_id and row_number is not None:
        failure_id = f"{kind}#{row_number:08d}"
    elif kind == KIND_UPLOAD and upload_id and isinstance(original_event, dict):
        slug = "-".join(str(original_event["detail-type"]).lower().split())
        failure_id = f"event#{slug}"
    else:
        failure_id = f"message#{message_id}"
    item.update(
        kind=kind,
        retryable=kind == KIND_MODEL
        and error_code in TRANSIENT_ERROR_CODES
        and "payload_omitted" not in item,
        upload_id=upload_id or UNATTRIBUTED_UPLOAD_ID,
        failure_id=failure_id,
        error_code=error_code,
        reason=reason,
        source_shape=shape,
        original_event=json.dumps(original_event, ensure_ascii=False)[:RAW_BODY_MAX_CHARS],
    )
    if row_number is not None and kind in (KIND_MODEL, KIND_DUPLICATE):
        item["row_number"] = row_number
    for name in (dl.RULE_ARN, dl.TARGET_ARN):
        if name in attrs:
            item[name.lower()] = attrs[name]
    return item


def replay_generation_of(item: dict[str, Any]) -> int:
    """The operator retry the failed event was (its detail's ``replay_generation``), 0 for
    the upload's own delivery or an event that names none."""
    try:
        event = json.loads(str(item.get("original_event") or ""))
    except json.JSONDecodeError:
        return 0
    detail = event.get("detail") if isinstance(event, dict) else None
    generation = detail.get("replay_generation") if isinstance(detail, dict) else None
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
        return 0
    return generation


def row_attribution(item: dict[str, Any]) -> tuple[str, int] | None:
    """(upload_id, row_number) when ``item`` is a row's own failure, the one kind the
    upload ledger counts; None for duplicates, upload-level and unattributed items."""
    if item.get("kind") != KIND_MODEL or item.get("upload_id") == UNATTRIBUTED_UPLOAD_ID:
        return None
    row_number = item.get("row_number")
    if not isinstance(row_number, int):
        return None
    return str(item["upload_id"]), row_number
