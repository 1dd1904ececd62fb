"""THE counting rule of an upload: its state and its counts, from its UploadsTable item.

Every place that tells an operator how an upload went reads this one function, so they
cannot disagree: the viewer's uploads table (``/api/uploads``), the "Prospect Upload
Completed" event and so the summary mail, and the local run's summary and ``--json``
(``prospect-uploader run``)::

    counts = upload_counts(item, now=time.time())
    counts["state"]          # "complete_with_failures"
    counts["text"]           # "complete with failures: 30 labelled, 4 failed, 6 invalid"

States (``state``):

- ``complete``: every valid row labelled, no row failed and none invalid;
- ``complete_with_failures``: every valid row accounted for, some failed or invalid;
- ``in_progress``: rows are still being answered;
- ``waiting_in_batch``: the rows not yet answered are in Message Batches (up to 24 h);
- ``stalled``: open, no row waiting in a batch, and nothing counted for
  :data:`STALL_AFTER_SECONDS` (rate-limited waits count); or closed ``incomplete`` at its
  deadline with rows missing;
- ``rejected``: the file was refused before any row was sent.

Counts: ``rows``, ``valid``, ``invalid`` (the split's; null until it finished),
``labelled`` (rows with a label), ``failed`` (valid rows that ended without one),
``failed_by_code``, ``missing`` (valid rows not accounted for yet), ``waiting_in_batch``, and
``model_requests``: requests billed by the model for the upload's rows, each key's once
(429 and 529 answers are never billed: ``rate_limited`` counts those waits apart).

Standard library only; the item may hold Decimals (boto3's resource API) or plain numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

COMPLETE = "complete"
COMPLETE_WITH_FAILURES = "complete_with_failures"
IN_PROGRESS = "in_progress"
WAITING_IN_BATCH = "waiting_in_batch"
STALLED = "stalled"
REJECTED = "rejected"
STATES = (COMPLETE, COMPLETE_WITH_FAILURES, IN_PROGRESS, WAITING_IN_BATCH, STALLED, REJECTED)
#: An open upload with nothing counted for this long (and no row in a batch) is stalled.
STALL_AFTER_SECONDS = 30 * 60
#: The ledger's stamp of the last write to the upload's counts.
LAST_ACTIVITY = "last_activity_at"
_OPEN = ("splitting", "classifying")


def _int(value: Any) -> int:
    if isinstance(value, bool) or value is None:
        return 0
    if isinstance(value, int | float | Decimal):
        return int(value)
    try:
        return int(str(value))
    except ValueError:
        return 0


def _optional_int(value: Any) -> int | None:
    return None if value is None else _int(value)


def _total(item: Mapping[str, Any], name: str) -> int:
    """The ledger's ``<name>_total``; an item without one (written before the totals) sums
    its ``<name>`` map (label or error code -> rows)."""
    if item.get(f"{name}_total") is not None:
        return _int(item.get(f"{name}_total"))
    counts = item.get(name)
    return sum(_int(n) for n in counts.values()) if isinstance(counts, Mapping) else 0


def _epoch(text: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def waiting_in_batch(item: Mapping[str, Any]) -> int:
    """Rows of a Message Batches upload (issue 19) whose outcome is not in yet, while it is
    classifying; else 0. A batch answers within 24 h: these rows wait, they are not stuck."""
    if item.get("delivery") != "batch" or item.get("status") != "classifying":
        return 0
    accounted = _int(item.get("classified_total")) + _int(item.get("failed_total"))
    return max(_int(item.get("valid")) - accounted, 0)


def _last_activity(item: Mapping[str, Any]) -> float | None:
    for name in (LAST_ACTIVITY, "split_finished_at", "created_at"):
        when = _epoch(item.get(name)) if item.get(name) else None
        if when is not None:
            return when
    return None


def _state(item: Mapping[str, Any], counts: Mapping[str, Any], now: float) -> str:
    status = item.get("status")
    if status == "rejected":
        return REJECTED
    if status == "completed":
        return COMPLETE_WITH_FAILURES if counts["failed"] or counts["invalid"] else COMPLETE
    if status == "incomplete":
        return STALLED
    if counts["waiting_in_batch"]:
        return WAITING_IN_BATCH
    last = _last_activity(item)
    if status in _OPEN and last is not None and now - last > STALL_AFTER_SECONDS:
        return STALLED
    return IN_PROGRESS


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def status_text(counts: Mapping[str, Any]) -> str:
    """The state in words with the counts that matter for it."""
    state = counts["state"]
    labelled, failed = counts["labelled"], counts["failed"]
    if state == REJECTED:
        return "rejected: no row was sent" + (f" ({counts['reason']})" if counts["reason"] else "")
    if state == COMPLETE:
        return f"complete: {labelled} labelled, no failures"
    if state == COMPLETE_WITH_FAILURES:
        return f"complete with failures: {labelled} labelled, {failed} failed, " + (
            f"{counts['invalid'] or 0} invalid"
        )
    accounted = labelled + failed
    of = f"{accounted} of {counts['valid']}" if counts["valid"] is not None else str(accounted)
    so_far = f"{of} rows answered ({labelled} labelled, {failed} failed)"
    if state == WAITING_IN_BATCH:
        return f"waiting in batch: {_plural(counts['waiting_in_batch'], 'row')}; {so_far}"
    if state == STALLED:
        if counts["status"] == "incomplete":
            missing = counts["missing"]
            lost = "the split never finished" if missing is None else f"{missing} missing"
            return f"stalled: closed at its deadline, {lost}; {so_far}"
        return f"stalled: nothing counted for {STALL_AFTER_SECONDS // 60} minutes; {so_far}"
    return f"in progress: {so_far}"


def upload_counts(item: Mapping[str, Any], now: float) -> dict[str, Any]:
    """The upload's ``state``, its ``text`` and its counts (see the module docstring);
    ``now``: epoch seconds, for ``stalled``."""
    valid = _optional_int(item.get("valid"))
    labelled = _total(item, "classified")
    failed = _total(item, "failed")
    counts: dict[str, Any] = {
        "status": item.get("status"),
        "reason": item.get("reason"),
        "rows": _optional_int(item.get("rows")),
        "valid": valid,
        "invalid": _optional_int(item.get("invalid")),
        "labelled": labelled,
        "failed": failed,
        "failed_by_code": {
            str(code): _int(n) for code, n in sorted((item.get("failed") or {}).items()) if _int(n)
        },
        "missing": None if valid is None else max(valid - labelled - failed, 0),
        "waiting_in_batch": waiting_in_batch(item),
        "model_requests": _int(item.get("model_requests")),
        "rate_limited": _int(item.get("rate_limited")),
    }
    counts["state"] = _state(item, counts, now)
    counts["text"] = status_text(counts)
    return counts
