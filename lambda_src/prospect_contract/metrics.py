"""The upload ledger's own CloudWatch metrics: one EMF document per closed upload.

Written by the publisher that published the upload's completion event, right after
EventBridge accepted it, so each upload is counted once (as its event is sent once).
Namespace ``NAMESPACE``, one dimension ``UploadsTable`` (the uploads table's name, unique
per stack). Stdlib only: the recorder and the sweeper ship no Powertools.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

NAMESPACE = "ProspectUploader"
DIMENSION = "UploadsTable"
#: Closed uploads by final status: exactly one of the three is 1 per upload.
STATUS_METRICS: Mapping[str, str] = {
    "completed": "UploadsCompleted",
    "incomplete": "UploadsIncomplete",
    "rejected": "UploadsRejected",
}
#: Closed uploads by the one counting rule's state (``upload_status``, the detail's
#: ``state``): 1 for a completed upload with failed or invalid rows (issue 36).
STATE_METRICS: Mapping[str, str] = {"complete_with_failures": "UploadsWithFailures"}
#: The closed upload's rows: labelled, failed (dead-lettered or refused) and invalid; and
#: its billed model requests, the count the viewer and the mail give.
ROW_METRICS: Mapping[str, str] = {
    "classified_total": "RowsClassified",
    "failed_total": "RowsFailed",
    "invalid": "RowsInvalid",
    "model_requests": "ModelRequests",
}
#: Every metric name this module writes.
METRIC_NAMES: tuple[str, ...] = (
    *STATUS_METRICS.values(),
    *STATE_METRICS.values(),
    *ROW_METRICS.values(),
)


def closed_upload_document(
    uploads_table_name: str, detail: Mapping[str, Any], now: float
) -> dict[str, Any]:
    """The EMF document for one closed upload (``detail``: its completion event's detail)."""
    values = {name: int(detail.get("status") == status) for status, name in STATUS_METRICS.items()}
    values.update(
        {name: int(detail.get("state") == state) for state, name in STATE_METRICS.items()}
    )
    for field, name in ROW_METRICS.items():
        values[name] = int(detail.get(field) or 0)
    return {
        "_aws": {
            "Timestamp": int(now * 1000),
            "CloudWatchMetrics": [
                {
                    "Namespace": NAMESPACE,
                    "Dimensions": [[DIMENSION]],
                    "Metrics": [{"Name": name, "Unit": "Count"} for name in METRIC_NAMES],
                }
            ],
        },
        DIMENSION: uploads_table_name,
        **values,
    }


def write_closed_upload(
    uploads_table_name: str,
    detail: Mapping[str, Any],
    now: float | None = None,
    out: TextIO | None = None,
) -> None:
    """Write the closed upload's document as one line on stdout (Lambda turns it into
    metrics)."""
    document = closed_upload_document(
        uploads_table_name, detail, time.time() if now is None else now
    )
    print(json.dumps(document, separators=(",", ":")), file=out or sys.stdout, flush=True)
