"""The typed shapes a model step stores, returns and reports (stdlib only).

- A **result** is what one record stores and every duplicate replays: a
  :class:`CompletedResult` (the answer) or a :class:`DeadLetteredResult` (a failure that a
  retry cannot fix, or a used-up budget).
- An **outcome** is what ``on_outcome`` receives for one delivery: the delivery's status
  (a terminal result, or a wait) and what that delivery cost.

``upload_accounting`` (the Prospect Uploader's ledger) reads outcomes with these types; it
imports this module for type checking only, so it needs no ``model_step`` at run time.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

#: A terminal result's status.
ResultStatus = Literal["completed", "dead_lettered"]
#: A delivery's status: a terminal result, or a wait (``retry``: a transient failure or a
#: concurrent duplicate; ``rate_limited``: a 429/529 the row waits out).
DeliveryStatus = Literal["completed", "dead_lettered", "retry", "rate_limited"]
#: Where the model ran: the Claude API or Amazon Bedrock (``MODEL_PROVIDER``).
Provider = Literal["anthropic", "bedrock"]


class Usage(TypedDict):
    """Tokens of the billed request (zeros when none was made), as the API reports them:
    ``input_tokens`` excludes the cached prefix, which is counted either as written
    (``cache_creation_input_tokens``) or as read (``cache_read_input_tokens``)."""

    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int


class CompletedResult(TypedDict):
    """A stored answer."""

    status: Literal["completed"]
    key: list[Any]
    answer: str
    answer_truncated: bool
    request_id: str | None
    model: str
    prompt_version: str
    #: ``MODEL_PROVIDER``; absent on results stored before it was recorded.
    provider: NotRequired[Provider]
    stop_reason: str
    usage: Usage
    completed_at: str
    #: With ``ALLOWED_LABELS``: the normalised label.
    label: NotRequired[str]
    #: With a ``parse_answer``: what it returned.
    parsed: NotRequired[Any]
    replay_generation: NotRequired[int]
    #: ``"batch"`` when the answer came from a Message Batch (absent: realtime).
    delivery: NotRequired[str]
    #: The Message Batch that answered (batch delivery only).
    batch_id: NotRequired[str]
    #: What the request cost in US dollars, at ``MODEL_RATES`` when it was billed (its tier,
    #: the batch discount); None: the model has no price. Absent on older results.
    cost_usd: NotRequired[float | None]
    #: The key's billed requests over all its deliveries when this was stored (absent on
    #: results stored before issue 31).
    key_model_requests: NotRequired[int]
    #: The tokens of all the key's billed answers, this one's included (absent: as above).
    key_usage: NotRequired[Usage]
    #: What all the key's billed answers cost in US dollars at the prices they were billed
    #: at (None: the model has no price; absent: as above).
    key_cost_usd: NotRequired[float | None]


class DeadLetteredResult(TypedDict):
    """A stored failure: the event went (or goes) to the dead-letter queue once."""

    status: Literal["dead_lettered"]
    error_code: str
    error_message: str
    request_id: str | None
    key: list[Any] | None
    model: str
    prompt_version: str
    #: ``MODEL_PROVIDER``; absent on results stored before it was recorded.
    provider: NotRequired[Provider]
    #: Stable per record: every DLQ message for it carries this id.
    dead_letter_id: NotRequired[str]
    dead_letter_message_id: NotRequired[str | None]
    replay_generation: NotRequired[int]
    #: ``"batch"`` when the failure came from a Message Batch result (absent: realtime).
    delivery: NotRequired[str]
    #: The Message Batch whose result it is (batch delivery only).
    batch_id: NotRequired[str]
    #: The key's billed requests over all its deliveries (a dead letter after a billed
    #: answer, or after failed attempts, cost them too); absent before issue 31.
    key_model_requests: NotRequired[int]
    #: The tokens of all the key's billed answers; absent before issue 31.
    key_usage: NotRequired[Usage]
    #: What they cost in US dollars at the prices they were billed at (None: the model has
    #: no price); absent before issues 31 and 32.
    key_cost_usd: NotRequired[float | None]


StepResult = CompletedResult | DeadLetteredResult


class Outcome(TypedDict):
    """What ``on_outcome(event, outcome)`` receives once per delivery."""

    status: DeliveryStatus
    #: The result came from a stored record: this delivery made no model request for it.
    replayed: bool
    #: Billed model requests this delivery made (0 or 1); see ``key_model_requests``.
    model_requests: int
    #: 429/529 answers this delivery got (0 or 1).
    rate_limited: int
    usage: Usage
    result: StepResult | None
    error_code: str | None
    #: What this delivery's billed request cost in US dollars (0.0: none was made; None: the
    #: model has no price). A replay costs 0.0; its result carries what the original cost.
    cost_usd: NotRequired[float | None]
    #: The record id of the key this delivery served: the same for every delivery of one
    #: key, another for an operator's retry of it (None for an event with no key).
    key_record_id: str | None
    #: The key's billed requests over ALL its deliveries, killed ones included, from its
    #: stored result: count a key once with these. None until the key has a terminal result
    #: (and for a result stored before issue 31); also set on a retry whose hand-off of that
    #: result failed.
    key_model_requests: int | None
    #: The tokens of all the key's billed answers (None as for ``key_model_requests``).
    key_usage: Usage | None
    #: What the key's billed answers cost in US dollars (None as for ``key_model_requests``,
    #: and when the model has no price).
    key_cost_usd: NotRequired[float | None]


def as_provider(name: str) -> Provider:
    """``name`` as a :data:`Provider`; ``ValueError`` for any other value."""
    if name == "anthropic":
        return "anthropic"
    if name == "bedrock":
        return "bedrock"
    raise ValueError(f"unknown model provider {name!r}")


def zero_usage() -> Usage:
    """No tokens."""
    return Usage(
        input_tokens=0, output_tokens=0, cache_creation_input_tokens=0, cache_read_input_tokens=0
    )


def usage_of(sdk_usage: Any) -> Usage:
    """The :class:`Usage` of an SDK message's ``usage`` (absent cache counts are 0: an API
    or a fake that does not report caching cached nothing)."""

    def count(name: str) -> int:
        return int(getattr(sdk_usage, name, None) or 0)

    return Usage(
        input_tokens=count("input_tokens"),
        output_tokens=count("output_tokens"),
        cache_creation_input_tokens=count("cache_creation_input_tokens"),
        cache_read_input_tokens=count("cache_read_input_tokens"),
    )
