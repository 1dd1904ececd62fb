"""The "Prospect Upload Completed" event: how its detail is built from an upload item.

Its shape is ``prospect_contract.events.UploadCompletedDetail``.
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any, cast

from prospect_contract.cost import Price, batch_token_total, upload_cost
from prospect_contract.events import UPLOAD_COUNTERS, UploadCompletedDetail
from prospect_contract.upload_status import upload_counts

SPLIT_COUNTS = ("rows", "valid", "invalid")
#: The upload item's set of the Message Batches that answered its rows (issue 19).
BATCH_IDS = "batch_ids"
TEXT_FIELDS = ("upload_id", "bucket", "key", "status", "created_at", "completed_at", "reason")


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, set, tuple)):
        return [_plain(v) for v in value]
    return value


def summary_detail(
    item: dict[str, Any], price: Price | None = None, now: float | None = None
) -> UploadCompletedDetail:
    """The event detail for one upload item (``docs/contract.md`` §2). ``rows``/``valid``/
    ``invalid``/``missing`` are null when the split never finished; ``classified`` and
    ``failed`` are maps label -> n and error_code -> n; the dollar figures are null without
    ``price`` (default None: the model has no price). ``state``, ``labelled`` and
    ``status_text`` are ``upload_status.upload_counts`` of the item (``now``: epoch seconds,
    default the time of the call), the counting rule the viewer and the local run use."""
    detail: dict[str, Any] = {name: _plain(item.get(name)) for name in TEXT_FIELDS}
    if detail["reason"] is None:
        del detail["reason"]
    for name in SPLIT_COUNTS:
        detail[name] = _plain(item.get(name))
    detail["classified"] = _plain(item.get("classified") or {})
    detail["failed"] = _plain(item.get("failed") or {})
    for name in UPLOAD_COUNTERS:
        detail[name] = _plain(item.get(name) or 0)
    # Message Batches delivery (issue 19).
    detail["delivery"] = _plain(item.get("delivery"))
    detail["batch_tokens"] = batch_token_total(detail)
    detail["batches"] = len(item.get(BATCH_IDS) or ())
    detail.update(upload_cost(detail, price))
    detail["missing"] = _plain(item.get("missing"))
    counts = upload_counts(item, time.time() if now is None else now)
    detail["state"] = counts["state"]
    detail["labelled"] = counts["labelled"]
    detail["status_text"] = counts["text"]
    return cast(UploadCompletedDetail, detail)
