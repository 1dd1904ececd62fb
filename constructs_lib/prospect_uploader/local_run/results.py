"""What a run produced, read back from the local tables (the pipeline's own records)."""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: A failure record's ``error_code`` that says nothing of why (the recorder's fallback).
NO_CODE = frozenset({"", "Unknown"})


@dataclass
class RunResult:
    """Counts of one run. See ``JSON_FIELDS`` in :mod:`.report` for the definitions."""

    file: str
    object_key: str
    bucket: str = ""
    upload_id: str | None = None
    status: str | None = None  # the splitter's summary status: completed / rejected
    reason: str | None = None
    error_code: str | None = None
    rows: int | None = None  # data rows in the file, counted independently of the splitter
    summary_rows: int | None = None  # data rows according to the splitter's summary
    valid: int = 0
    invalid: int = 0
    classified: int = 0
    failed: int = 0  # valid rows with a model failure record and no label
    superseded: int = 0  # rows with a label AND a model failure record
    unsettled: int = 0  # valid rows with neither
    dlq: int = 0  # model failures recorded (one item per row) for this upload
    unattributed: int = 0  # failure records of this run that name no row of this upload
    left_on_queue: int = 0
    labels: dict[str, int] = field(default_factory=dict)
    # HTTP requests the local model answered (429 and 529 included) plus billed Message
    # Batch requests; the JSON's ``http_requests`` (``upload`` holds the billed count).
    model_requests: int = 0
    model_outcomes: dict[str, int] = field(default_factory=dict)
    # The upload's state and counts by the one counting rule the viewer and the mail use
    # (``prospect_contract.upload_status.upload_counts`` of its UploadsTable item); None
    # when the run has no upload item (a rejected S3 event naming no object).
    upload: dict[str, Any] | None = None
    deliveries: int = 0
    lambda_retries: int = 0
    on_failure_records: int = 0
    alerts: int = 0
    alert_messages: list[str] = field(default_factory=list)
    functions: dict[str, Any] = field(default_factory=dict)
    queues: dict[str, Any] = field(default_factory=dict)  # local queues and their pollers
    in_progress_exhausted: int = 0  # on-failure records caused by IdempotencyAlreadyInProgress
    # model faults, Lambda kills, lost batches or errored batch results: a row may need
    # retries (and a lost batch may have billed its rows before they went again)
    faults_enabled: bool = False
    retry_attempts: int = 0  # the step's attempt budget (MAX_ATTEMPTS) minus one
    # Billed model requests (not 401/429/529) per record key, counted where they are sent.
    billed_requests: int = 0
    # Of those, requests that failed in transport after they were sent (a client-side
    # timeout, a lost connection, an answer cut by the call's deadline): billed, since the
    # model may have done the work, and retried. Timing alone can add them (a loaded
    # machine answers late).
    model_transport_errors: int = 0
    # Model-step attempts that ended past their Lambda deadline: Lambda would have killed
    # them, and a copy may have taken their expired lock and billed again. Never injected:
    # a loaded machine's.
    overruns: int = 0
    max_requests_per_key: int = 0
    model_answer_ms: dict[str, float] = field(default_factory=dict)  # p50, p99, max
    # Lambda faults injected (--kill-rate, --throttle-rate) and what SQS did about them.
    kills: int = 0
    throttles: int = 0
    redriven_by_queue: dict[str, int] = field(default_factory=dict)  # construct path -> n
    # Dead letters of the step without an ERROR_CODE although its function ran with them;
    # and those the function never ran with (every receive throttled: it could not run).
    uncoded_dead_letters: int = 0
    unrun_dead_letters: int = 0
    uncoded_failures: int = 0  # failure records of rows with no (or an empty) error_code
    run_timeout_s: float = 0.0  # the bound the run settled within (derived or --run-timeout)
    duplicates: int = 1
    model: str = "local"
    provider: str = "anthropic"  # the classify step's MODEL_PROVIDER (--provider)
    # --provider bedrock with IAM checked: InvokeModel requests evaluated against the grant,
    # and the foundation model's destination regions they were routed to.
    bedrock_invocations_checked: int = 0
    bedrock_destinations: dict[str, int] = field(default_factory=dict)
    log_file: str = ""
    rate_limit: int | None = None  # requests per run-clock minute the local model accepts
    deduplicated: int = 0  # PutEvents entries a v2 bus answered DEDUPLICATED
    published: int = 0  # PutEvents entries a v2 bus published (0 on a classic bus)
    row_entries_sent: int = 0  # "Prospect Row Validated" PutEvents entries, any bus
    # Local model: per fault plan (healthy/transient/persistent/invalid), rows, requests, max.
    requests_per_row: dict[str, dict[str, int]] = field(default_factory=dict)
    split_runs: int = 0  # splitter runs that split the object (--duplicates N: N)
    rate_limited: int = 0  # 429 answers (the limiter's and injected ones)
    input_tokens: int = 0  # billed (200 answers)
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0  # billed cache writes (200 answers)
    cache_read_input_tokens: int = 0  # billed cache reads (200 answers)
    cache_writes: int = 0  # requests that wrote the prompt cache
    cache_reads: int = 0  # requests that read it
    cost_usd: float | None = None  # the billed requests at MODEL_RATES; None: no price
    elapsed_s: float = 0.0  # wall time from the upload to the last settled invocation
    run_minutes: float = 0.0  # the same on the run's clock (elapsed_s / seconds per minute)
    iam_checked: bool = False
    aws_calls: int = 0  # AWS calls of handlers (and of Lambda on their behalf) evaluated
    denied: int = 0  # of those, denied by the function's role
    denials: list[str] = field(default_factory=list)  # "function: action on resource"
    settled: bool = True  # False: the run's bound passed with work in flight (issue 36)
    unused_grants: dict[str, list[str]] = field(default_factory=dict)
    unevaluated_conditions: list[str] = field(default_factory=list)
    # Message Batches delivery (issue 19).
    delivery: str | None = None  # the splitter's DELIVERY for this run (realtime/batch/auto)
    batches: int = 0  # Message Batches created on the local model
    batch_requests: int = 0  # requests submitted in those batches
    batch_billed: int = 0  # of those, billed (succeeded results)
    batch_results: dict[str, int] = field(default_factory=dict)  # by result type
    # Kills around a batch create (--batch-create-kill-rate), by kill point.
    batch_create_kills: dict[str, int] = field(default_factory=dict)
    # Message Batches faults injected (issue 33): canceled, lost, broken_reads,
    # failed_retrieves.
    batch_faults: dict[str, int] = field(default_factory=dict)

    @property
    def late_attempts(self) -> int:
        """Attempts that only the machine's speed ended early (requests that failed in
        transport, attempts past their deadline): each may add one billed request."""
        return self.model_transport_errors + self.overruns

    @property
    def max_attempts(self) -> int:
        """The step's attempt budget per key (``MAX_ATTEMPTS`` in the template)."""
        return self.retry_attempts + 1

    @property
    def redriven(self) -> int:
        """Messages moved by a redrive policy, on every queue."""
        return sum(self.redriven_by_queue.values())


def count_csv_rows(path: Path) -> int | None:
    """Non-blank data records after the header, or None when the file is not UTF-8 CSV.

    Counted with the csv module directly (not the splitter's code), so ``rows`` is an
    independent check of the splitter's ``rows = valid + invalid``.
    """
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            records = [record for record in csv.reader(handle) if record]
    except (UnicodeDecodeError, csv.Error):
        return None
    return max(0, len(records) - 1)


def scan(table: Any, attributes: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Every item of a (small, local) table: only ``attributes`` of each when given
    (default: all of them)."""
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {}
    if attributes:
        names = {f"#a{n}": name for n, name in enumerate(attributes)}
        kwargs.update(ProjectionExpression=", ".join(names), ExpressionAttributeNames=names)
    while True:
        page = table.scan(**kwargs)
        items.extend(page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def read_outcome(result: RunResult, failures_table: Any, prospects_table: Any) -> None:
    """Fill ``result`` from the failures and prospects tables."""
    failure_items = scan(failures_table)
    summaries = [item for item in failure_items if item.get("kind") == "summary"]
    if summaries:
        summary = summaries[0]
        result.upload_id = str(summary["upload_id"])
        result.status = str(summary.get("status", ""))
        result.reason = summary.get("reason")
        result.summary_rows = int(summary.get("rows", 0))
        result.valid = int(summary.get("valid", 0))
        result.invalid = int(summary.get("invalid", 0))
    upload_items = [
        item
        for item in failure_items
        if item.get("kind") == "upload" and item.get("upload_id") == result.upload_id
    ]
    if upload_items:
        result.error_code = str(upload_items[0].get("error_code", ""))
        result.reason = str(upload_items[0].get("reason", result.reason or ""))

    model_items = [item for item in failure_items if item.get("kind") == "model"]
    failed_rows = {
        int(item["row_number"])
        for item in model_items
        if item.get("upload_id") == result.upload_id and "row_number" in item
    }
    result.dlq = len(failed_rows)
    result.uncoded_failures = sum(
        1
        for item in model_items
        if item.get("upload_id") == result.upload_id
        and str(item.get("error_code") or "").strip() in NO_CODE
    )
    result.unattributed = len(model_items) - sum(
        1
        for item in model_items
        if item.get("upload_id") == result.upload_id and "row_number" in item
    )

    labelled = {
        int(item["row_number"]): str(item["label"])
        # Only what is counted: the whole items (a row's fields and its answer) cost a
        # run more to read than its own rows' labels.
        for item in scan(prospects_table, ("upload_id", "row_number", "label"))
        if item.get("upload_id") == result.upload_id and item.get("label")
    }
    result.classified = len(labelled)
    result.labels = dict(Counter(labelled.values()))
    result.superseded = len(failed_rows & set(labelled))
    result.failed = len(failed_rows - set(labelled))
    result.unsettled = max(0, result.valid - result.classified - result.failed)
