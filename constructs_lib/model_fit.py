"""Does a step's request fit its model? ``thinking``, ``effort`` and ``max_tokens`` checked at
synth against the model catalogue (``lambda_src/model_step/model_catalogue.py``).

Pure functions (no CDK import), so every rule is read in one place:

- ``thinking`` (:class:`Thinking`) must be a mode the model accepts (``Thinking.ADAPTIVE``
  on a model without adaptive thinking is refused);
- ``effort`` (:class:`Effort`, or its value) must be one of the model's levels, and one it
  accepts with thinking off when thinking is off (Claude Haiku 5.5: at most ``high``);
- ``max_tokens`` must be at most the model's maximum output, and, when the model thinks
  (``Thinking.ADAPTIVE``, or no ``thinking`` on a model that thinks by default), at least
  its ``thinking_min_max_tokens``: thinking tokens count toward ``max_tokens``, and a smaller
  one turns every row the model thinks about into a ``MaxTokensReached`` dead letter. The
  error names both props;
- a model id the catalogue does not know, or a Bedrock id AWS does not publish for the model,
  is not refused (a model newer than this release must stay usable): :func:`fit` returns a
  warning naming ``model_id``, which the construct adds as a synth annotation.

Example::

    fit(owner, model_id="claude-haiku-5-5", provider="anthropic", max_tokens=16,
        thinking=None, effort=None)   # PropValidationError: ... max_tokens ... thinking ...
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from ._runtime_modules import model_catalogue
from ._validation import PropValidationError

#: Annotation ids of the warnings (``Annotations.add_warning_v2``).
UNKNOWN_MODEL_WARNING = "idempotent-model-step:model-not-in-catalogue"
UNPUBLISHED_ID_WARNING = "idempotent-model-step:model-id-not-published"


class Thinking(enum.Enum):
    """What each request asks of the model's thinking (``thinking.type``)."""

    #: ``{"type": "adaptive"}``: the model decides whether and how much to think; its
    #: thinking tokens count toward ``max_tokens`` and are billed as output.
    ADAPTIVE = "adaptive"
    #: ``{"type": "disabled"}``: no thinking; the answer alone uses ``max_tokens``.
    DISABLED = "disabled"


class Effort(enum.Enum):
    """``output_config.effort``: how much the model puts into an answer (its thinking
    included). Which levels a model accepts is the catalogue's."""

    #: ``"low"``: the least; the only level some uses need (a one-word label).
    LOW = "low"
    #: ``"medium"``: Claude Haiku 5.5's default.
    MEDIUM = "medium"
    #: ``"high"``: the most Claude Haiku 5.5 accepts with thinking off.
    HIGH = "high"
    #: ``"xhigh"``: with thinking on only, on the models that have it.
    XHIGH = "xhigh"
    #: ``"max"``: the most; with thinking on only, on the models that have it.
    MAX = "max"


@dataclass(frozen=True)
class ModelFit:
    """The outcome of :func:`fit`: the model's catalogue row, and the warnings to annotate."""

    #: The catalogue row (a ``ModelSpec``), or None for a model it does not know.
    spec: Any
    #: The ``thinking.type`` and effort the step sends (None: not sent).
    thinking: str | None
    effort: str | None
    #: ``(annotation id, message)`` of each warning.
    warnings: list[tuple[str, str]] = field(default_factory=list)


def fit(
    owner: str,
    *,
    model_id: str,
    provider: str,
    max_tokens: int,
    thinking: Thinking | None,
    effort: Effort | str | None,
) -> ModelFit:
    """Check the request against the model (see the module docstring); raises
    :class:`PropValidationError` naming the props, the values and what the model allows."""
    thinking_value = _thinking(owner, thinking)
    effort_value = _effort(owner, effort)
    spec = model_catalogue.lookup(model_id)
    if spec is None:
        return ModelFit(None, thinking_value, effort_value, [_unknown(model_id)])
    warnings = []
    if not model_catalogue.is_published(model_id, provider):
        warnings.append(_unpublished(spec, model_id, provider))
    problem = model_catalogue.thinking_problem(spec, thinking_value)
    if problem is not None:
        raise PropValidationError(f"{owner}: thinking={thinking}: {problem}")
    problem = model_catalogue.effort_problem(spec, effort_value, thinking_value)
    if problem is not None:
        raise PropValidationError(
            f"{owner}: effort={effort_value!r} with thinking={thinking}: {problem} (thinking "
            f"unset means the model's default, {spec.default_thinking})"
        )
    _check_max_tokens(owner, spec, max_tokens, thinking_value)
    return ModelFit(spec, thinking_value, effort_value, warnings)


def _check_max_tokens(owner: str, spec: Any, max_tokens: int, thinking: str | None) -> None:
    if max_tokens > spec.max_output_tokens:
        raise PropValidationError(
            f"{owner}: max_tokens must be at most {spec.max_output_tokens:,} for "
            f"{spec.model_id} (its maximum output, {spec.source}), got {max_tokens:,}"
        )
    floor = spec.thinking_min_max_tokens
    if spec.thinks_by_default(thinking) and floor is not None and max_tokens < floor:
        mode = "Thinking.ADAPTIVE" if thinking else f"unset, so {spec.model_id}'s default, adaptive"
        raise PropValidationError(
            f"{owner}: max_tokens={max_tokens} is too small for thinking ({mode}): "
            f"{spec.model_id} counts its thinking tokens toward max_tokens, so a row it thinks "
            f"about would stop at max_tokens (MaxTokensReached). Set max_tokens to at least "
            f"{floor:,}, or thinking=Thinking.DISABLED for short answers"
        )


def _thinking(owner: str, thinking: Any) -> str | None:
    if thinking is None:
        return None
    if not isinstance(thinking, Thinking):
        raise PropValidationError(
            f"{owner}: thinking must be Thinking.ADAPTIVE, Thinking.DISABLED or None (the "
            f"model's default), got {thinking!r}"
        )
    return str(thinking.value)


def _effort(owner: str, effort: Any) -> str | None:
    if effort is None:
        return None
    value = effort.value if isinstance(effort, Effort) else effort
    if value not in model_catalogue.EFFORT_LEVELS:
        raise PropValidationError(
            f"{owner}: effort must be one of {list(model_catalogue.EFFORT_LEVELS)} (or an "
            f"Effort), or None (the model's default), got {effort!r}"
        )
    return str(value)


def _unknown(model_id: str) -> tuple[str, str]:
    known = sorted(model_catalogue.CATALOGUE)
    return (
        UNKNOWN_MODEL_WARNING,
        f"model_id {model_id!r} is not in the model catalogue ({known} and their Bedrock ids): "
        "thinking, effort and max_tokens are not checked against it, and its cost is unknown "
        "unless model_prices gives its price. Check the id on the provider's model page; see "
        "docs/construct.md, 'The model catalogue'.",
    )


def _unpublished(spec: Any, model_id: str, provider: str) -> tuple[str, str]:
    published = list(spec.bedrock_ids()) if provider == "bedrock" else [spec.model_id]
    return (
        UNPUBLISHED_ID_WARNING,
        f"model_id {model_id!r} names {spec.model_id}, but is not an id the catalogue lists for "
        f"it on {provider} ({published}, as of {spec.as_of}): requests may be refused with "
        "ValidationException/ResourceNotFoundException, which are dead-lettered.",
    )
