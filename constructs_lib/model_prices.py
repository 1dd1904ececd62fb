"""What a model's tokens cost: the price table the per-upload summary turns tokens into
dollars with.

One row per model id, in US dollars per million tokens. Prices change, and a deployment must
not wait for a release: :func:`price_table` lays overrides (the ``model_prices`` prop of
``ProspectUploaderStack``, or ``-c model_prices='{...}'``) over :data:`PRICE_TABLE`. A model
missing from the table has **no** price: its upload summaries report tokens and
``cost_usd: null``, never a guessed number.

Example::

    price_table({"claude-haiku-5-5": {"input": 1.2, "output": 6}})["claude-haiku-5-5"].input

The rows below are Anthropic list prices as the repository recorded them (Claude Haiku 4.5:
$1 / $5 per million input / output tokens, minimum 4,096 tokens; Claude Opus 4.5: $5 / $25,
minimum 4,096), with the multipliers Anthropic documents: a 5-minute cache write 1.25x the input
price, a 1-hour write 2x, a cache read 0.1x, and 50 % off for batch requests. The minimum
cacheable length is per model (512 to 4,096 tokens; published figures disagree, so the
table takes the larger). ``claude-haiku-5-5`` (the default model) has no figure the
repository could check: it is priced as Claude Haiku 4.5 with that model's 4,096-token
minimum. Check it against the current price list and override it (or set it to ``null``
to report its cost as unknown) if it differs.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from types import ModuleType
from typing import Any, NoReturn

from ._paths import lambda_src_root

#: Anthropic's documented multipliers of the input price.
CACHE_WRITE_5M_MULTIPLIER = 1.25
CACHE_WRITE_1H_MULTIPLIER = 2.0
CACHE_READ_MULTIPLIER = 0.1
#: Fraction of the price a batch request does not pay.
BATCH_DISCOUNT = 0.5


@dataclass(frozen=True)
class ModelPrice:
    """US dollars per million tokens of one model, and its minimum cacheable length."""

    #: Uncached input tokens.
    input: float
    #: Output tokens.
    output: float
    #: Tokens written to the cache with a 5-minute TTL.
    cache_write_5m: float
    #: Tokens written to the cache with a 1-hour TTL.
    cache_write_1h: float
    #: Tokens read from the cache.
    cache_read: float
    #: Fraction a batch request does not pay (0.5: half price).
    batch_discount: float
    #: The shortest prefix, in tokens, the API caches for this model.
    min_cacheable_tokens: int

    @classmethod
    def from_list_price(cls, input: float, output: float, min_cacheable_tokens: int) -> ModelPrice:
        """A row from the input and output prices and Anthropic's multipliers."""
        return cls(
            input=input,
            output=output,
            cache_write_5m=round(input * CACHE_WRITE_5M_MULTIPLIER, 10),
            cache_write_1h=round(input * CACHE_WRITE_1H_MULTIPLIER, 10),
            cache_read=round(input * CACHE_READ_MULTIPLIER, 10),
            batch_discount=BATCH_DISCOUNT,
            min_cacheable_tokens=min_cacheable_tokens,
        )

    def for_runtime(self, prompt_cache: str) -> str:
        """The ``MODEL_PRICE`` JSON the ledger's functions read: per-million prices, the
        cache write at the step's TTL (``"5m"``, ``"1h"``; ``"off"`` writes nothing)."""
        write = self.cache_write_1h if prompt_cache == "1h" else self.cache_write_5m
        return json.dumps(
            {
                "input": self.input,
                "output": self.output,
                "cache_write": write,
                "cache_read": self.cache_read,
                "batch_discount": self.batch_discount,
            },
            sort_keys=True,
            separators=(",", ":"),
        )


#: The documented default table (see the module docstring for the sources).
PRICE_TABLE: Mapping[str, ModelPrice] = {
    "claude-haiku-5-5": ModelPrice.from_list_price(1.0, 5.0, 4096),
    "claude-haiku-4-5": ModelPrice.from_list_price(1.0, 5.0, 4096),
    "claude-opus-4-5": ModelPrice.from_list_price(5.0, 25.0, 4096),
}

_FIELDS = tuple(f.name for f in fields(ModelPrice))


def price_table(
    overrides: Mapping[str, Mapping[str, Any] | ModelPrice | None] | None = None,
    *,
    source: str = "model_prices",
    base: Mapping[str, ModelPrice] = PRICE_TABLE,
) -> dict[str, ModelPrice]:
    """``base`` (default :data:`PRICE_TABLE`) with ``overrides`` laid over it, model by model.

    An override of a known model may give only the fields that changed, or None (JSON
    ``null``) to remove the row, so the model reports no cost; a new model must give
    ``input``, ``output`` and ``min_cacheable_tokens`` (the cache and batch figures
    default to Anthropic's multipliers). Raises :class:`PropValidationError` naming
    ``source``, the model and the field for a bad entry.
    """
    table = dict(base)
    for model_id, entry in (overrides or {}).items():
        if entry is None:
            # A price known to be wrong is better unknown: the model reports no cost.
            table.pop(model_id, None)
            continue
        if isinstance(entry, ModelPrice):
            table[model_id] = entry
            continue
        if not isinstance(entry, Mapping):
            _refuse(f"{source}: {model_id!r} must map to an object of prices, got {entry!r}")
        unknown = sorted(set(entry) - set(_FIELDS))
        if unknown:
            _refuse(
                f"{source}: {model_id!r} has unknown fields {unknown}; allowed: {list(_FIELDS)}"
            )
        for name, value in entry.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                _refuse(f"{source}: {model_id!r}.{name} must be a number >= 0, got {value!r}")
        current = table.get(model_id)
        if current is None:
            missing = [n for n in ("input", "output", "min_cacheable_tokens") if n not in entry]
            if missing:
                _refuse(
                    f"{source}: {model_id!r} is not in the price table, so it must give {missing}"
                )
        given = _typed(entry)
        merged = {**(asdict(current) if current is not None else {}), **given}
        # A new input price moves the cache prices with it, unless they are given too.
        derived = ModelPrice.from_list_price(
            merged["input"], merged["output"], merged["min_cacheable_tokens"]
        )
        table[model_id] = (
            replace(derived, **given) if "input" in given else replace(current or derived, **given)
        )
    return table


def _typed(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {
        name: int(value) if name == "min_cacheable_tokens" else float(value)
        for name, value in entry.items()
    }


def price_table_json(table: Mapping[str, ModelPrice]) -> str:
    """The table as JSON (what ``-c model_prices`` takes), for docs and reports."""
    return json.dumps({k: asdict(v) for k, v in sorted(table.items())}, indent=2)


def upload_cost(counters: Mapping[str, int], model_price: str | None) -> dict[str, float | None]:
    """The per-upload dollar figures of ``counters`` (token counts named as the API names
    them, ``replayed_*`` for replays) at ``model_price`` (a ``MODEL_PRICE`` JSON, from
    :meth:`ModelPrice.for_runtime` or a function's environment; None: cost unknown), exactly
    as the deployed ledger computes them: this calls ``lambda_src/prospect_contract/cost.py``,
    loaded by its path (it is standard library only), so a local run and a benchmark report
    the same numbers as an upload summary."""
    cost = _runtime_cost()
    price = cost.Price.from_environment({cost.MODEL_PRICE_ENV: model_price or ""})
    figures: dict[str, float | None] = cost.upload_cost(counters, price)
    return figures


def billed_tokens() -> tuple[str, ...]:
    """The billed token counters of a Message's ``usage``, as the ledger names them
    (``prospect_contract.cost.BILLED_TOKENS``)."""
    return tuple(_runtime_cost().BILLED_TOKENS)


def _runtime_cost() -> ModuleType:
    name = "constructs_lib._prospect_contract_cost"
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    path = lambda_src_root() / "prospect_contract" / "cost.py"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - a broken installation
        raise ImportError(f"cannot load the runtime's cost module from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _refuse(message: str) -> NoReturn:
    # Imported here: _validation imports aws_cdk (jsii starts node), and a local run or a
    # benchmark prices tokens without a CDK app.
    from ._validation import PropValidationError

    raise PropValidationError(message)
