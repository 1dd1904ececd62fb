"""What a billed model request cost, in US dollars, at the step's price (``MODEL_RATES``).

The construct resolves the step's model in the model catalogue (:mod:`.model_catalogue`),
lays the ``model_price`` prop over it, and sets ``MODEL_RATES`` to that row's prices as JSON
(``constructs_lib.model_prices.ModelPrice.for_step``)::

    {"input": 0.1, "output": 0.5, "cache_write_5m": 0.125, "cache_write_1h": 0.2,
     "cache_read": 0.01, "batch_discount": 0.5, "long_context_threshold_tokens": 100000,
     "long_context_input": 0.5, ..., "source": "https://...", "as_of": "2026-12-01"}

A request whose prompt (uncached input + cache writes + cache reads) is over
``long_context_threshold_tokens`` is billed at the ``long_context_*`` rates, all of them,
output included; a Message Batch request pays ``1 - batch_discount`` of that. Without
``MODEL_RATES`` (a model the catalogue does not know, or a price set to null) the cost is
None: the tokens are still reported, and no number is guessed.

The cost is computed when the request is billed and stored with its result, so a later price
change (an override, a new catalogue row) never reprices an answer already paid for.
Standard library only, so the constructs and the local run load it by its path.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The environment variable holding the step's price, JSON (see the module docstring).
MODEL_RATES_ENV = "MODEL_RATES"
#: The five rates of a tier, as ``usage`` names the tokens they price.
RATE_NAMES = ("input", "output", "cache_write_5m", "cache_write_1h", "cache_read")
LONG_CONTEXT_PREFIX = "long_context_"
#: Dollar figures are rounded to a billionth of a dollar: a cached token can cost 1e-8 $.
USD_DECIMALS = 9
#: Billionths of a dollar in one: a key's costs are added as integers, exactly.
NANOS_PER_USD = 10**USD_DECIMALS


@dataclass(frozen=True)
class StepPrice:
    """The price of the step's model: a tier up to the threshold, and one above it."""

    #: US dollars per million tokens, by :data:`RATE_NAMES`.
    rates: Mapping[str, float]
    #: The rates over ``long_context_threshold_tokens`` of prompt; None: one tier.
    long_context_rates: Mapping[str, float] | None
    long_context_threshold_tokens: int | None
    #: Fraction a Message Batch request does not pay.
    batch_discount: float
    #: Where the prices came from, and when they were read.
    source: str | None = None
    as_of: str | None = None

    @classmethod
    def from_json(cls, raw: str) -> StepPrice:
        """Parse ``MODEL_RATES``; ``ValueError`` naming what is wrong."""
        try:
            document = json.loads(raw)
            rates = {name: _rate(document, name) for name in RATE_NAMES}
            threshold = document.get("long_context_threshold_tokens")
            long_context = None
            if threshold is not None:
                threshold = int(threshold)
                long_context = {
                    name: _rate(document, LONG_CONTEXT_PREFIX + name) for name in RATE_NAMES
                }
            return cls(
                rates=rates,
                long_context_rates=long_context,
                long_context_threshold_tokens=threshold,
                batch_discount=_rate(document, "batch_discount"),
                source=document.get("source"),
                as_of=document.get("as_of"),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise ValueError(
                f"{MODEL_RATES_ENV} must be JSON with {list(RATE_NAMES)}, batch_discount and "
                f"long_context_threshold_tokens (dollars per million tokens), got "
                f"{raw[:200]!r} ({error})"
            ) from error

    def rates_for(self, prompt_tokens: int) -> Mapping[str, float]:
        """The tier a request with ``prompt_tokens`` of prompt is billed at."""
        threshold = self.long_context_threshold_tokens
        if self.long_context_rates is not None and threshold is not None:
            if prompt_tokens > threshold:
                return self.long_context_rates
        return self.rates

    def cost_usd(self, usage: Mapping[str, Any], *, prompt_cache: str, batch: bool) -> float:
        """Dollars of one billed request's ``usage`` (the API's four token counts), its cache
        writes at the ``prompt_cache`` TTL (``"5m"``, ``"1h"``; ``"off"`` writes nothing)."""
        count = {name: int(usage.get(name) or 0) for name in USAGE_NAMES}
        prompt = (
            count["input_tokens"]
            + count["cache_creation_input_tokens"]
            + count["cache_read_input_tokens"]
        )
        rates = self.rates_for(prompt)
        write = rates["cache_write_1h"] if prompt_cache == "1h" else rates["cache_write_5m"]
        dollars = (
            count["input_tokens"] * rates["input"]
            + count["output_tokens"] * rates["output"]
            + count["cache_creation_input_tokens"] * write
            + count["cache_read_input_tokens"] * rates["cache_read"]
        ) / 1_000_000
        if batch:
            dollars *= 1 - self.batch_discount
        return round(dollars, USD_DECIMALS)


#: The token counts of a Message's ``usage`` that are billed.
USAGE_NAMES = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


def from_environment(environ: Mapping[str, str]) -> StepPrice | None:
    """``MODEL_RATES`` of ``environ``, or None when it is unset (cost unknown)."""
    raw = environ.get(MODEL_RATES_ENV, "").strip()
    return StepPrice.from_json(raw) if raw else None


def _rate(document: Mapping[str, Any], name: str) -> float:
    value = document[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    return float(value)
