"""Reading the UploadsTable (one item per upload, pk ``upload_id``; shared data model)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from prospect_contract.cost import Price, batch_token_total, upload_cost
from prospect_contract.expiry import expired
from prospect_contract.upload_status import upload_counts, waiting_in_batch

from .store import plain

# Fields sent to the browser, in the page's column order.
UPLOAD_FIELDS = (
    "upload_id",
    "status",
    "bucket",
    "key",
    "created_at",
    "completed_at",
    "rows",
    "valid",
    "invalid",
    "classified",
    "failed",
    "missing",
    "model_requests",
    "rate_limited",
    "duplicates_suppressed",
    "requests_saved",
    "deduplicated",
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    # Message Batches delivery (issue 19).
    "delivery",
    "batch_requests",
)
#: Counters the dollar figures are computed from (not all are shown).
_COST_INPUTS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "replayed_input_tokens",
    "replayed_output_tokens",
    "replayed_cache_creation_input_tokens",
    "replayed_cache_read_input_tokens",
    "batch_input_tokens",
    "batch_output_tokens",
    "batch_cache_creation_input_tokens",
    "batch_cache_read_input_tokens",
    # Issue 32: the stored cost of each billed request and replay (never repriced).
    "model_requests",
    "cost_nanousd",
    "priced_requests",
    "replayed_cost_nanousd",
    "priced_replays",
)
# Statuses an upload can have (contract): the page shows anything else as is.
STATUSES = ("splitting", "classifying", "completed", "incomplete", "rejected")
# The list reads at most this many items (Scan pages of 200). Items expire by TTL,
# so the table stays small; past the cap the answer says ``truncated``.
MAX_UPLOADS_READ = 2000


def upload_view(
    item: dict[str, Any], price: Price | None = None, now: float | None = None
) -> dict[str, Any]:
    """JSON-safe view of one upload, plus ``tokens_billed`` (input, output, cache writes and
    reads), the dollar figures of ``prospect_contract.cost`` (null without ``price``,
    default None: the model has no price) and ``counts``: ``upload_status.upload_counts``,
    the one counting rule (its ``state`` and ``text`` are the page's status badge; ``now``,
    epoch seconds, default the time of the call)."""
    view = {name: plain(item[name]) for name in UPLOAD_FIELDS if name in item}
    tokens = [view.get(name) for name in _COST_INPUTS[:4]]
    view["tokens_billed"] = sum(t for t in tokens if isinstance(t, int | float))
    counters = {name: plain(item.get(name) or 0) for name in _COST_INPUTS}
    view.update(upload_cost(counters, price))
    view["batch_tokens"] = batch_token_total(counters)
    view["batches"] = len(item.get("batch_ids") or ())
    view["waiting_in_batch"] = waiting_in_batch(item)
    view["counts"] = upload_counts(item, time.time() if now is None else now)
    return view


class UploadStore:
    """UploadsTable access: a bounded, paged Scan, newest first; an upload past its
    ``expires_at`` is absent (issue 34)."""

    def __init__(
        self, table: Any, price: Price | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self._table = table
        #: Epoch seconds, for expiry and for an upload's ``stalled`` state.
        self.clock = clock
        #: The classify model's price (``MODEL_PRICE``); None: cost unknown.
        self.price = price
        self._clock = clock

    def newest(self, limit: int) -> tuple[list[dict[str, Any]], bool]:
        """Up to ``limit`` uploads, newest ``created_at`` first, and whether more exist."""
        items: list[dict[str, Any]] = []
        start: dict[str, Any] | None = None
        truncated = False
        while True:
            params: dict[str, Any] = {"Limit": 200}
            if start:
                params["ExclusiveStartKey"] = start
            response = self._table.scan(**params)
            now = self._clock()
            items.extend(i for i in response.get("Items", []) if not expired(i, now))
            start = response.get("LastEvaluatedKey")
            if not start:
                break
            if len(items) >= MAX_UPLOADS_READ:
                truncated = True
                break
        items.sort(key=lambda item: str(item.get("created_at") or ""), reverse=True)
        return items[:limit], truncated or len(items) > limit
