"""Per-upload accounting from the classify step's ``on_outcome`` hook (contract §3).

The handler wires it as ``ModelStep(..., on_outcome=accounting.record_outcome)`` (or calls
it from its own hook). Without ``UPLOADS_TABLE_NAME`` (a step deployed without the upload
ledger, or a local run that does not emulate it) accounting is off and this does nothing.
An exception here is transient by contract: the delivery is retried and reported again,
and the ledger counts the row once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from upload_accounting import LedgerSettings, UploadLedger

if TYPE_CHECKING:
    from model_step.outcome import Outcome

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_ledger: UploadLedger | None = None


def _shared_ledger() -> UploadLedger | None:
    global _ledger
    if not LedgerSettings.configured():
        return None
    with _lock:
        if _ledger is None:
            _ledger = UploadLedger.from_environment()
        return _ledger


def record_outcome(event: Mapping[str, Any], outcome: Outcome) -> None:
    """Count this delivery (and, once per row, the row's label or failure)."""
    ledger = _shared_ledger()
    if ledger is not None:
        ledger.record_outcome(event, outcome)
