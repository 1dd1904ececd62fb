"""What became of a failed row, retried or not: the page's "Outcome" column.

A row's failure item holds its latest failure and its history of failed attempts
(``attempts``, written by the recorder, one entry per dead letter: generation, code,
attempt, time, request id). A retry that succeeds writes no failure: its label is on the
row in ProspectsTable (``label``, ``classified_at``, ``request_id``). So:

- ``succeeded``: the row has a label written after the last retry (or any label, if it was
  never retried: another delivery answered it);
- ``failed``: the latest failed attempt is the current generation's (the retry failed
  again, or the row was never retried);
- ``pending``: retried, and neither its label nor its failure is in yet.

Pure functions; no AWS calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prospect_contract.failures import KIND_MODEL

from .store import plain

SUCCEEDED = "succeeded"
FAILED = "failed"
PENDING = "pending"


def _text(value: Any) -> str:
    if isinstance(value, Mapping) and "S" in value:  # a low-level attribute value
        return str(value["S"])
    return "" if value is None else str(value)


def history(item: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The row's failed attempts, oldest first, as JSON-safe dicts (empty when none)."""
    entries = item.get("attempts")
    if not isinstance(entries, list):
        return []
    return [plain(entry) for entry in entries if isinstance(entry, Mapping)]  # type: ignore[misc]


def row_outcome(
    item: Mapping[str, Any], prospect: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The outcome of a kind ``model`` failure item (None for other kinds). ``prospect``:
    the row's ProspectsTable item (low-level or plain), or None when it has no label."""
    if item.get("kind") != KIND_MODEL:
        return None
    generation = int(plain(item.get("replay_generation") or 0))  # type: ignore[call-overload]
    retried_at = str(item.get("retried_at") or "")
    label = _text((prospect or {}).get("label"))
    labelled_at = _text((prospect or {}).get("classified_at"))
    if label and (generation == 0 or labelled_at >= retried_at):
        return {
            "state": SUCCEEDED,
            "generation": generation,
            "label": label,
            "at": labelled_at,
            "request_id": _text((prospect or {}).get("request_id")),
        }
    attempts = history(item)
    last = attempts[-1] if attempts else None
    if last is not None and int(last.get("generation") or 0) == generation:
        return {"state": FAILED, **last}
    if generation == 0:
        return {
            "state": FAILED,
            "generation": 0,
            "error_code": str(item.get("error_code") or "Unknown"),
            "recorded_at": str(item.get("recorded_at") or ""),
        }
    return {"state": PENDING, "generation": generation, "at": retried_at}
