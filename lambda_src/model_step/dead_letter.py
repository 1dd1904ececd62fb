"""Sending non-retryable events to the dead-letter queue, shaped like EventBridge's own DLQ
messages: the body is the original event, the reason is in message attributes."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from .errors import DeadLetterError

# SQS allows 256 KiB per message; attributes count towards it. 1 KiB of error text is plenty.
MAX_ERROR_MESSAGE_CHARS = 1024


class DeadLetterPublisher:
    """Sends one event to ``queue_url`` with ``ERROR_CODE``, ``ERROR_MESSAGE`` (truncated to
    1024 characters) and, when the model API returned one, ``REQUEST_ID`` attributes."""

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
        request_id: str | None = None,
    ) -> str:
        """Send and return the SQS message id. Raises ``DeadLetterError`` if SQS fails, so
        the delivery fails and is retried rather than dropping the event. ``event`` is the
        EventBridge event (sent as JSON) or, for an unparseable queue message, its raw body."""
        attributes = {
            "ERROR_CODE": _string(error_code),
            "ERROR_MESSAGE": _string(truncate(error_message or error_code)),
        }
        if request_id:
            attributes["REQUEST_ID"] = _string(request_id)
        body = event if isinstance(event, str) else json.dumps(event, default=str)
        try:
            response = self._sqs_client().send_message(
                QueueUrl=self._queue_url,
                MessageBody=body,
                MessageAttributes=attributes,
            )
        except Exception as exc:
            raise DeadLetterError(f"could not send event to dead-letter queue: {exc}") from exc
        return response["MessageId"]


def truncate(text: str, limit: int = MAX_ERROR_MESSAGE_CHARS) -> str:
    """Cut ``text`` to ``limit`` characters, marking the cut with an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _string(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value}
