"""A failure's reason as a sentence a person can read, with its code and request id.

The recorder stores what the sender said: the model step's own words ("model API refused
the request: BadRequestError, status 400, type invalid_request_error, request id req_..."),
a Lambda on-failure record's ``errorMessage``, which can be an SDK exception's text, a dict
dump (``Error code: 400 - {'type': 'error', 'error': {...}}``), or EventBridge's words. The
page shows :func:`human_reason` of each; the stored reason is kept as is (the export has it).

Pure functions over the item: no AWS calls, nothing logged.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from typing import Any

from prospect_contract.dead_letters import RECEIVES_EXHAUSTED

#: What went wrong, by error code, as the sentence's start.
_LEADS = {
    "BadRequestError": "The model refused the request",
    "ValidationException": "The model refused the request",
    "ModelRejectedInput": "The model refused the request",
    "AuthenticationError": "The model API refused the API key",
    "PermissionDeniedError": "The model API refused the API key's permissions",
    "AccessDeniedException": "The model API refused the role's permissions",
    "NotFoundError": "The model API does not know the model",
    "ResourceNotFoundException": "The model API does not know the model",
    "ContentTooLargeError": "The request was too large for the model API",
    "UnprocessableEntityError": "The model API could not process the request",
    "RateLimitError": "The model API rate-limited the row until it gave up",
    "RateLimitExhausted": "The model API was still rate-limiting the row when its time ran out",
    "OverloadedError": "The model API was overloaded",
    "InternalServerError": "The model API failed with a server error",
    "InternalServerException": "The model API failed with a server error",
    "APITimeoutError": "The model did not answer in time",
    "ModelDeadlineExceeded": "The model did not answer before the step's deadline",
    "ModelTimeoutError": "The model did not answer in time",
    "ModelTimeoutException": "The model did not answer in time",
    "APIConnectionError": "The connection to the model API failed",
    "AttemptInterrupted": "The function was stopped after it sent the request",
    RECEIVES_EXHAUSTED: "The queue gave up on the row: the function crashed or timed out",
    "LabelNotAllowed": "The model answered with a label that is not allowed",
    "MaxTokensReached": "The model's answer was cut off at max_tokens",
    "ModelRefused": "The model declined to answer",
    "IncompleteAnswer": "The model's answer was incomplete",
    "InvalidAnswer": "The model's answer could not be read",
    "EventAgeExceeded": "The row waited longer than its maximum event age",
    "RetriesExhausted": "Lambda's retries of the row ran out",
    "SDK_CLIENT_ERROR": "EventBridge could not hand the row to the function",
    "IdempotencyAlreadyInProgressError": "Another delivery of the row was still in progress",
}
#: The model step's own words for a refusal and for a transient failure's last attempt.
_REFUSED = re.compile(
    r"refused the request: (?P<name>\w+), status (?P<status>\d{3})"
    r"(?:, type (?P<type>[\w.-]+))?(?:, request id (?P<request>\S+))?"
)
_ATTEMPT = re.compile(r"\battempt (?P<attempt>\d+) of (?P<of>\d+)\b")
#: An SDK exception's text: ``Error code: 400 - {...}`` (a Python dict's repr).
_SDK_DUMP = re.compile(r"Error code: (?P<status>\d{3}) - (?P<body>\{.*\})", re.DOTALL)
_REQUEST_ID = re.compile(r"\b(req_[A-Za-z0-9_]+)\b")
MAX_MESSAGE_CHARS = 300


#: What can still be read from a dump cut short (a reason is stored at most 1,024 characters).
_CUT_DUMP = re.compile(r"Error code: (?P<status>\d{3}) - \{")
_CUT_TYPE = re.compile(r"'error': \{'type': '(?P<type>[\w.-]+)'")
_CUT_MESSAGE = re.compile(r"'message': '(?P<message>[^']*)")


def _sdk_body(text: str) -> tuple[int, dict[str, Any]] | None:
    """``(status, body)`` of an SDK dict dump in ``text``, else None. A dump cut short keeps
    what its start says: the status, the error's type and as much of its message as is left."""
    found = _SDK_DUMP.search(text)
    if found:
        try:
            body = ast.literal_eval(found.group("body"))
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            body = None
        if isinstance(body, dict):
            return int(found.group("status")), body
    cut = _CUT_DUMP.search(text)
    if not cut:
        return None
    kind, message = _CUT_TYPE.search(text), _CUT_MESSAGE.search(text)
    error = {
        "type": kind.group("type") if kind else "",
        "message": message.group("message") if message else "",
    }
    return int(cut.group("status")), {"error": error}


def _sentence(text: str) -> str:
    text = " ".join(text.split()).strip().rstrip(".")
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 1].rstrip() + "…"
    return text[:1].upper() + text[1:]


def human_reason(item: Mapping[str, Any]) -> str:
    """The failure in one or two sentences, ending with its code and request id.

    >>> human_reason({"error_code": "InvalidEmail", "reason": "email is blank"})
    'Email is blank. Code InvalidEmail.'
    """
    code = str(item.get("error_code") or "Unknown")
    reason = str(item.get("reason") or "")
    request_id = str(item.get("request_id") or "")
    lead = _LEADS.get(code)
    detail = ""
    status = ""
    dump = _sdk_body(reason)
    refused = _REFUSED.search(reason)
    if dump is not None:
        status = str(dump[0])
        error = dump[1].get("error") if isinstance(dump[1].get("error"), dict) else dump[1]
        kind = str(error.get("type") or "")
        message = str(error.get("message") or "")
        request_id = request_id or str(dump[1].get("request_id") or "")
        lead = lead or "The model API answered with an error"
        detail = f" ({kind})" if kind else ""
        detail += f": {_sentence(message)}" if message else ""
    elif refused is not None:
        status = refused.group("status")
        request_id = request_id or str(refused.group("request") or "")
        lead = lead or "The model API refused the request"
        detail = f" ({refused.group('type')})" if refused.group("type") else ""
    else:
        attempt = _ATTEMPT.search(reason)
        if lead is None:
            lead = _sentence(reason) if reason and reason != code else "The row failed"
        elif attempt is not None:
            detail = f" on attempt {attempt.group('attempt')} of {attempt.group('of')}"
        elif reason and reason != code and not reason.startswith(code):
            detail = f": {_sentence(reason)}"
    if not request_id:
        found = _REQUEST_ID.search(reason)
        request_id = found.group(1) if found else ""
    tail = f" Code {code}" + (f", HTTP {status}" if status else "") + "."
    if request_id:
        tail += f" Request {request_id}."
    return f"{lead}{detail}.{tail}"
