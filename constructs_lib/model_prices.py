"""What a model's tokens cost: the price view of the model catalogue, and its overrides.

One row per model id, in US dollars per million tokens, read from the model catalogue
(``lambda_src/model_step/model_catalogue.py``, one table with a source page and an as-of date
per row): the list prices up to the long-context threshold, the long-context tier above it,
each cache rate as the provider states it, the batch discount and the minimum cacheable
length. Prices change, and a deployment must not wait for a release: :func:`price_table`
lays overrides (the ``model_price`` prop of ``IdempotentModelStep``, the ``model_prices``
prop of ``ProspectUploaderStack``, ``-c model_prices='{...}'``) over :data:`PRICE_TABLE`.

- An override of a catalogued model may give only the fields that changed; every other field
  keeps the catalogue's figure. Nothing moves with anything else: a new input price does not
  move the cache prices (a cache rate is a model's fact, not a multiple of its input price).
- A new model must state every price field (``input``, ``output``, ``cache_write_5m``,
  ``cache_write_1h``, ``cache_read``, ``batch_discount``, ``min_cacheable_tokens`` and
  ``long_context_threshold_tokens``, null for one tier, with the five ``long_context_*``
  rates when it is not null); a field it leaves out is refused at synth, never guessed.
- ``null`` for a model removes its row: its cost is reported as unknown (``cost_usd: null``).

Example::

    price_table({"claude-haiku-5-5": {"output": 0.6}})["claude-haiku-5-5"].cache_read  # 0.01
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from types import ModuleType
from typing import Any, NoReturn

from ._runtime_modules import load_runtime_file, model_catalogue

#: The five rates of a tier, and the names of the long-context ones.
RATE_FIELDS = ("input", "output", "cache_write_5m", "cache_write_1h", "cache_read")
LONG_CONTEXT_FIELDS = tuple(f"long_context_{name}" for name in RATE_FIELDS)


@dataclass(frozen=True)
class ModelPrice:
    """US dollars per million tokens of one model, and its minimum cacheable length."""

    #: Uncached input tokens.
    input: float
    #: Output tokens (thinking included).
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
    #: Prompts (input + cache writes + cache reads) over this many tokens are billed at the
    #: ``long_context_*`` rates. Default None: one tier.
    long_context_threshold_tokens: int | None = None
    #: The rates of the long-context tier (each None without one).
    long_context_input: float | None = None
    long_context_output: float | None = None
    long_context_cache_write_5m: float | None = None
    long_context_cache_write_1h: float | None = None
    long_context_cache_read: float | None = None
    #: The page the prices came from (an override's source when overridden), and the date.
    source: str | None = None
    as_of: str | None = None

    @classmethod
    def from_spec(cls, spec: Any) -> ModelPrice:
        """The price row of a catalogue ``ModelSpec``."""
        long_context = spec.long_context_rates
        row: dict[str, Any] = {name: getattr(spec.rates, name) for name in RATE_FIELDS}
        for name in RATE_FIELDS:
            row[f"long_context_{name}"] = getattr(long_context, name) if long_context else None
        return cls(
            **row,
            batch_discount=spec.batch_discount,
            min_cacheable_tokens=spec.min_cacheable_tokens,
            long_context_threshold_tokens=spec.long_context_threshold_tokens,
            source=spec.source,
            as_of=spec.as_of,
        )

    def for_runtime(self, prompt_cache: str) -> str:
        """The ``MODEL_PRICE`` JSON the Prospect Uploader's ledger functions read: per-million
        prices, the cache write at the step's TTL (``"5m"``, ``"1h"``; ``"off"`` writes
        nothing). The ledger sums each request's stored ``cost_usd``; these rates price only
        what no request stored (the savings, and deliveries from before costs were stored)."""
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

    def for_step(self) -> str:
        """The ``MODEL_RATES`` JSON a model step prices each billed request with
        (``lambda_src/model_step/request_cost.py``): every rate, both tiers, the source."""
        document = asdict(self)
        del document["min_cacheable_tokens"]
        return json.dumps(document, sort_keys=True, separators=(",", ":"))


#: The catalogue's prices, by Claude API id (see the module docstring for the sources).
PRICE_TABLE: Mapping[str, ModelPrice] = {
    model_id: ModelPrice.from_spec(spec) for model_id, spec in model_catalogue.CATALOGUE.items()
}

_FIELDS = tuple(f.name for f in fields(ModelPrice))
_TEXT_FIELDS = ("source", "as_of")
#: What a model the catalogue does not know must state (long-context rates: when tiered).
NEW_MODEL_FIELDS = (
    *RATE_FIELDS,
    "batch_discount",
    "min_cacheable_tokens",
    "long_context_threshold_tokens",
)


def price_table(
    overrides: Mapping[str, Mapping[str, Any] | ModelPrice | None] | None = None,
    *,
    source: str = "model_prices",
    base: Mapping[str, ModelPrice] = PRICE_TABLE,
) -> dict[str, ModelPrice]:
    """``base`` (default :data:`PRICE_TABLE`) with ``overrides`` laid over it, model by model
    (see the module docstring for the rules). Raises :class:`PropValidationError` naming
    ``source``, the model and the field for a bad entry."""
    table = dict(base)
    for model_id, entry in (overrides or {}).items():
        if entry is None:
            # A price known to be wrong is better unknown: the model reports no cost.
            table.pop(model_id, None)
        elif isinstance(entry, ModelPrice):
            table[model_id] = entry
        elif isinstance(entry, Mapping):
            table[model_id] = _overridden(table.get(model_id), model_id, entry, source)
        else:
            _refuse(f"{source}: {model_id!r} must map to an object of prices, got {entry!r}")
    return table


def _overridden(
    current: ModelPrice | None, model_id: str, entry: Mapping[str, Any], source: str
) -> ModelPrice:
    """``current`` with the fields ``entry`` gives; a new model from ``entry`` alone."""
    unknown = sorted(set(entry) - set(_FIELDS))
    if unknown:
        _refuse(f"{source}: {model_id!r} has unknown fields {unknown}; allowed: {list(_FIELDS)}")
    given = {name: _typed(source, model_id, name, value) for name, value in entry.items()}
    if current is None:
        missing = [name for name in NEW_MODEL_FIELDS if name not in given]
        if missing:
            _refuse(
                f"{source}: {model_id!r} is not in the model catalogue, so it must give "
                f"{missing}: a price it leaves out is never guessed"
            )
        merged = {**dict.fromkeys(_FIELDS), **given}
    else:
        merged = {**asdict(current), **given}
    if "source" not in given and set(given) - set(_TEXT_FIELDS):
        # Overridden figures are the override's, not the catalogue page's.
        merged["source"], merged["as_of"] = source, given.get("as_of")
    if merged["long_context_threshold_tokens"] is None:
        merged.update(dict.fromkeys(LONG_CONTEXT_FIELDS))
    else:
        missing = [name for name in LONG_CONTEXT_FIELDS if merged[name] is None]
        if missing:
            _refuse(
                f"{source}: {model_id!r} has long_context_threshold_tokens, so it must give "
                f"{missing}: a long-context rate is never derived from another"
            )
    return ModelPrice(**merged)


def _typed(source: str, model_id: str, name: str, value: Any) -> Any:
    """``value`` as field ``name`` holds it; refused (naming the field) when it cannot be."""
    if name in _TEXT_FIELDS:
        if value is not None and not isinstance(value, str):
            _refuse(f"{source}: {model_id!r}.{name} must be a string, got {value!r}")
        return value
    if value is None and (name in LONG_CONTEXT_FIELDS or name == "long_context_threshold_tokens"):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        _refuse(f"{source}: {model_id!r}.{name} must be a number >= 0, got {value!r}")
    if name in ("min_cacheable_tokens", "long_context_threshold_tokens"):
        return int(value)
    if name == "batch_discount" and value > 1:
        _refuse(f"{source}: {model_id!r}.batch_discount must be between 0 and 1, got {value!r}")
    return float(value)


def price_key(model_id: str) -> str:
    """The key ``model_id``'s price has in a table: the Claude API id of the catalogued model
    it names (a Bedrock foundation-model or profile id included), else the id itself."""
    spec = model_catalogue.lookup(model_id)
    return str(spec.model_id) if spec is not None else model_id


def price_for(model_id: str, table: Mapping[str, ModelPrice]) -> ModelPrice | None:
    """The row of ``model_id`` in ``table``: by the id itself, else by :func:`price_key`;
    None: the model has no price."""
    if model_id in table:
        return table[model_id]
    return table.get(price_key(model_id))


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


def request_cost() -> ModuleType:
    """``lambda_src/model_step/request_cost.py``: what one billed request cost at a step's
    ``MODEL_RATES`` (the runtime's own arithmetic, for local runs and benchmarks)."""
    return load_runtime_file("model_step/request_cost.py", "constructs_lib._model_step_cost")


def _runtime_cost() -> ModuleType:
    return load_runtime_file("prospect_contract/cost.py", "constructs_lib._prospect_contract_cost")


def _refuse(message: str) -> NoReturn:
    # Imported here: _validation imports aws_cdk (jsii starts node), and a local run or a
    # benchmark prices tokens without a CDK app.
    from ._validation import PropValidationError

    raise PropValidationError(message)
