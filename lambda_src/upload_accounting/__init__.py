"""Per-upload accounting: one ``UploadsTable`` item per upload, each row counted once,
exactly one "Prospect Upload Completed" event when every valid row is accounted for.

Bundled, with ``prospect_contract``, into every function that reports on an upload
(splitter, classifier, failure recorder, sweeper)::

    ledger = UploadLedger.from_environment()
    ledger.begin("u-1", bucket="uploads", key="in/today.csv")
    ledger.split_finished("u-1", rows=3, valid=2, invalid=1)
    ledger.row_classified("u-1", 1, "hot")
    ledger.row_failed("u-1", 2, "ModelRejectedInput")   # -> completes, publishes once

Sweeper handler string: ``upload_accounting.sweeper.handler``.
"""

from .config import LedgerSettings
from .errors import SummaryPublishError
from .ledger import RowAccounted, UploadLedger

__all__ = [
    "LedgerSettings",
    "RowAccounted",
    "SummaryPublishError",
    "UploadLedger",
]
