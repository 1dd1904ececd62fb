"""Sending failures to the dead-letter queue, shaped like EventBridge's own DLQ messages: the
body is the original event, the reason is in message attributes.

Every message for a record carries that record's dead-letter id, twice: as the attribute
``DEAD_LETTER_ID`` and as a top-level body member ``"dead_letter": {"id", "error_code"}``.
The body is the part that certainly survives an operator's "Start DLQ redrive" (a new
message, whose attributes may or may not be kept), and it is how the runtime recognises such a
message back on its buffer queue: an operator retry with a budget of one request. Two
messages for one record (a kill between the send and its record sends again) carry one id, so
consumers can count the failure once.

SQS refuses attribute values with characters outside XML's set (control characters such as
an ANSI escape in a parser's error text) and a message over 256 KiB; attribute values are
escaped (``\\u001b``) and cut to fit, so a send never fails on its own content.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from .errors import DeadLetterError
from .key import DEAD_LETTER_FIELD
from .lifetime import FIRST_SEEN_FIELD

#: 1 KiB of error text is plenty, and keeps the attributes far below the message limit.
#: ``ERROR_MESSAGE`` is the stored reason: the runtime's own words, an error's type, status
#: and request id, never a provider's message (issue 34: it can quote the request).
MAX_ERROR_MESSAGE_CHARS = 1024
#: Other attribute values (codes, ids) are short; this only bounds a hostile one.
MAX_ATTRIBUTE_CHARS = 256
#: SQS's limit for a message: body plus every attribute's name, type and value.
MAX_MESSAGE_BYTES = 262_144
ERROR_CODE = "ERROR_CODE"
ERROR_MESSAGE = "ERROR_MESSAGE"
REQUEST_ID = "REQUEST_ID"
DEAD_LETTER_ID = "DEAD_LETTER_ID"
# Characters SQS accepts: #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF.
_REFUSED = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class DeadLetterPublisher:
    """Sends one event to ``queue_url`` with ``ERROR_CODE``, ``ERROR_MESSAGE``,
    ``DEAD_LETTER_ID`` and, when the model API returned one, ``REQUEST_ID``."""

    def __init__(self, queue_url: str, sqs_client: Callable[[], Any]) -> None:
        """``sqs_client()`` returns a boto3 SQS client; it is called on first send only."""
        self._queue_url = queue_url
        self._sqs_client = sqs_client

    def send(
        self,
        event: Mapping[str, Any] | str,
        *,
        error_code: str,
        error_message: str,
        dead_letter_id: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """Send and return the SQS message id. Raises ``DeadLetterError`` if SQS fails, so
        the delivery fails and is retried rather than dropping the event. ``event`` is the
        EventBridge event (sent as JSON, with the dead-letter marker) or, for an unparseable
        queue message, its raw body (sent as it came)."""
        attributes = {ERROR_CODE: _string(sendable(error_code, MAX_ATTRIBUTE_CHARS))}
        if dead_letter_id:
            attributes[DEAD_LETTER_ID] = _string(sendable(dead_letter_id, MAX_ATTRIBUTE_CHARS))
        if request_id:
            attributes[REQUEST_ID] = _string(sendable(request_id, MAX_ATTRIBUTE_CHARS))
        body = event if isinstance(event, str) else marked_body(event, error_code, dead_letter_id)
        room = MAX_MESSAGE_BYTES - len(body.encode()) - _size(attributes) - 64
        limit = max(0, min(MAX_ERROR_MESSAGE_CHARS, room // 4))
        attributes[ERROR_MESSAGE] = _string(sendable(error_message or error_code, limit) or "-")
        try:
            response = self._sqs_client().send_message(
                QueueUrl=self._queue_url, MessageBody=body, MessageAttributes=attributes
            )
        except Exception as exc:
            raise DeadLetterError(f"could not send event to dead-letter queue: {exc}") from exc
        return str(response["MessageId"])


def marked_body(event: Mapping[str, Any], error_code: str, dead_letter_id: str | None) -> str:
    """The event as JSON (ASCII only, so always sendable), with this record's marker in place
    of any marker it came with."""
    # The first-seen stamp is the runtime's own note on a re-enqueued copy; a redriven dead
    # letter is a new key with a memory of its own.
    document = {
        name: value
        for name, value in event.items()
        if name not in (DEAD_LETTER_FIELD, FIRST_SEEN_FIELD)
    }
    if dead_letter_id:
        document[DEAD_LETTER_FIELD] = {"id": dead_letter_id, "error_code": error_code}
    return json.dumps(document, default=str)


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


def _string(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value}


def _size(attributes: Mapping[str, Mapping[str, str]]) -> int:
    return sum(
        len(name.encode()) + len(value["DataType"].encode()) + len(value["StringValue"].encode())
        for name, value in attributes.items()
    )
