"""The model catalogue: what each model accepts, answers and costs, with the page it came from.

One row (:class:`ModelSpec`) per Claude API model id. The requests (``thinking``, ``effort``,
``max_tokens``), the prices (the runtime's ``cost_usd``, the Prospect Uploader's price table),
synth-time validation, the Bedrock grants and the local model all read this table, so a fact
is written once. Standard library only: the CDK constructs load this file by its path without
importing the ``model_step`` package (``constructs_lib/_runtime_modules.py``).

Every figure is copied from the row's ``source`` page as it read on ``as_of``; none is derived
from another (a cache read is not "0.1x input" for every model). An override of a row's
prices (``constructs_lib.model_prices.price_table``: the ``model_price`` and ``model_prices``
props, ``-c model_prices``) may set any price field; a new model must state every one of
them, and a field it leaves out is refused, never guessed.

When a model ships, add its row from its overview page (prices incl. long-context tiers,
minimum cacheable length, thinking and effort, rejected parameters, maximum output) and its
Bedrock model card (ids, inference-profile prefixes); ``docs/construct.md``, "The model
catalogue", says how.

Example::

    spec = lookup("us.anthropic.claude-haiku-5-5")      # a Bedrock profile id works too
    spec.long_context_rates.input                        # 0.5 (prompts over 100,000 tokens)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

#: ``thinking.type`` values. ``enabled`` is the older manual mode (``budget_tokens``), which
#: the step never sends; it is listed where a model accepts it.
ADAPTIVE: Final = "adaptive"
DISABLED: Final = "disabled"
ENABLED: Final = "enabled"
#: The thinking modes a step can ask for (``IdempotentModelStep(thinking=...)``).
STEP_THINKING_MODES: Final = (ADAPTIVE, DISABLED)
#: Every effort level the Messages API names (``output_config.effort``), lowest first.
EFFORT_LEVELS: Final = ("low", "medium", "high", "xhigh", "max")
#: Sampling parameters some models reject at any value other than the default.
SAMPLING_PARAMETERS: Final = ("temperature", "top_p", "top_k")
#: Bedrock inference-profile prefixes AWS defines (destination regions:
#: ``constructs_lib.bedrock_models.PROFILE_DESTINATIONS``).
PROFILE_PREFIXES: Final = ("us", "eu", "apac", "jp", "au", "us-gov", "global")
#: The floor we put on ``max_tokens`` under adaptive thinking: the smallest thinking budget
#: the API has ever accepted (``budget_tokens`` >= 1,024). The API documents no minimum for
#: adaptive thinking; a smaller ``max_tokens`` leaves no room for a thought and an answer.
ADAPTIVE_THINKING_MIN_MAX_TOKENS: Final = 1024


@dataclass(frozen=True)
class Rates:
    """US dollars per million tokens, at one prompt-length tier."""

    #: Uncached input tokens.
    input: float
    #: Output tokens (thinking included).
    output: float
    #: Tokens written to the prompt cache with a 5-minute TTL.
    cache_write_5m: float
    #: Tokens written to the prompt cache with a 1-hour TTL.
    cache_write_1h: float
    #: Tokens read from the prompt cache.
    cache_read: float


@dataclass(frozen=True)
class ModelSpec:
    """One model as its provider documents it."""

    #: The Claude API id, e.g. ``claude-haiku-5-5``.
    model_id: str
    #: The page every figure below was read from, and the date it was read.
    source: str
    as_of: str
    #: List prices for prompts up to ``long_context_threshold_tokens`` (or any length).
    rates: Rates
    #: Prices once a request's prompt (input + cache writes + cache reads) is over
    #: ``long_context_threshold_tokens``; None: one tier.
    long_context_rates: Rates | None
    long_context_threshold_tokens: int | None
    #: Fraction of the price a Message Batch request does not pay (0.5: half price).
    batch_discount: float
    #: The shortest prefix, in tokens, the API caches for this model.
    min_cacheable_tokens: int
    #: The largest ``max_tokens`` the model accepts.
    max_output_tokens: int
    #: ``thinking.type`` values it accepts, and what it does when the request names none
    #: (``adaptive``: thinks; ``disabled``: does not; None: has no thinking).
    thinking_modes: tuple[str, ...]
    default_thinking: str | None
    #: ``output_config.effort`` levels it accepts (none: it has no effort parameter), its
    #: default, and the levels it still accepts with thinking off.
    effort_levels: tuple[str, ...] = ()
    default_effort: str | None = None
    effort_levels_without_thinking: tuple[str, ...] = ()
    #: Sampling parameters a non-default value of which is a 400.
    rejected_sampling_parameters: tuple[str, ...] = ()
    #: A final assistant turn (prefill) is a 400.
    rejects_prefill: bool = False
    #: The smallest ``max_tokens`` the step accepts with adaptive thinking on.
    thinking_min_max_tokens: int | None = None
    #: Amazon Bedrock: the foundation-model id, the profile prefixes AWS publishes for it,
    #: and the model card they were read from.
    bedrock_model_id: str | None = None
    bedrock_profile_prefixes: tuple[str, ...] = ()
    bedrock_source: str | None = None

    def thinks_by_default(self, thinking: str | None) -> bool:
        """Whether a request with ``thinking`` (None: the model's default) thinks."""
        return (thinking or self.default_thinking) == ADAPTIVE

    def bedrock_ids(self) -> tuple[str, ...]:
        """The Bedrock ids AWS publishes: the foundation model and each profile."""
        if self.bedrock_model_id is None:
            return ()
        model = self.bedrock_model_id
        return (model, *(f"{prefix}.{model}" for prefix in self.bedrock_profile_prefixes))


_CLAUDE_DOCS = "https://platform.claude.com/docs/en"
_BEDROCK_CARDS = "https://docs.aws.amazon.com/bedrock/latest/userguide/model-card-anthropic-"

#: The catalogue, by Claude API id.
CATALOGUE: Final[Mapping[str, ModelSpec]] = {
    spec.model_id: spec
    for spec in (
        ModelSpec(
            model_id="claude-haiku-5-5",
            source=f"{_CLAUDE_DOCS}/models/haiku-5-5/overview",
            as_of="2026-12-01",
            rates=Rates(0.10, 0.50, 0.125, 0.20, 0.01),
            # "Above 100,000 tokens every rate is 5x": each stated, none computed here.
            long_context_rates=Rates(0.50, 2.50, 0.625, 1.00, 0.05),
            long_context_threshold_tokens=100_000,
            batch_discount=0.5,
            min_cacheable_tokens=512,
            max_output_tokens=128_000,
            thinking_modes=(ADAPTIVE, DISABLED),
            default_thinking=ADAPTIVE,
            effort_levels=EFFORT_LEVELS,
            default_effort="medium",
            # The Bedrock model card: "effort capped at high when thinking is disabled".
            effort_levels_without_thinking=("low", "medium", "high"),
            rejected_sampling_parameters=SAMPLING_PARAMETERS,
            rejects_prefill=True,
            thinking_min_max_tokens=ADAPTIVE_THINKING_MIN_MAX_TOKENS,
            bedrock_model_id="anthropic.claude-haiku-5-5",
            bedrock_profile_prefixes=("us", "eu", "apac", "jp", "au", "global"),
            bedrock_source=f"{_BEDROCK_CARDS}claude-haiku-5-5.html",
        ),
        ModelSpec(
            model_id="claude-haiku-4-5",
            source=f"{_CLAUDE_DOCS}/about-claude/pricing",
            as_of="2026-12-01",
            rates=Rates(1.00, 5.00, 1.25, 2.00, 0.10),
            long_context_rates=None,
            long_context_threshold_tokens=None,
            batch_discount=0.5,
            min_cacheable_tokens=4096,
            max_output_tokens=64_000,
            thinking_modes=(ENABLED, DISABLED),
            default_thinking=DISABLED,
            bedrock_model_id="anthropic.claude-haiku-4-5-20251001-v1:0",
            bedrock_profile_prefixes=("us", "eu", "jp", "au", "global"),
            bedrock_source=f"{_BEDROCK_CARDS}claude-haiku-4-5.html",
        ),
        ModelSpec(
            model_id="claude-opus-4-5",
            source=f"{_CLAUDE_DOCS}/about-claude/pricing",
            as_of="2026-12-01",
            rates=Rates(5.00, 25.00, 6.25, 10.00, 0.50),
            long_context_rates=None,
            long_context_threshold_tokens=None,
            batch_discount=0.5,
            min_cacheable_tokens=4096,
            max_output_tokens=64_000,
            thinking_modes=(ENABLED, DISABLED),
            default_thinking=DISABLED,
            effort_levels=("low", "medium", "high"),
            default_effort="high",
            effort_levels_without_thinking=("low", "medium", "high"),
            bedrock_model_id="anthropic.claude-opus-4-5-20251101-v1:0",
            bedrock_profile_prefixes=("us", "eu", "global"),
            bedrock_source=f"{_BEDROCK_CARDS}claude-opus-4-5.html",
        ),
    )
}


def split_profile(model_id: str) -> tuple[str | None, str]:
    """``("us", "anthropic.claude-haiku-5-5")`` for a profile id; ``(None, model_id)``
    for any other id. The longest prefix wins (``us-gov.`` before ``us.``)."""
    for prefix in sorted(PROFILE_PREFIXES, key=len, reverse=True):
        if model_id.startswith(prefix + "."):
            return prefix, model_id[len(prefix) + 1 :]
    return None, model_id


def lookup(model_id: str, catalogue: Mapping[str, ModelSpec] = CATALOGUE) -> ModelSpec | None:
    """The row of a Claude API id, a Bedrock foundation-model id or a Bedrock profile id
    (any prefix of :data:`PROFILE_PREFIXES`); None for an id the catalogue does not know."""
    if model_id in catalogue:
        return catalogue[model_id]
    _, foundation = split_profile(model_id)
    for spec in catalogue.values():
        if spec.bedrock_model_id is not None and spec.bedrock_model_id == foundation:
            return spec
    return None


def is_published(
    model_id: str, provider: str, catalogue: Mapping[str, ModelSpec] = CATALOGUE
) -> bool:
    """Whether ``model_id`` is an id the provider publishes for a catalogued model: the Claude
    API id (``anthropic``), or the foundation model or one of its listed profiles
    (``bedrock``)."""
    spec = lookup(model_id, catalogue)
    if spec is None:
        return False
    if provider == "bedrock":
        return model_id in spec.bedrock_ids()
    return model_id == spec.model_id


def thinking_problem(spec: ModelSpec, thinking: str | None) -> str | None:
    """Why ``spec`` refuses ``thinking`` (a ``thinking.type``), or None."""
    if thinking is None or thinking in spec.thinking_modes:
        return None
    accepted = list(spec.thinking_modes) or ["none"]
    return f"{spec.model_id} accepts thinking types {accepted}, not {thinking!r}"


def effort_problem(spec: ModelSpec, effort: str | None, thinking: str | None) -> str | None:
    """Why ``spec`` refuses ``effort`` with ``thinking`` (None: the default), or None."""
    if effort is None:
        return None
    if not spec.effort_levels:
        return f"{spec.model_id} has no effort parameter"
    if effort not in spec.effort_levels:
        return f"{spec.model_id} accepts effort {list(spec.effort_levels)}, not {effort!r}"
    thinks = spec.thinks_by_default(thinking)
    if not thinks and effort not in spec.effort_levels_without_thinking:
        allowed = list(spec.effort_levels_without_thinking)
        return f"{spec.model_id} accepts effort {allowed} with thinking off, not {effort!r}"
    return None
