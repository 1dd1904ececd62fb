"""Lambda entry point ``upload_accounting.sweeper.handler``.

Runs on a schedule. Closes every upload whose deadline passed (status ``incomplete``,
``missing`` = valid rows never accounted for) and re-publishes any completion event whose
publisher died before marking it sent. Environment: what ``LedgerSettings`` lists.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from .ledger import UploadLedger

logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)


@functools.lru_cache(maxsize=1)
def _ledger() -> UploadLedger:
    return UploadLedger.from_environment()


def handler(event: dict[str, Any], context: object) -> dict[str, Any]:
    """Sweep once; return ``{"swept": {upload_id: action}}`` for the log."""
    swept = _ledger().sweep()
    if swept:
        logger.info("swept uploads: %s", swept)
    return {"swept": swept}
