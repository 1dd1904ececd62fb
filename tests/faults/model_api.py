"""What the lab's model API does with one request, for the Claude API and for Bedrock.

A schedule names a behaviour; each provider answers it the way its documentation says:

=============  ===========================  ==============================================
behaviour      Claude API (FakeMessagesAPI)  Bedrock InvokeModel (FakeBedrockRuntime)
=============  ===========================  ==============================================
ok             200                          200
500            500 ``api_error``            ``InternalServerException`` (500)
503            503 ``api_error``            ``ServiceUnavailableException`` (503)
408            408 ``timeout_error``        ``ModelTimeoutException`` (408)
429            429, ``retry-after: 20``     ``ThrottlingException`` (429, no retry-after)
529            529, ``retry-after: 20``     ``ModelNotReadyException`` (429)
400            400                          ``ValidationException`` (400)
quota          400                          ``ServiceQuotaExceededException`` (400)
disconnect     the connection drops before any answer
slow           a 200 in three pieces 0.2 s apart (on the lab's clock, :mod:`.hooks`), past
               the lab's 0.3 s total deadline
lukewarm       a complete 200 whose text is not an allowed label
=============  ===========================  ==============================================

A request is **billed** unless its answer is a 401, 429 or 529, or on Bedrock one of the
errors that say the request was not served (``ThrottlingException``,
``ModelNotReadyException``, ``ServiceUnavailableException``,
``ServiceQuotaExceededException``): the provider did not serve it.
Every 200 bills :data:`INPUT_TOKENS` and :data:`OUTPUT_TOKENS` (the fakes' usage).
``rate_limit`` (for persistent faults) is a 429 whose ``retry-after`` is 900 s, so a key
rate-limited for hours costs a poll per quarter hour, not one per 20 s.
"""

from __future__ import annotations

from typing import Any

from tests.fakes import Reply

PROVIDERS = ("anthropic", "bedrock")
BEHAVIOURS = (
    "ok",
    "500",
    "503",
    "408",
    "429",
    "529",
    "400",
    "quota",
    "disconnect",
    "slow",
    "lukewarm",
    "rate_limit",
)
#: Statuses the provider does not bill: it did not serve the request.
UNBILLED_STATUSES = frozenset({401, 429, 529})
#: A slow answer's pieces, and the seconds between two (on the lab's clock when the model
#: deadline runs on it, else the fake's real pause).
SLOW_PIECES = 3
SLOW_PIECE_SECONDS = 0.2
#: Usage of every 200 answer of both fakes.
INPUT_TOKENS = 12
OUTPUT_TOKENS = 3
#: Bedrock's error for each behaviour that is an error.
_BEDROCK_ERRORS = {
    "500": "InternalServerException",
    "503": "ServiceUnavailableException",
    "408": "ModelTimeoutException",
    "429": "ThrottlingException",
    "rate_limit": "ThrottlingException",
    "529": "ModelNotReadyException",
    "400": "ValidationException",
    "quota": "ServiceQuotaExceededException",
}
#: Bedrock errors that say the request was not served, so not billed.
_BEDROCK_UNSERVED = frozenset(
    {
        "ThrottlingException",
        "ModelNotReadyException",
        "ServiceUnavailableException",
        "ServiceQuotaExceededException",
    }
)
_BEDROCK_STATUSES = {
    "InternalServerException": 500,
    "ServiceUnavailableException": 503,
    "ModelTimeoutException": 408,
    "ThrottlingException": 429,
    "ModelNotReadyException": 429,
    "ValidationException": 400,
    "ServiceQuotaExceededException": 400,
}


def status_of(provider: str, behaviour: str) -> int | None:
    """The HTTP status the answer carries (None: no answer at all)."""
    if behaviour == "disconnect":
        return None
    if behaviour in ("ok", "slow", "lukewarm"):
        return 200
    if provider == "bedrock":
        return _BEDROCK_STATUSES[_BEDROCK_ERRORS[behaviour]]
    if behaviour == "rate_limit":
        return 429
    return 400 if behaviour == "quota" else int(behaviour)


def billed(provider: str, behaviour: str) -> bool:
    """Whether the provider bills a request answered this way."""
    if provider == "bedrock" and behaviour in _BEDROCK_ERRORS:
        return _BEDROCK_ERRORS[behaviour] not in _BEDROCK_UNSERVED
    return status_of(provider, behaviour) not in UNBILLED_STATUSES


def spends_attempt(provider: str, behaviour: str) -> bool:
    """Whether the runtime keeps the attempt this answer used: every answer but a rate
    limit (429 / 529 on the Claude API, ``ThrottlingException`` on Bedrock), which it gives
    back; on Bedrock also ``ServiceUnavailableException`` and
    ``ServiceQuotaExceededException``, which AWS says to resubmit later (issue 32).
    Bedrock's ``ModelNotReadyException`` is a 429 that spends one."""
    if provider == "bedrock":
        return behaviour not in ("429", "rate_limit", "503", "quota")
    return behaviour not in ("429", "529", "rate_limit")


def answered_with_tokens(behaviour: str) -> bool:
    """Whether the answer is a complete 200 that reports usage (a slow one never arrives
    whole within the deadline)."""
    return behaviour in ("ok", "lukewarm")


def reply(provider: str, behaviour: str) -> Any:
    """The fake's script entry for ``behaviour``."""
    if behaviour == "disconnect":
        return "disconnect"
    if behaviour == "ok":
        return 200
    if behaviour == "slow":
        # Three pieces 0.2 s apart against a 0.3 s total deadline: no single read is slow.
        # (When the deadline runs on the lab's clock the fake sends it whole and the hooks
        # pace the pieces: see ``lab.answer_request``.)
        return Reply(chunks=SLOW_PIECES, chunk_delay=SLOW_PIECE_SECONDS)
    if behaviour == "lukewarm":  # a complete answer that is not an allowed label
        return Reply(text="lukewarm")
    if provider == "bedrock":
        return _BEDROCK_ERRORS[behaviour]
    if behaviour in ("429", "529"):
        return Reply(status=int(behaviour), headers={"retry-after": "20"})
    if behaviour == "rate_limit":
        return Reply(status=429, headers={"retry-after": "900"})
    return Reply(status=status_of(provider, behaviour) or 500)
