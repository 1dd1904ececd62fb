"""How a catalogued model treats a Messages request: what it refuses, and how it answers.

The local model (:mod:`.local_model`, :mod:`.local_bedrock`) and the test fakes
(``constructs_lib.testing``: ``FakeMessagesAPI``, ``FakeBedrockRuntime``) all answer through
this module, from the model catalogue (``lambda_src/model_step/model_catalogue.py``), so none
of them is kinder than the model (``docs/testing.md``, "Stand-ins as strict as the model"):

- :func:`request_problem`: why the model refuses a request with a 400: a non-default
  sampling parameter the model rejects, a final assistant turn (prefill) it rejects, a
  ``thinking`` type it does not accept (``budget_tokens`` with ``adaptive`` included), an
  effort level it does not have (or not with thinking off), ``max_tokens`` over its maximum;
- :func:`answer`: the content of a 200. A model that thinks (adaptive thinking asked for, or
  its default) sends a ``thinking`` block before the text; the thinking tokens count toward
  ``max_tokens`` and ``output_tokens``, and a ``max_tokens`` they use up ends the answer with
  ``stop_reason: "max_tokens"`` (no text, or a cut one). How much it thinks is seeded by the
  request's text and scaled by its effort (:data:`EFFORT_SCALE`), so a run is reproducible.

Example::

    spec = model_spec("claude-haiku-5-5")
    request_problem({"max_tokens": 16, "temperature": 0.2, ...}, spec)   # "temperature: ..."
    answer(spec, body, "warm", text_tokens=1).stop_reason                 # "max_tokens"
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from constructs_lib._runtime_modules import model_catalogue

#: The values of the sampling parameters that are their defaults: sending one changes nothing,
#: so a model that rejects "non-default" values accepts it.
SAMPLING_DEFAULTS: Mapping[str, float] = {"temperature": 1.0, "top_p": 1.0}
#: Thinking tokens of one answer at effort ``medium``: seeded in this range.
MEDIUM_THINKING_TOKENS = (40, 400)
#: How much more (or less) a model thinks at each effort level than at ``medium``.
EFFORT_SCALE: Mapping[str, float] = {
    "low": 0.25,
    "medium": 1.0,
    "high": 2.0,
    "xhigh": 3.0,
    "max": 4.0,
}
#: Characters per token of the local model's estimate (the local model's own convention).
CHARS_PER_TOKEN = 4


def model_spec(model: str, catalogue: Mapping[str, Any] | None = None) -> Any:
    """The catalogue row of ``model`` (a Claude API, Bedrock foundation-model or profile id),
    or None for a model the catalogue does not know."""
    if catalogue is None:
        return model_catalogue.lookup(model)
    return model_catalogue.lookup(model, catalogue)


def thinking_type(body: Mapping[str, Any]) -> str | None:
    """``thinking.type`` of a request, or None when it names none."""
    thinking = body.get("thinking")
    return str(thinking.get("type")) if isinstance(thinking, Mapping) else None


def effort_of(body: Mapping[str, Any]) -> str | None:
    """``output_config.effort`` of a request, or None."""
    config = body.get("output_config")
    effort = config.get("effort") if isinstance(config, Mapping) else None
    return None if effort is None else str(effort)


def request_problem(body: Mapping[str, Any], spec: Any) -> str | None:
    """Why the model of ``spec`` answers ``body`` with a 400 (its message), or None."""
    model = spec.model_id
    for name in spec.rejected_sampling_parameters:
        value = body.get(name)
        if value is not None and value != SAMPLING_DEFAULTS.get(name):
            return f"{name}: a non-default value is not supported on {model}; remove it"
    messages = body.get("messages") or []
    last = messages[-1] if isinstance(messages, list) and messages else None
    if spec.rejects_prefill and isinstance(last, Mapping) and last.get("role") == "assistant":
        return (
            f"messages: {model} does not support assistant message prefill; the last "
            "message must be a user turn"
        )
    thinking = body.get("thinking")
    if thinking is not None and not isinstance(thinking, Mapping):
        return "thinking: must be an object with a type"
    kind = thinking_type(body)
    problem = model_catalogue.thinking_problem(spec, kind)
    if problem is not None:
        return f"thinking.type: {problem}"
    if kind == model_catalogue.ADAPTIVE and "budget_tokens" in (thinking or {}):
        return "thinking.adaptive.budget_tokens: Extra inputs are not permitted"
    problem = model_catalogue.effort_problem(spec, effort_of(body), kind)
    if problem is not None:
        return f"output_config.effort: {problem}"
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        return f"max_tokens: must be an integer >= 1, got {max_tokens!r}"
    if max_tokens > spec.max_output_tokens:
        return (
            f"max_tokens: {max_tokens} > {spec.max_output_tokens}, which is the maximum "
            f"allowed number of output tokens for {model}"
        )
    return None


def thinking_tokens(spec: Any, body: Mapping[str, Any]) -> int:
    """How many tokens the model thinks before answering ``body`` (0 when it does not think):
    seeded by the request's messages, scaled by its effort."""
    if not spec.thinks_by_default(thinking_type(body)):
        return 0
    low, high = MEDIUM_THINKING_TOKENS
    messages = json.dumps(body.get("messages"), sort_keys=True, default=str)
    digest = hashlib.sha256(f"{spec.model_id}\0{messages}".encode()).digest()
    base = low + int.from_bytes(digest[:4], "big") % (high - low)
    effort = effort_of(body) or spec.default_effort or "medium"
    return max(1, round(base * EFFORT_SCALE.get(effort, 1.0)))


@dataclass(frozen=True)
class Answer:
    """The content, stop reason and output tokens of a 200."""

    content: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str = "end_turn"
    output_tokens: int = 0


def answer(
    spec: Any,
    body: Mapping[str, Any],
    text: str,
    *,
    text_tokens: int,
    thought_tokens: int | None = None,
    stop_reason: str = "end_turn",
) -> Answer:
    """The answer of ``spec``'s model to ``body`` whose text is ``text`` (``text_tokens``
    long), after ``thought_tokens`` of thinking (None: :func:`thinking_tokens`),
    cut at ``max_tokens``. A ``refusal`` carries no thinking and no text."""
    if stop_reason == "refusal":
        return Answer([], "refusal", 0)
    thought = thinking_tokens(spec, body) if thought_tokens is None else thought_tokens
    budget = int(body.get("max_tokens") or 0)
    content: list[dict[str, Any]] = []
    used = min(thought, budget)
    if used:
        content.append(_thinking_block(used, text))
    room = budget - used
    if thought > budget or text_tokens > room:
        kept = text[: room * CHARS_PER_TOKEN] if room > 0 else ""
        if kept:
            content.append({"type": "text", "text": kept})
        return Answer(content, "max_tokens", budget)
    if text:
        content.append({"type": "text", "text": text})
    return Answer(content, stop_reason, used + text_tokens)


def _thinking_block(tokens: int, text: str) -> dict[str, Any]:
    """A thinking block of ``tokens`` tokens: a placeholder, never the request's values."""
    signature = hashlib.sha256(f"{tokens}\0{text}".encode()).hexdigest()[:32]
    return {
        "type": "thinking",
        "thinking": f"(local model: {tokens} thinking tokens)",
        "signature": f"sig_local_{signature}",
    }
