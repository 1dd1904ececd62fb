"""What one model-step outcome adds to its upload's counters (contract §3).

Two kinds of counters, counted two ways:

- **per delivery** (:func:`delivery_increments`): ``rate_limited`` (429/529 waits, never
  billed), ``requests_saved`` and the ``replayed_*`` tokens of a duplicate answered from the
  table. Every delivery reports its own.
- **per key** (:func:`key_increments`): the billed counters, ``model_requests`` and the four
  token counts (and their ``batch_*`` part). The model step puts the key's totals over ALL
  its deliveries on its terminal outcome (``key_model_requests``, ``key_usage``, issue 31),
  so a request billed in a delivery that was killed before it reported is still counted,
  and a replay reports what its key cost. They are counted once per key
  (``key_record_id``): an operator's retry is another key and counts again.

An outcome without those fields (a model step older than issue 31) is counted as before: each
delivery's own ``model_requests`` and ``usage``. One whose key fields are None on a terminal
result (a result stored before issue 31) counts its own delivery's too.

Standard library only; the outcome type is imported for type checking.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from prospect_contract.cost import BILLED_TOKENS, nanousd

if TYPE_CHECKING:
    from model_step.outcome import Outcome

#: The outcome field whose presence says the step reports its keys' totals.
KEY_TOTALS = "key_model_requests"


def reports_key_totals(outcome: Outcome | Mapping[str, Any] | None) -> bool:
    """True for an outcome of a model step that reports its keys' totals (issue 31)."""
    return outcome is not None and KEY_TOTALS in outcome


def delivery_increments(outcome: Outcome | Mapping[str, Any] | None) -> dict[str, int]:
    """This delivery's own counters, zeros dropped: the billed ones only for an outcome of
    an older model step (see the module docstring)."""
    if not outcome:
        return {}
    increments = {
        "rate_limited": int(outcome.get("rate_limited") or 0),
        "requests_saved": 1 if outcome.get("replayed") else 0,
    }
    result = outcome.get("result") or {}
    if not reports_key_totals(outcome):
        increments.update(_own_billed(outcome, result))
    if outcome.get("replayed") and result.get("status") == "completed":
        # What this duplicate would have cost had it been sent again: its original's usage.
        stored = result.get("usage") or {}
        for name in BILLED_TOKENS:
            increments[f"replayed_{name}"] = int(stored.get(name) or 0)
        stored_cost = result.get("cost_usd")
        if isinstance(stored_cost, int | float):
            increments["replayed_cost_nanousd"] = nanousd(stored_cost)
            increments["priced_replays"] = 1
    return {name: value for name, value in increments.items() if value}


def key_increments(
    outcome: Outcome | Mapping[str, Any] | None,
) -> tuple[str | None, dict[str, int]]:
    """``(key id, billed counters)`` of the key whose terminal outcome this is, to add once
    under that id; ``(None, {})`` when this outcome adds none that way (an older model
    step's, whose deliveries count their own, or one with no terminal result yet)."""
    if not reports_key_totals(outcome) or not outcome or outcome.get("result") is None:
        return None, {}
    result = outcome["result"] or {}
    requests = outcome.get(KEY_TOTALS)
    if requests is None:
        # A result stored before issue 31: all that is known is this delivery's own cost.
        return None, _own_billed(outcome, result)
    key_id = outcome.get("key_record_id")
    billed = _billed(requests, outcome.get("key_usage"), result, outcome.get("key_cost_usd"))
    return (str(key_id) if key_id else None), billed


def _own_billed(outcome: Outcome | Mapping[str, Any], result: Mapping[str, Any]) -> dict[str, int]:
    """This delivery's own billed counters (an older step's outcome, or an older result)."""
    return _billed(
        outcome.get("model_requests"), outcome.get("usage"), result, outcome.get("cost_usd")
    )


def _billed(requests: Any, usage: Any, result: Mapping[str, Any], cost_usd: Any) -> dict[str, int]:
    """``model_requests``, the token counters (and, for a Message Batch's answer, the same
    as its ``batch_*`` part) and, when ``cost_usd`` is a number, ``cost_nanousd`` with
    ``priced_requests`` (issue 32: what the requests cost when billed, never repriced),
    zeros dropped."""
    tokens = usage if isinstance(usage, Mapping) else {}
    billed = {
        "model_requests": int(requests or 0),
        **{name: int(tokens.get(name) or 0) for name in BILLED_TOKENS},
    }
    if billed["model_requests"] and isinstance(cost_usd, int | float):
        billed["cost_nanousd"] = nanousd(cost_usd)
        billed["priced_requests"] = billed["model_requests"]
    if result.get("delivery") == "batch" and billed["model_requests"]:
        # Message Batches delivery (issue 19): billed at the batch price.
        billed["batch_requests"] = billed["model_requests"]
        for name in BILLED_TOKENS:
            billed[f"batch_{name}"] = billed[name]
    return {name: value for name, value in billed.items() if value}
