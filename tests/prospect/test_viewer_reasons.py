"""The viewer's reasons as sentences, and a failed row's outcome (issue 36 items 1 and 3)."""

from __future__ import annotations

import pytest
from prospect_viewer.reasons import human_reason
from prospect_viewer.row_outcome import row_outcome

SDK_DUMP = (
    "Error code: 400 - {'type': 'error', 'error': {'type': 'invalid_request_error', "
    "'message': 'prompt is too long: 210000 tokens > 200000 maximum'}, "
    "'request_id': 'req_011CXYZ'}"
)


def test_an_sdk_dict_dump_becomes_a_sentence_with_its_code_and_request_id():
    text = human_reason({"error_code": "BadRequestError", "reason": SDK_DUMP})

    assert text == (
        "The model refused the request (invalid_request_error): Prompt is too long: 210000 "
        "tokens > 200000 maximum. Code BadRequestError, HTTP 400. Request req_011CXYZ."
    )
    assert "{" not in text and "'type'" not in text


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        pytest.param(
            {
                "error_code": "BadRequestError",
                "reason": "model API refused the request: BadRequestError, status 400, "
                "type invalid_request_error, request id req_local_000009",
                "request_id": "req_local_000009",
            },
            "The model refused the request (invalid_request_error). Code BadRequestError, "
            "HTTP 400. Request req_local_000009.",
            id="runtime-refusal",
        ),
        pytest.param(
            {
                "error_code": "ModelDeadlineExceeded",
                "reason": "transient failure on attempt 3 of 3: ModelDeadlineExceeded: "
                "APITimeoutError",
            },
            "The model did not answer before the step's deadline on attempt 3 of 3. "
            "Code ModelDeadlineExceeded.",
            id="transient-last-attempt",
        ),
        pytest.param(
            {"error_code": "InvalidEmail", "reason": "email is not a valid address"},
            "Email is not a valid address. Code InvalidEmail.",
            id="validation",
        ),
        pytest.param(
            {"error_code": "Mystery", "reason": "Mystery"},
            "The row failed. Code Mystery.",
            id="code-only",
        ),
    ],
)
def test_every_reason_is_a_sentence_ending_with_its_code(item, expected):
    assert human_reason(item) == expected


def test_a_never_retried_model_failure_is_failed_with_its_own_code():
    item = {"kind": "model", "error_code": "InternalServerError", "recorded_at": "t1"}

    assert row_outcome(item, None) == {
        "state": "failed",
        "generation": 0,
        "error_code": "InternalServerError",
        "recorded_at": "t1",
    }


def test_a_retry_that_succeeded_shows_its_label():
    item = {"kind": "model", "replay_generation": 1, "retried_at": "2026-12-05T10:00:00Z"}
    prospect = {
        "label": {"S": "warm"},
        "classified_at": {"S": "2026-12-05T10:00:02Z"},
        "request_id": {"S": "req_2"},
    }

    outcome = row_outcome(item, prospect)

    assert outcome == {
        "state": "succeeded",
        "generation": 1,
        "label": "warm",
        "at": "2026-12-05T10:00:02Z",
        "request_id": "req_2",
    }


def test_a_label_older_than_the_retry_is_not_the_retry_s_outcome():
    item = {
        "kind": "model",
        "replay_generation": 2,
        "retried_at": "2026-12-05T10:00:00Z",
        "attempts": [{"generation": 0, "error_code": "X", "recorded_at": "t0"}],
    }
    prospect = {"label": {"S": "hot"}, "classified_at": {"S": "2026-12-05T09:00:00Z"}}

    assert row_outcome(item, prospect) == {
        "state": "pending",
        "generation": 2,
        "at": "2026-12-05T10:00:00Z",
    }


def test_a_retry_that_failed_again_shows_its_own_attempt():
    item = {
        "kind": "model",
        "replay_generation": 1,
        "retried_at": "t1",
        "attempts": [
            {"generation": 0, "error_code": "A", "recorded_at": "t0", "attempt": 3, "of": 3},
            {"generation": 1, "error_code": "B", "recorded_at": "t2", "attempt": 1, "of": 1},
        ],
    }

    assert row_outcome(item, None) == {
        "state": "failed",
        "generation": 1,
        "error_code": "B",
        "recorded_at": "t2",
        "attempt": 1,
        "of": 1,
    }


def test_a_validation_failure_has_no_outcome():
    assert row_outcome({"kind": "validation"}, None) is None


def test_a_dump_cut_short_still_reads_as_a_sentence():
    cut = SDK_DUMP[:120]  # stored reasons are cut at 1,024 characters; this one mid-message

    text = human_reason({"error_code": "BadRequestError", "reason": cut, "request_id": "req_9"})

    assert text.startswith("The model refused the request (invalid_request_error): Prompt is")
    assert text.endswith("Code BadRequestError, HTTP 400. Request req_9.")
    assert "{" not in text
