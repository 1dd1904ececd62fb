"""The one counting rule of an upload (issue 36 item 2): prospect_contract.upload_status."""

from __future__ import annotations

from decimal import Decimal

import pytest
from prospect_contract.upload_status import STALL_AFTER_SECONDS, upload_counts

NOW = 1_800_000_000.0
RECENT = "2027-01-15T08:00:00.000Z"  # 1,800,000,000 is 2027-01-15T08:00:00Z


def _item(**fields):
    return {
        "upload_id": "u-1",
        "status": "completed",
        "rows": Decimal(40),
        "valid": Decimal(34),
        "invalid": Decimal(0),
        "classified_total": Decimal(34),
        "failed_total": Decimal(0),
        "failed": {},
        "model_requests": Decimal(40),
        "rate_limited": Decimal(8),
        "created_at": RECENT,
        **fields,
    }


@pytest.mark.parametrize(
    ("fields", "state", "text"),
    [
        pytest.param({}, "complete", "complete: 34 labelled, no failures", id="complete"),
        pytest.param(
            {"classified_total": 30, "failed_total": 4, "invalid": 6},
            "complete_with_failures",
            "complete with failures: 30 labelled, 4 failed, 6 invalid",
            id="failures",
        ),
        pytest.param(
            {"invalid": 6},
            "complete_with_failures",
            "complete with failures: 34 labelled, 0 failed, 6 invalid",
            id="invalid-only",
        ),
        pytest.param(
            {"status": "classifying", "classified_total": 20, "last_activity_at": RECENT},
            "in_progress",
            "in progress: 20 of 34 rows answered (20 labelled, 0 failed)",
            id="in-progress",
        ),
        pytest.param(
            {"status": "classifying", "classified_total": 4, "delivery": "batch"},
            "waiting_in_batch",
            "waiting in batch: 30 rows; 4 of 34 rows answered (4 labelled, 0 failed)",
            id="waiting-in-batch",
        ),
        pytest.param(
            {
                "status": "classifying",
                "classified_total": 20,
                "last_activity_at": "2027-01-15T07:00:00.000Z",
            },
            "stalled",
            "stalled: nothing counted for 30 minutes; 20 of 34 rows answered (20 labelled, "
            "0 failed)",
            id="stalled-open",
        ),
        pytest.param(
            {"status": "incomplete", "classified_total": 31, "missing": 3},
            "stalled",
            "stalled: closed at its deadline, 3 missing; 31 of 34 rows answered (31 labelled, "
            "0 failed)",
            id="closed-incomplete",
        ),
        pytest.param(
            {"status": "rejected", "reason": "not a CSV file", "valid": None, "rows": None},
            "rejected",
            "rejected: no row was sent (not a CSV file)",
            id="rejected",
        ),
    ],
)
def test_each_state_says_what_it_is_with_its_counts(fields, state, text):
    counts = upload_counts(_item(**fields), NOW)

    assert (counts["state"], counts["text"]) == (state, text)


def test_a_completed_upload_with_failures_is_never_plain_complete():
    # The issue: 3 failed and 6 invalid rows showed a green "completed".
    counts = upload_counts(_item(classified_total=31, failed_total=3, invalid=6), NOW)

    assert counts["state"] == "complete_with_failures"
    assert (counts["labelled"], counts["failed"], counts["invalid"]) == (31, 3, 6)


def test_model_requests_are_the_billed_ones_and_rate_limits_stay_apart():
    counts = upload_counts(_item(), NOW)

    assert (counts["model_requests"], counts["rate_limited"]) == (40, 8)


def test_an_open_upload_is_stalled_only_after_the_stall_time():
    item = _item(status="classifying", classified_total=1, last_activity_at=RECENT)

    assert upload_counts(item, NOW + STALL_AFTER_SECONDS)["state"] == "in_progress"
    assert upload_counts(item, NOW + STALL_AFTER_SECONDS + 1)["state"] == "stalled"
