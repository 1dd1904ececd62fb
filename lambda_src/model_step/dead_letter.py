"""Sending failures to the dead-letter queue, shaped like EventBridge's own DLQ messages: the
body is the original event, the reason is in message attributes.

Every message for a record carries that record's dead-letter id, twice: as the attribute
``DEAD_LETTER_ID`` and as a top-level body member ``"dead_letter": {"id", "error_code"}``.
The body is the part that certainly survives an operator's "Start DLQ redrive" (a new
message, whose attributes may or may not be kept), and it is how the runtime recognises such a
message back on its buffer queue: an operator retry with a budget of one request. Two
messages for one record (a kill between the send and its record sends again) carry one id, so
consumers can count the failure once.

Every message fits the queue, so a send never fails on its own content:

- **SQS's characters.** SQS refuses characters outside XML's set (control characters such
  as an ANSI escape in a parser's error text, lone surrogates, U+FFFE/U+FFFF). Attribute
  values are escaped (``\\u001b``) and cut to fit; the body is UTF-8 JSON
  (:func:`json_body`) in which only those characters are escaped: they can only occur
  inside JSON strings, where ``\\uXXXX`` means the same character.
- **256 KiB, attributes included** (:data:`MAX_MESSAGE_BYTES`). SQS's default for new
  queues is now 1 MiB, but a queue made earlier, or one you bring, may still have 256 KiB;
  a message that fits 256 KiB fits every queue. UTF-8 is what keeps a 150 KB non-ASCII row
  a 150 KB body (escaped ASCII made it 300 KB, which could never be sent). A body still too
  big drops the largest ``detail`` fields until it fits, never the event's ids nor the
  business key's fields (``IDEMPOTENCY_KEY``), and says so in the marker:
  ``"payload_omitted": {"fields": ["detail.<name>", ...], "bytes": <the full body's size>,
  "sha256": <the full body's hash>}``. An operator's redrive of such a dead letter is
  refused (``PayloadOmitted``): the model never sees a cut payload.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from .errors import DeadLetterError
from .key import DEAD_LETTER_FIELD, dead_letter_marker
from .lifetime import FIRST_SEEN_FIELD

#: 1 KiB of error text is plenty, and keeps the attributes far below the message limit.
#: ``ERROR_MESSAGE`` is the stored reason: the runtime's own words, an error's type, status
#: and request id, never a provider's message (issue 34: it can quote the request).
MAX_ERROR_MESSAGE_CHARS = 1024
#: Other attribute values (codes, ids) are short; this only bounds a hostile one.
MAX_ATTRIBUTE_CHARS = 256
#: The message size every queue accepts: body plus every attribute's name, type and value.
MAX_MESSAGE_BYTES = 262_144
#: Kept for the ``ERROR_MESSAGE`` attribute when the body is cut: 1,024 characters of up to
#: 4 UTF-8 bytes each, its name and type, and slack.
_ERROR_MESSAGE_RESERVE = MAX_ERROR_MESSAGE_CHARS * 4 + 64
ERROR_CODE = "ERROR_CODE"
ERROR_MESSAGE = "ERROR_MESSAGE"
REQUEST_ID = "REQUEST_ID"
DEAD_LETTER_ID = "DEAD_LETTER_ID"
#: The marker member of a body cut to fit (see the module docstring).
PAYLOAD_OMITTED = "payload_omitted"
#: The marker member naming the dead letter an operator redrove, when this one is its row's
#: next dead letter.
REDRIVEN_FROM = "redriven_from"
#: Members of an event never dropped from a cut body: its identity.
EVENT_IDS = frozenset({"version", "id", "detail-type", "source", "account", "time", "region"})
# Characters SQS accepts: #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF.
_REFUSED = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class DeadLetterPublisher:
    """Sends one event to ``queue_url`` with ``ERROR_CODE``, ``ERROR_MESSAGE``,
    ``DEAD_LETTER_ID`` and, when the model API returned one, ``REQUEST_ID``."""

    def __init__(
        self,
        queue_url: str,
        sqs_client: Callable[[], Any],
        *,
        protected: Collection[str] = frozenset(),
    ) -> None:
        """``sqs_client()`` returns a boto3 SQS client; it is called on first send only.
        ``protected``: the ``detail`` fields a body cut to fit never drops (the business
        key's; default none)."""
        self._queue_url = queue_url
        self._sqs_client = sqs_client
        self._protected = frozenset(protected)

    def send(
        self,
        event: Mapping[str, Any] | str,
        *,
        error_code: str,
        error_message: str,
        dead_letter_id: str | None = None,
        request_id: str | None = None,
        record_id: str | None = None,
    ) -> str:
        """Send and return the SQS message id. Raises ``DeadLetterError`` if SQS fails, so
        the delivery fails and is retried rather than dropping the event. ``event`` is the
        EventBridge event (sent as JSON, with the dead-letter marker) or, for an unparseable
        queue message, its raw body (sent as it came, cut to fit). ``record_id``: the key's
        record, named in the marker (a dead letter whose redrive republishes it)."""
        attributes = {ERROR_CODE: _string(sendable(error_code, MAX_ATTRIBUTE_CHARS))}
        if dead_letter_id:
            attributes[DEAD_LETTER_ID] = _string(sendable(dead_letter_id, MAX_ATTRIBUTE_CHARS))
        if request_id:
            attributes[REQUEST_ID] = _string(sendable(request_id, MAX_ATTRIBUTE_CHARS))
        room = MAX_MESSAGE_BYTES - _size(attributes) - _ERROR_MESSAGE_RESERVE
        if isinstance(event, str):
            body = _cut_text(event, room)
        else:
            marker = {"error_code": error_code, "record": record_id}
            body = marked_body(event, dead_letter_id, marker, self._protected, room)
        left = MAX_MESSAGE_BYTES - len(body.encode()) - _size(attributes) - 64
        limit = max(0, min(MAX_ERROR_MESSAGE_CHARS, left // 4))
        attributes[ERROR_MESSAGE] = _string(sendable(error_message or error_code, limit) or "-")
        try:
            response = self._sqs_client().send_message(
                QueueUrl=self._queue_url, MessageBody=body, MessageAttributes=attributes
            )
        except Exception as exc:
            raise DeadLetterError(f"could not send event to dead-letter queue: {exc}") from exc
        return str(response["MessageId"])


def marked_body(
    event: Mapping[str, Any],
    dead_letter_id: str | None,
    marker: Mapping[str, Any],
    protected: Collection[str] = frozenset(),
    room: int = MAX_MESSAGE_BYTES,
) -> str:
    """The event as UTF-8 JSON, with this record's marker (``{"id"}`` plus the non-empty
    members of ``marker``) in place of any it came with, at most ``room`` bytes (see the
    module docstring). A ``payload_omitted`` note the event came with is carried on: its
    body is still the cut one."""
    # The first-seen stamp is the runtime's own note on a re-enqueued copy; a redriven dead
    # letter is a new key with a memory of its own.
    document = {
        name: value
        for name, value in event.items()
        if name not in (DEAD_LETTER_FIELD, FIRST_SEEN_FIELD)
    }
    carried = _carried_note(event)
    note = {name: value for name, value in marker.items() if value}
    if carried is not None:
        note[PAYLOAD_OMITTED] = carried
    previous = dead_letter_marker(event)
    if previous is not None and previous["id"] != dead_letter_id:
        # A redriven dead letter that failed again: which one it was, so the operator (and
        # the ledger) can follow a row through its redrives.
        note[REDRIVEN_FROM] = previous["id"]
    if dead_letter_id:
        document[DEAD_LETTER_FIELD] = {"id": dead_letter_id, **note}
    body = json_body(document)
    if len(body.encode()) <= room:
        return body
    return _cut_body(document, body, note, protected, room)


def _cut_body(
    document: dict[str, Any],
    full: str,
    note: dict[str, Any],
    protected: Collection[str],
    room: int,
) -> str:
    """``document`` without its largest members until it fits ``room``: ``detail`` fields
    other than ``protected`` first, then the protected ones, then any member that is not
    one of :data:`EVENT_IDS` (these last two only for a key too big on its own). Sizes are
    measured once and the body serialised again only when the estimate says it fits."""
    encoded = full.encode()
    omitted: list[str] = []
    marker = {
        "id": _marker_id(document, encoded),
        **note,
        PAYLOAD_OMITTED: {
            "fields": omitted,
            "bytes": len(encoded),
            "sha256": hashlib.sha256(encoded).hexdigest(),
        },
    }
    cut = {**document, DEAD_LETTER_FIELD: marker}
    detail = document.get("detail")
    if isinstance(detail, Mapping):
        cut["detail"] = detail = dict(detail)
    estimate = len(json_body(cut).encode())
    for owner, name, size in _drop_order(cut, detail, protected):
        del owner[name]
        path = f"detail.{name}" if owner is detail else name
        omitted.append(path)
        estimate += len(json_body(path).encode()) + 1 - size
        if estimate <= room:
            body = json_body(cut)
            estimate = len(body.encode())
            if estimate <= room:
                return body
    return json_body(cut)  # ids and the marker only: a few hundred bytes


def _drop_order(
    cut: dict[str, Any], detail: Any, protected: Collection[str]
) -> list[tuple[dict[str, Any], str, int]]:
    """The members to drop, in order, each with its size as a member (name, colon, value,
    comma): largest first among the detail's free fields, then its key fields, then the
    event's other members."""

    def sized(owner: dict[str, Any], names: list[str]) -> list[tuple[dict[str, Any], str, int]]:
        members = [
            (owner, name, len(json_body(name).encode()) + len(json_body(owner[name]).encode()) + 2)
            for name in names
        ]
        return sorted(members, key=lambda member: member[2], reverse=True)

    order: list[tuple[dict[str, Any], str, int]] = []
    if isinstance(detail, dict):
        order += sized(detail, [name for name in detail if name not in protected])
        order += sized(detail, [name for name in detail if name in protected])
    others = [name for name in cut if name not in EVENT_IDS | {"detail", DEAD_LETTER_FIELD}]
    return order + sized(cut, others)


def _marker_id(document: Mapping[str, Any], encoded: bytes) -> str:
    """The marker's id; a cut body always has one, so its redrive is recognised."""
    marker = document.get(DEAD_LETTER_FIELD)
    if isinstance(marker, Mapping) and isinstance(marker.get("id"), str):
        return str(marker["id"])
    return hashlib.sha256(encoded).hexdigest()


def _carried_note(event: Mapping[str, Any]) -> Any:
    marker = event.get(DEAD_LETTER_FIELD)
    return marker.get(PAYLOAD_OMITTED) if isinstance(marker, Mapping) else None


def json_body(document: Any) -> str:
    """``document`` as compact UTF-8 JSON that SQS accepts as it is: only the characters SQS
    refuses are escaped (``\\uXXXX``, valid inside the JSON strings they can only be in)."""
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"), default=str)
    return _REFUSED.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def sendable(text: str, limit: int) -> str:
    """``text`` with every character SQS refuses escaped as ``\\uXXXX``, cut to ``limit``
    characters (the cut marked with an ellipsis)."""
    escaped = _REFUSED.sub(lambda match: f"\\u{ord(match.group()):04x}", text)
    return truncate(escaped, limit)


def truncate(text: str, limit: int = MAX_ERROR_MESSAGE_CHARS) -> str:
    """Cut ``text`` to ``limit`` characters, marking the cut with an ellipsis."""
    if limit <= 0:
        return ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _cut_text(text: str, room: int) -> str:
    """A raw body (not an event) cut to ``room`` UTF-8 bytes, if it is longer."""
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) <= room:
        return text
    return encoded[:room].decode("utf-8", "ignore")


def _string(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value}


def _size(attributes: Mapping[str, Mapping[str, str]]) -> int:
    return sum(
        len(name.encode()) + len(value["DataType"].encode()) + len(value["StringValue"].encode())
        for name, value in attributes.items()
    )
