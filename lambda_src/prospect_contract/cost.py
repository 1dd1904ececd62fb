"""Dollars from an upload's token counters (stdlib only; the ledger and the viewer use it).

The price of the classify step's model reaches each function as ``MODEL_PRICE``, JSON of US
dollars per million tokens (``constructs_lib.model_prices.ModelPrice.for_runtime``)::

    {"input": 1.0, "output": 5.0, "cache_write": 1.25, "cache_read": 0.1,
     "batch_discount": 0.5}

``cache_write`` is the price at the step's ``prompt_cache`` TTL. Without ``MODEL_PRICE`` (a
model the price table does not know) every dollar figure is ``None``: the tokens are still
reported, and no number is guessed.

The four figures of :func:`upload_cost`:

- ``cost_usd``: what the billed requests cost. Each request's cost is computed by the model
  step when it is billed (its own long-context tier and batch discount, at the price the
  step had then: ``MODEL_RATES``) and summed by the ledger (``cost_nanousd``), so a later
  price change never reprices an upload. Only when some billed request carried no cost (one
  billed before costs were stored) is it computed here from the counters: uncached input,
  output, cache writes and cache reads, each at ``MODEL_PRICE``, less the batch discount on
  the batch requests' share;
- ``saved_by_replays_usd``: what the replayed duplicates would have cost had each been sent
  again, billed as its original was: the replayed results' stored costs
  (``replayed_cost_nanousd``), else their usage at ``MODEL_PRICE``;
- ``saved_by_cache_usd``: the cached tokens at the input price, less what their writes and
  reads cost (negative when an upload only wrote the cache: a write costs more than input);
- ``saved_by_batch_usd``: the batch discount (``batch_discount``, 50 %) on the tokens of
  requests billed as Message Batch requests (``batch_input_tokens``, ...: a part of the
  billed counters); 0 for an upload sent in realtime.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The environment variable holding the model's price, JSON.
MODEL_PRICE_ENV = "MODEL_PRICE"
#: Decimal places of the dollar figures (a millionth of a dollar: one Haiku input token).
USD_DECIMALS = 6

#: Billed token counters, as the API names them.
BILLED_TOKENS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)
#: The part of each billed counter that was billed as Message Batch requests (issue 19).
BATCH_TOKENS = tuple(f"batch_{name}" for name in BILLED_TOKENS)
#: The same four, of the stored results replayed to duplicates (no request made).
REPLAYED_TOKENS = tuple(f"replayed_{name}" for name in BILLED_TOKENS)
#: The dollar figures, in the order the summary lists them.
COST_FIELDS = ("cost_usd", "saved_by_replays_usd", "saved_by_cache_usd", "saved_by_batch_usd")
#: Billionths of a dollar a counter of stored costs is kept in (a cached Haiku token costs
#: ten of them).
NANOS_PER_USD = 1_000_000_000


def nanousd(cost_usd: Any) -> int:
    """A stored ``cost_usd`` in billionths of a dollar (a counter adds integers exactly)."""
    return round(float(cost_usd) * NANOS_PER_USD)


def batch_token_total(counters: Mapping[str, Any]) -> int:
    """The tokens billed as Message Batch requests: the four :data:`BATCH_TOKENS` counters
    of an upload summed (a missing or null one counts 0)."""
    return sum(int(counters.get(name) or 0) for name in BATCH_TOKENS)


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens."""

    input: float
    output: float
    cache_write: float
    cache_read: float
    batch_discount: float

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Price | None:
        """``MODEL_PRICE``, or None when it is unset (cost unknown). Raises ``ValueError``
        for JSON that is not a price."""
        raw = (os.environ if environ is None else environ).get(MODEL_PRICE_ENV, "").strip()
        if not raw:
            return None
        try:
            document = json.loads(raw)
            return cls(**{name: float(document[name]) for name in cls.__dataclass_fields__})
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(
                f"{MODEL_PRICE_ENV} must be JSON with {list(cls.__dataclass_fields__)} "
                f"(dollars per million tokens), got {raw[:200]!r}"
            ) from error

    def of(self, tokens: Mapping[str, Any], prefix: str = "") -> float:
        """Dollars of four token counts (``input_tokens``... with ``prefix``)."""

        def count(name: str) -> float:
            return float(tokens.get(prefix + name) or 0)

        return (
            count("input_tokens") * self.input
            + count("output_tokens") * self.output
            + count("cache_creation_input_tokens") * self.cache_write
            + count("cache_read_input_tokens") * self.cache_read
        ) / 1_000_000


def upload_cost(counters: Mapping[str, Any], price: Price | None) -> dict[str, float | None]:
    """The four dollar figures of an upload's counters (see the module docstring)."""
    figures = _from_prices(counters, price)
    requests = int(counters.get("model_requests") or 0)
    if requests and int(counters.get("priced_requests") or 0) >= requests:
        figures["cost_usd"] = _usd(counters.get("cost_nanousd"))
    if int(counters.get("priced_replays") or 0):
        figures["saved_by_replays_usd"] = _usd(counters.get("replayed_cost_nanousd"))
    return figures


def _usd(nanos: Any) -> float:
    return round(int(nanos or 0) / NANOS_PER_USD, USD_DECIMALS)


def _from_prices(counters: Mapping[str, Any], price: Price | None) -> dict[str, float | None]:
    """The four figures at ``price`` from the token counters alone."""
    if price is None:
        return dict.fromkeys(COST_FIELDS)
    written = float(counters.get("cache_creation_input_tokens") or 0)
    read = float(counters.get("cache_read_input_tokens") or 0)
    cache = (written + read) * price.input - written * price.cache_write - read * price.cache_read
    batch = price.of(counters, "batch_") * price.batch_discount
    figures = {
        "cost_usd": price.of(counters) - batch,
        "saved_by_replays_usd": price.of(counters, "replayed_"),
        "saved_by_cache_usd": cache / 1_000_000,
        "saved_by_batch_usd": batch,
    }
    return {name: round(value, USD_DECIMALS) for name, value in figures.items()}
