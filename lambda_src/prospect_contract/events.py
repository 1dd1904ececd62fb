"""The pipeline's events: source, detail types, detail shapes and deduplication ids.

``docs/contract.md`` §2 says who publishes and who consumes each event, §5 the keys.
Standard library only: the CDK app imports this module too.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

#: ``Source`` of every event the pipeline publishes.
EVENT_SOURCE = "prospect-uploader"

#: One valid CSV row, published by the splitter (and re-published by the viewer's Retry);
#: the classify step consumes it.
ROW_VALIDATED = "Prospect Row Validated"
#: The splitter's account of one upload: its counts, or why it was rejected.
UPLOAD_SUMMARIZED = "Prospect Upload Summarized"
#: The upload ledger's one summary per upload, once every valid row is accounted for.
UPLOAD_COMPLETED = "Prospect Upload Completed"
#: Upload-level detail types: never re-published as rows, filed as kind ``upload``.
UPLOAD_DETAIL_TYPES = frozenset({UPLOAD_SUMMARIZED, UPLOAD_COMPLETED})

#: What starts the splitter: S3's own event on the default bus.
S3_SOURCE = "aws.s3"
OBJECT_CREATED = "Object Created"

#: The prospect fields of a row, in CSV column order (the upload's header).
PROSPECT_FIELDS: tuple[str, ...] = (
    "email",
    "first_name",
    "last_name",
    "company",
    "title",
    "country",
    "notes",
)
#: Message Batches delivery (issue 19): how an upload's rows reach the model. The splitter
#: picks one per upload (``DELIVERY``: ``realtime``, ``batch`` or ``auto``, the stack's
#: context ``delivery``); under ``auto`` an upload with at least ``BATCH_MIN_ROWS`` valid
#: rows goes by batch. A row sent by batch carries ``"delivery": "batch"`` in its detail, and
#: the stack's batch step subscribes to exactly those rows; a row without it is realtime.
ROW_DELIVERY_FIELD = "delivery"
REALTIME = "realtime"
BATCH = "batch"
AUTO = "auto"
#: Values of the splitter's ``DELIVERY`` (and the stack's context ``delivery``).
DELIVERY_MODES: tuple[str, ...] = (REALTIME, BATCH, AUTO)
#: The default ``DELIVERY`` and ``BATCH_MIN_ROWS``.
DEFAULT_DELIVERY = AUTO
DEFAULT_BATCH_MIN_ROWS = 2_000

#: The field an operator retry adds to a row's detail: the model step joins it to the
#: row's idempotency key, so each generation makes one new model request.
REPLAY_GENERATION = "replay_generation"

#: Counters an ``UploadsTable`` item carries from the start, so a summary always has them.
UPLOAD_COUNTERS: tuple[str, ...] = (
    "classified_total",
    "failed_total",
    "model_requests",
    "rate_limited",
    "duplicates_suppressed",
    "input_tokens",
    "output_tokens",
    "requests_saved",
    "deduplicated",
    # Prompt caching (issue 20): billed cache tokens, and the usage of replayed results.
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "replayed_input_tokens",
    "replayed_output_tokens",
    "replayed_cache_creation_input_tokens",
    "replayed_cache_read_input_tokens",
    # Message Batches delivery (issue 19): requests billed as batch requests, and their tokens
    # (a subset of the billed counters above, which count both paths).
    "batch_requests",
    "batch_input_tokens",
    "batch_output_tokens",
    "batch_cache_creation_input_tokens",
    "batch_cache_read_input_tokens",
    # Issue 32: the dollars each billed request cost when it was billed (billionths of a
    # dollar), and the requests that carried one; the same of the results replayed.
    "cost_nanousd",
    "priced_requests",
    "replayed_cost_nanousd",
    "priced_replays",
)

SplitStatus = Literal["completed", "rejected"]
UploadStatus = Literal["completed", "incomplete", "rejected"]


class RowValidatedDetail(TypedDict):
    """Detail of ``Prospect Row Validated``: the business key only. The row's values are in
    RowsTable (``prospect_contract.rows``), so no event, dead letter or failure record of the
    pipeline carries them (issue 18)."""

    upload_id: str
    row_number: int  # 1-based data row, the header not counted
    replay_generation: NotRequired[int]  # only on an operator retry: 1, 2, ...
    delivery: NotRequired[Literal["batch"]]  # only on a row sent by Message Batches


class UploadSummarizedDetail(TypedDict):
    """Detail of ``Prospect Upload Summarized``. A rejected upload has all counts 0 and a
    ``reason``; an event that named no object has an ``unknown-...`` id and empty
    ``bucket``/``key``."""

    upload_id: str
    bucket: str
    key: str
    rows: int
    valid: int
    invalid: int
    deduplicated: int  # rows a v2 bus answered DEDUPLICATED; always 0 on a classic bus
    status: SplitStatus
    reason: NotRequired[str]


class UploadCompletedDetail(TypedDict):
    """Detail of ``Prospect Upload Completed``. ``rows``/``valid``/``invalid``/``missing``
    are null when the split never finished; ``classified`` maps label -> rows and
    ``failed`` error code -> rows; ``missing`` counts valid rows never accounted for."""

    upload_id: str
    bucket: str
    key: str
    status: UploadStatus
    created_at: str
    completed_at: str
    reason: NotRequired[str]
    rows: int | None
    valid: int | None
    invalid: int | None
    classified: dict[str, int]
    failed: dict[str, int]
    classified_total: int
    failed_total: int
    model_requests: int
    rate_limited: int
    duplicates_suppressed: int
    input_tokens: int
    output_tokens: int
    requests_saved: int
    deduplicated: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    replayed_input_tokens: int
    replayed_output_tokens: int
    replayed_cache_creation_input_tokens: int
    replayed_cache_read_input_tokens: int
    #: Message Batches delivery (issue 19): ``realtime`` or ``batch`` (null for an upload
    #: whose split never finished), the requests billed as batch requests and their tokens,
    #: and the Message Batches that answered the upload's rows.
    delivery: str | None
    batch_requests: int
    batch_input_tokens: int
    batch_output_tokens: int
    batch_cache_creation_input_tokens: int
    batch_cache_read_input_tokens: int
    #: Issue 32: billed dollars as each request's result stored them (nano-dollars), the
    #: requests that stored one, and the same of the replayed results.
    cost_nanousd: int
    priced_requests: int
    replayed_cost_nanousd: int
    priced_replays: int
    #: The four batch token counters above, summed (as the viewer shows them).
    batch_tokens: int
    batches: int
    #: Dollars (``prospect_contract.cost``); null when the model has no price.
    cost_usd: float | None
    saved_by_replays_usd: float | None
    saved_by_cache_usd: float | None
    saved_by_batch_usd: float | None
    missing: int | None
    #: Issue 36: ``prospect_contract.upload_status``, the one counting rule: the state
    #: (complete, complete_with_failures, stalled, rejected at close), the rows labelled and
    #: the state in words, as the viewer and the local run show them.
    state: str
    labelled: int
    status_text: str


def row_deduplication_id(upload_id: str, row_number: int) -> str:
    """A row's ``DeduplicationId`` on a v2 bus: the same row of the same upload."""
    return f"{upload_id}#{row_number}"


def summary_deduplication_id(upload_id: str) -> str:
    """The ``DeduplicationId`` of an upload's ``Prospect Upload Summarized``."""
    return f"{upload_id}#summary"


def retry_deduplication_id(upload_id: str, row_number: object, generation: int) -> str:
    """The ``DeduplicationId`` of one operator-retry generation of one row: a repeat of
    the same generation is suppressed, a new generation never is."""
    return f"{upload_id}#{row_number}#r{generation}"
