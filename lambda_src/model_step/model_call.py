"""The model call: build the request, send it under a total deadline, turn the answer into a
result to store (or a non-retryable error), and count what it cost."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from . import clock, deadline
from .client import ModelClientProvider, request_options
from .config import Settings
from .errors import (
    COMPLETE_STOP_REASONS,
    IncompleteAnswerError,
    InvalidAnswerError,
    LabelNotAllowedError,
    MaxTokensReachedError,
    ModelRefusedError,
    NonRetryableError,
    ResultTooLargeError,
    RetryableAnswerError,
    bedrock_error_type,
    classify_model_error,
    is_rate_limited,
    should_retry_header,
    withhold_provider_text,
)
from .key import REPLAY_GENERATION_FIELD, RecordKey
from .model_request import fingerprint_fields, model_fields
from .outcome import CompletedResult, Usage, as_provider, usage_of, zero_usage
from .persistence import stored_form

BuildUserMessage = Callable[[dict[str, Any]], str]
ParseAnswer = Callable[[str], Any]

#: Seconds kept between the model call's deadline and Lambda's, so the failure is a clean
#: exception (record released, retry scheduled) rather than a kill after a billed request.
TIMEOUT_SAFETY_MARGIN_SECONDS = 3.0
#: Never give a request less than this; a shorter deadline could not succeed anyway.
MIN_MODEL_TIMEOUT_SECONDS = 1.0
#: At most this many bytes of answer text are stored (as Powertools stores it: JSON with
#: ASCII escapes). See docs/runtime.md ("Stored results") for why 64 KB.
MAX_STORED_ANSWER_BYTES = 64 * 1024
#: The whole stored result must fit in this, far below DynamoDB's 400 KB item limit; a
#: larger one is dead-lettered as ``ResultTooLarge``.
MAX_STORED_RESULT_BYTES = 300 * 1024
#: Error code of a request stopped by its total deadline.
DEADLINE_EXCEEDED = "ModelDeadlineExceeded"
#: Answers that are not billed and are not a rate limit: a 401, and a 429 that is no rate
#: limit (Bedrock's ModelNotReadyException: the model did not serve it).
UNBILLED_STATUSES = frozenset({401, 429})


def default_user_message(detail: Mapping[str, Any]) -> str:
    """The default user message: the event detail as JSON with sorted keys (stable, so the
    same event always produces the same request)."""
    return json.dumps(detail, sort_keys=True, ensure_ascii=False, default=str)


def model_timeout(limit_seconds: float, context: Any) -> float:
    """The request's total deadline: ``min(limit_seconds, remaining Lambda time - 3 s)``, at
    least 1 s."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is None:
        return limit_seconds
    budget = float(remaining()) / 1000 - TIMEOUT_SAFETY_MARGIN_SECONDS
    return max(MIN_MODEL_TIMEOUT_SECONDS, min(limit_seconds, budget))


def request_fingerprint(settings: Settings, handler_prompt_version: str | None = None) -> str:
    """sha256 over everything that shapes the request: system prompt, model id, max_tokens,
    sorted allowed labels, PROMPT_VERSION, a custom handler's declared prompt version, and
    THINKING and EFFORT when set (:mod:`.model_request`)."""
    document = {
        "system_prompt": settings.system_prompt,
        "model_id": settings.model_id,
        "max_tokens": settings.max_tokens,
        "allowed_labels": sorted(settings.allowed_labels),
        "prompt_version": settings.prompt_version,
        "handler_prompt_version": handler_prompt_version,
        **fingerprint_fields(settings),
    }
    encoded = json.dumps(document, sort_keys=True, ensure_ascii=False).encode()
    return hashlib.sha256(encoded).hexdigest()


def system_blocks(settings: Settings) -> list[dict[str, Any]]:
    """The request's ``system``: one text block, marked with ``cache_control`` and the
    ``PROMPT_CACHE`` TTL unless it is ``off``. The per-row part is the user message, after
    this cached prefix. Below the model's minimum cacheable length the API caches nothing
    and the request works as without the mark."""
    block: dict[str, Any] = {"type": "text", "text": settings.system_prompt}
    if settings.prompt_cache != "off":
        block["cache_control"] = {"type": "ephemeral", "ttl": settings.prompt_cache}
    return [block]


def cap_answer(text: str, limit: int = MAX_STORED_ANSWER_BYTES) -> tuple[str, bool]:
    """``(text, False)`` if its stored form (JSON, ASCII escapes) fits ``limit`` bytes, else
    the longest prefix that fits and True."""
    if len(json.dumps(text)) <= limit:
        return text, False
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if len(json.dumps(text[:middle])) <= limit:
            low = middle
        else:
            high = middle - 1
    return text[:low], True


@dataclass
class Spend:
    """What one delivery's model call cost."""

    requests: int = 0  # billed requests (a 401, 429 or 529 answer is not billed)
    rate_limited: int = 0  # 429 / 529 answers
    usage: Usage = field(default_factory=zero_usage)
    #: Sent as one request under batch delivery (a submission below the provider's
    #: minimum, issue 37): priced without the batch discount.
    realtime: bool = False


@dataclass(frozen=True)
class Prepared:
    """Everything that can fail before a request is sent, done before the attempt is
    claimed: a failure here spends no attempt."""

    client: Any
    user_message: str


class ModelCall:
    """One model request per attempt, and what its answer means."""

    def __init__(
        self,
        settings: Settings,
        clients: ModelClientProvider,
        build_user_message: BuildUserMessage,
        parse_answer: ParseAnswer | None,
    ) -> None:
        self._settings = settings
        self._clients = clients
        self._build_user_message = build_user_message
        self._parse_answer = parse_answer

    def prepare(self, detail: dict[str, Any]) -> Prepared:
        """Build the user message and get the SDK client (reading the API key)."""
        return Prepared(self._clients.get(), self._build_user_message(detail))

    def send(self, prepared: Prepared, context: Any, spend: Spend) -> Any:
        """Send the request under its total deadline and return the SDK message. A 401 with a
        rotated key re-reads the secret once and retries once (a 401 is not billed). Raises
        the ``NonRetryableError`` an SDK error stands for, or the transient error itself."""
        client = prepared.client
        try:
            return self._send_once(client, prepared.user_message, context, spend)
        except Exception as exc:
            if not _is_auth_failure(exc) or not self._clients.can_refresh:
                _raise_classified(exc)
            client, changed = self._clients.refresh(client)
            if not changed:
                _raise_classified(exc)
        try:
            return self._send_once(client, prepared.user_message, context, spend)
        except Exception as retry_exc:
            _raise_classified(retry_exc)

    def _send_once(self, client: Any, user_message: str, context: Any, spend: Spend) -> Any:
        settings = self._settings
        seconds = model_timeout(settings.model_timeout_seconds, context)
        try:
            with deadline.total(seconds):
                # No temperature/top_p/top_k: the default model rejects non-default values.
                message = client.messages.create(
                    model=settings.model_id,
                    max_tokens=settings.max_tokens,
                    system=system_blocks(settings),
                    messages=[{"role": "user", "content": user_message}],
                    timeout=seconds,
                    **model_fields(settings),
                    **request_options(settings),
                )
        except Exception as exc:
            if is_rate_limited(exc):
                spend.rate_limited = 1
            elif deadline.stopped_unsent():
                pass  # the deadline passed before the request left: nothing was billed
            elif getattr(exc, "status_code", None) not in UNBILLED_STATUSES:
                spend.requests = 1
            raise
        spend.requests = 1
        spend.usage = usage_of(message.usage)
        return message

    def result(self, message: Any, key: RecordKey) -> CompletedResult:
        """The result to store for a billed answer; raises a ``NonRetryableError`` for an
        answer that is not one (incomplete, a label not allowed, unparseable, unstorable)."""
        settings = self._settings
        request_id = getattr(message, "_request_id", None)
        stop_reason = getattr(message, "stop_reason", None)
        if stop_reason not in COMPLETE_STOP_REASONS:
            raise _incomplete(stop_reason, message.usage.output_tokens, request_id)
        full_text = "".join(
            getattr(block, "text", "") for block in message.content if block.type == "text"
        ).strip()
        text, truncated = cap_answer(full_text)
        result = CompletedResult(
            status="completed",
            key=key["business_key"],
            answer=text,
            answer_truncated=truncated,
            request_id=request_id,
            model=str(message.model),
            prompt_version=settings.prompt_version,
            provider=as_provider(settings.model_provider),
            stop_reason=str(stop_reason),
            usage=usage_of(message.usage),
            completed_at=clock.utc_iso(),
        )
        # Priced now and stored: a replay, and a later price change, keep what it cost.
        result["cost_usd"] = request_cost_usd(settings, result["usage"])
        if REPLAY_GENERATION_FIELD in key:
            result["replay_generation"] = key["replay_generation"]
        if settings.allowed_labels:
            label = full_text.lower()
            if label not in settings.allowed_labels:
                allowed = list(settings.allowed_labels)
                # The answer's length, never its text: a row can ask the model to repeat its
                # own values, and this message reaches logs, the DLQ and FailuresTable.
                raise LabelNotAllowedError(
                    f"answer of {len(full_text)} characters is not one of {allowed}",
                    request_id=request_id,
                )
            result["label"] = label
        if self._parse_answer is not None:
            result["parsed"] = self._parse(full_text, request_id)
        check_storable(result, request_id)
        return result

    def _parse(self, text: str, request_id: str | None) -> Any:
        assert self._parse_answer is not None
        try:
            return self._parse_answer(text)
        except (RetryableAnswerError, NonRetryableError) as exc:
            # The parser's own class (and code) is kept; its message is replaced, because a
            # parser's message tends to quote the answer, and it reaches logs, the DLQ and
            # FailuresTable. Codes and lengths only (docs/runtime.md, "What is logged").
            if isinstance(exc, NonRetryableError):
                exc.request_id = exc.request_id or request_id
            exc.args = (_rejected(exc, text),)
            raise
        except Exception as exc:
            # A parser bug or an unparseable answer is the same answer on every retry: stored
            # as a dead letter, never three billed calls. ``from None``: the parser's own
            # exception (whose text may quote the answer) must not ride along in a traceback.
            raise InvalidAnswerError(_rejected(exc, text), request_id=request_id) from None


def request_cost_usd(
    settings: Settings, usage: Usage, *, batch: bool | None = None
) -> float | None:
    """What one billed request with ``usage`` cost at ``MODEL_RATES`` (None: unknown); under
    batch delivery an answer is a batch result, billed at the batch discount, unless
    ``batch`` is False (a row sent alone below the provider's minimum per batch)."""
    if settings.model_rates is None:
        return None
    if batch is None:
        batch = settings.model_delivery == "batch"
    return settings.model_rates.cost_usd(usage, prompt_cache=settings.prompt_cache, batch=batch)


def _rejected(exc: BaseException, answer: str) -> str:
    return f"parse_answer raised {type(exc).__name__} on an answer of {len(answer)} characters"


def check_storable(result: CompletedResult, request_id: str | None) -> None:
    """Serialise ``result`` exactly as the store will, so a value it cannot hold (a ``date``,
    a ``set``, dict keys of mixed types) or one too large is a stored dead letter after ONE
    request, never a failed save that every delivery pays again."""
    try:
        size = len(stored_form(result))
    except (TypeError, ValueError) as exc:
        # The exception's type only: its text could quote a parsed value.
        raise InvalidAnswerError(
            f"the parsed answer cannot be stored as JSON: {type(exc).__name__}",
            request_id=request_id,
        ) from None
    if size > MAX_STORED_RESULT_BYTES:
        raise ResultTooLargeError(
            f"result to store is {size} bytes, over {MAX_STORED_RESULT_BYTES}",
            request_id=request_id,
        )


def error_code(exc: BaseException) -> str:
    """The code a failure is reported and stored under."""
    code = getattr(exc, "error_code", None)
    if isinstance(code, str):
        return code
    bedrock = bedrock_error_type(exc)
    if bedrock is not None:
        return bedrock
    if type(exc).__name__ == "APITimeoutError" and deadline.fired():
        return DEADLINE_EXCEEDED
    return type(exc).__name__


def _is_auth_failure(exc: BaseException) -> bool:
    return getattr(exc, "status_code", None) == 401 and should_retry_header(exc) is not True


def _raise_classified(exc: BaseException) -> NoReturn:
    """Raise the non-retryable error an SDK exception stands for, or the exception itself,
    its provider message withheld either way (it can quote the request)."""
    rejected = classify_model_error(exc)
    withhold_provider_text(exc)
    if rejected is not None:
        raise rejected from exc
    raise exc


def _incomplete(stop_reason: Any, output_tokens: int, request_id: str | None) -> NonRetryableError:
    message = f"stop_reason {stop_reason!r} is not a complete answer ({output_tokens} tokens)"
    if stop_reason == "max_tokens":
        return MaxTokensReachedError(message, request_id=request_id)
    if stop_reason == "refusal":
        return ModelRefusedError(message, request_id=request_id)
    return IncompleteAnswerError(message, request_id=request_id)
