"""Reading the UploadsTable (one item per upload, pk ``upload_id``; shared data model)."""

from __future__ import annotations

from typing import Any

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
)
# Statuses an upload can have (contract): the page shows anything else as is.
STATUSES = ("splitting", "classifying", "completed", "incomplete", "rejected")
# The list reads at most this many items (Scan pages of 200). Items expire by TTL,
# so the table stays small; past the cap the answer says ``truncated``.
MAX_UPLOADS_READ = 2000


def upload_view(item: dict[str, Any]) -> dict[str, Any]:
    """JSON-safe view of one upload, plus ``tokens_billed`` (input + output)."""
    view = {name: plain(item[name]) for name in UPLOAD_FIELDS if name in item}
    tokens = [view.get("input_tokens"), view.get("output_tokens")]
    view["tokens_billed"] = sum(t for t in tokens if isinstance(t, int | float))
    return view


class UploadStore:
    """UploadsTable access: a bounded, paged Scan, newest first."""

    def __init__(self, table: Any) -> None:
        self._table = table

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
            items.extend(response.get("Items", []))
            start = response.get("LastEvaluatedKey")
            if not start:
                break
            if len(items) >= MAX_UPLOADS_READ:
                truncated = True
                break
        items.sort(key=lambda item: str(item.get("created_at") or ""), reverse=True)
        return items[:limit], truncated or len(items) > limit
