"""Rendering a run: a readable summary table and the one-line JSON object."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .invariants import Check
from .results import RunResult

LABEL_ORDER = ("hot", "warm", "cold")
# Meaning of each JSON key (also the summary table's notes).
JSON_FIELDS = {
    "rows": "data rows in the file",
    "valid": "rows the splitter published (its summary)",
    "invalid": "rows the splitter recorded as invalid (its summary)",
    "classified": "prospect rows labelled in ProspectsTable",
    "failed": "valid rows that ended in the failure store without a label",
    "dlq": "model-step failures recorded from FailureQueue (one per row)",
    "model_requests": "requests billed by the model for the upload's rows, each key's once: "
    "the upload's count, as the viewer and the summary mail give it (429 and 529 are never "
    "billed)",
    "http_requests": "requests that reached the local model: realtime HTTP requests (429 and "
    "529 answers included) plus billed Message Batch requests",
    "upload": "the upload's state (complete, complete_with_failures, in_progress, "
    "waiting_in_batch, stalled, rejected), its words and counts: the one counting rule the "
    "viewer and the summary mail use",
    "deliveries": "row-event deliveries to the classify function, first attempts only",
    "alerts": "upload alerts published to AlertTopic",
    "deduplicated": "row events an EventBridge v2 bus answered DEDUPLICATED (publish side)",
    "row_entries_sent": "Prospect Row Validated entries sent with PutEvents, on any bus",
    "requests_per_row": "local model, per fault plan: rows, their requests, most for one row",
    "split_runs": "S3 event deliveries to the splitter, each a full split (--duplicates N: N)",
    "rate_limited": "429 answers of the model (not billed)",
    "input_tokens": "input tokens billed (200 answers)",
    "output_tokens": "output tokens billed (200 answers)",
    "cache_creation_input_tokens": "input tokens written to the prompt cache (200 answers)",
    "cache_read_input_tokens": "input tokens read from the prompt cache (200 answers)",
    "cache_writes": "requests that wrote the prompt cache",
    "cache_reads": "requests that read the prompt cache",
    "cost_usd": "dollars of the billed requests, each at its tier of the step's MODEL_RATES "
    "(null: no price)",
    "elapsed_s": "wall seconds from the upload until everything settled",
    "aws_calls": "AWS calls of the handlers evaluated against their role in cdk.out",
    "denied": "of those, denied (the handler got AccessDenied)",
    "denied_calls": 'the distinct denied calls: "function: action on resource"',
    "settled": "false when the run's bound passed with work in flight (exit 1)",
    "billed_requests": "model requests billed (all but 401, 429 and 529 answers)",
    "model_transport_errors": "of those, requests that failed in transport after they were "
    "sent (timed out client-side, connection lost, answer cut by the deadline): billed, retried",
    "overruns": "model-step attempts that ended past their Lambda deadline (a loaded machine)",
    "max_requests_per_key": "the most billed requests one record key got (<= max_attempts)",
    "max_attempts": "the step's attempt budget per key (MAX_ATTEMPTS in the template)",
    "kills": "invocations killed after their model request was sent, or partway through "
    "a batch results stream (--kill-rate)",
    "throttles": "SQS receives Lambda throttled, never invoked (--throttle-rate)",
    "redriven": "messages SQS moved by a redrive policy, all queues",
    "redriven_by_queue": "the same per queue (construct path): buffer -> redrive -> DLQ",
    "uncoded_dead_letters": "step dead letters without ERROR_CODE though the function ran",
    "unrun_dead_letters": "step dead letters whose every receive was throttled (no code)",
    "model_answer_ms": "wall ms from a model request to its answer: p50, p99, max",
    "run_timeout_s": "the bound the run had to settle in (derived from the work, or given)",
    # Message Batches delivery (issue 19).
    "delivery": "how the splitter sent the rows: realtime, batch or auto (--delivery)",
    "batches": "Message Batches created on the local model (with --provider bedrock: "
    "batch inference jobs on the local Bedrock control plane)",
    "batch_requests": "requests submitted in Message Batches or Bedrock jobs (resubmissions "
    "included)",
    "batch_create_kills": "invocations killed around a batch create (--batch-create-kill-rate), "
    "by point: before_create, after_create, before_batch_id_recorded",
    "batch_faults": "Message Batches faults injected: canceled, lost, broken_reads, "
    "failed_retrieves (--batch-canceled-rate, --batch-lost-rate, --batch-broken-read-rate)",
}


def to_json(result: RunResult) -> dict[str, Any]:
    """The ``--json`` object: the keys of ``JSON_FIELDS`` plus labels and context."""
    labels = {label: result.labels.get(label, 0) for label in LABEL_ORDER}
    labels.update({k: v for k, v in result.labels.items() if k not in labels})
    return {
        "rows": result.rows,
        "valid": result.valid,
        "invalid": result.invalid,
        "classified": result.classified,
        "failed": result.failed,
        "dlq": result.dlq,
        "model_requests": billed_model_requests(result),
        "http_requests": result.model_requests,
        "deliveries": result.deliveries,
        "labels": labels,
        "alerts": result.alerts,
        "lambda_retries": result.lambda_retries,
        "status": result.status,
        "upload_id": result.upload_id,
        "upload": result.upload,
        "deduplicated": result.deduplicated,
        "row_entries_sent": result.row_entries_sent,
        "split_runs": result.split_runs,
        "requests_per_row": result.requests_per_row,
        "rate_limited": result.rate_limited,
        "input_tokens": result.input_tokens,
        "output_tokens": result.output_tokens,
        "cache_creation_input_tokens": result.cache_creation_input_tokens,
        "cache_read_input_tokens": result.cache_read_input_tokens,
        "cache_writes": result.cache_writes,
        "cache_reads": result.cache_reads,
        "cost_usd": result.cost_usd,
        "elapsed_s": result.elapsed_s,
        "run_minutes": result.run_minutes,
        "rate_limit": result.rate_limit,
        "aws_calls": result.aws_calls,
        "denied": result.denied,
        "denied_calls": sorted(set(result.denials)),
        "settled": result.settled,
        "billed_requests": result.billed_requests,
        "model_transport_errors": result.model_transport_errors,
        "overruns": result.overruns,
        "max_requests_per_key": result.max_requests_per_key,
        "max_attempts": result.max_attempts,
        "kills": result.kills,
        "throttles": result.throttles,
        "redriven": result.redriven,
        "redriven_by_queue": dict(sorted(result.redriven_by_queue.items())),
        "uncoded_dead_letters": result.uncoded_dead_letters,
        "unrun_dead_letters": result.unrun_dead_letters,
        "model_answer_ms": result.model_answer_ms,
        "run_timeout_s": result.run_timeout_s,
        # Message Batches delivery (issue 19).
        "delivery": result.delivery,
        "batches": result.batches,
        "batch_requests": result.batch_requests,
        "batch_results": result.batch_results,
        "batch_create_kills": result.batch_create_kills,
        "batch_faults": result.batch_faults,
    }


def billed_model_requests(result: RunResult) -> int:
    """The upload's billed requests by the one counting rule (``result.upload``); without an
    upload item, the requests that reached the model."""
    if result.upload is None:
        return result.model_requests
    return int(result.upload["model_requests"])


def render_table(result: RunResult, checks: Sequence[Check], verbose: bool = False) -> str:
    """The human summary: counts with their meaning, then every invariant, then any denied
    AWS call. ``verbose`` (``--verbose``) adds the IAM detail: each function's grants the run
    never used and the conditions assumed to hold; default ``False``, one line of counts."""
    head = f"Prospect Uploader local run: {result.file} -> s3://{result.bucket}/{result.object_key}"
    status = result.status or "unknown"
    if result.reason:
        status += f" ({result.error_code or 'reason'}: {result.reason})"
    if result.upload is not None:
        # The viewer's and the mail's words for the upload, then the splitter's status.
        status = f"{result.upload['text']} (split {status})"
    lines = [head, f"upload {result.upload_id or '-'}: {status}", ""]
    if not result.settled:
        lines[-1:] = [
            f"NOT SETTLED: work was still in flight after {result.run_timeout_s:g} s; these "
            "are the counts so far",
            "",
        ]
    label_text = ", ".join(f"{label} {result.labels.get(label, 0)}" for label in LABEL_ORDER)
    faults = ", ".join(f"{k} x{v}" for k, v in sorted(result.model_outcomes.items()) if k != "200")
    rows: list[tuple[str, Any, str]] = [
        ("rows", result.rows, JSON_FIELDS["rows"]),
        ("valid", result.valid, JSON_FIELDS["valid"]),
        ("invalid", result.invalid, JSON_FIELDS["invalid"]),
        ("classified", result.classified, f"{JSON_FIELDS['classified']} ({label_text})"),
        ("failed", result.failed, JSON_FIELDS["failed"]),
        ("dlq", result.dlq, JSON_FIELDS["dlq"]),
        ("model requests", billed_model_requests(result), JSON_FIELDS["model_requests"]),
        (
            "http requests",
            result.model_requests,
            JSON_FIELDS["http_requests"] + (f" (failed: {faults})" if faults else ""),
        ),
        (
            "deliveries",
            result.deliveries,
            f"{JSON_FIELDS['deliveries']} ({result.duplicates} per event)",
        ),
        ("deduplicated", result.deduplicated, JSON_FIELDS["deduplicated"]),
        (
            "batches",
            result.batches,
            f"{JSON_FIELDS['batches']} ({result.batch_requests} requests, "
            f"{result.batch_billed} billed; delivery {result.delivery or '-'})",
        ),
        ("rate limited", result.rate_limited, JSON_FIELDS["rate_limited"]),
        (
            "tokens in/out",
            f"{result.input_tokens}/{result.output_tokens}",
            "billed input / output tokens",
        ),
        (
            "prompt cache",
            f"{result.cache_writes} writes / {result.cache_reads} reads",
            f"{result.cache_creation_input_tokens} tokens written, "
            f"{result.cache_read_input_tokens} read",
        ),
        (
            "cost",
            "unknown" if result.cost_usd is None else f"${result.cost_usd:.9f}",
            JSON_FIELDS["cost_usd"],
        ),
        (
            "elapsed",
            f"{result.elapsed_s:.1f} s",
            f"wall time from the upload until everything settled; {result.run_minutes:g} "
            f"minutes of the run's clock ({_run_minute(result)})"
            + (f" at {result.rate_limit} requests/minute" if result.rate_limit else "")
            + f"; bound {result.run_timeout_s:.0f} s",
        ),
        (
            "max per key",
            result.max_requests_per_key,
            f"{JSON_FIELDS['max_requests_per_key']}; max_attempts {result.max_attempts}",
        ),
        ("kills", result.kills, JSON_FIELDS["kills"]),
        ("throttles", result.throttles, JSON_FIELDS["throttles"]),
        (
            "redriven",
            result.redriven,
            JSON_FIELDS["redriven"]
            + (
                " ("
                + ", ".join(f"{q} {n}" for q, n in sorted(result.redriven_by_queue.items()))
                + ")"
                if result.redriven
                else ""
            ),
        ),
        ("lambda retries", result.lambda_retries, "async retries of all functions"),
        ("on-failure", result.on_failure_records, "Lambda on-failure records sent to the queue"),
        ("alerts", result.alerts, JSON_FIELDS["alerts"]),
        ("aws calls", result.aws_calls if result.iam_checked else None, JSON_FIELDS["aws_calls"]),
        ("denied", result.denied if result.iam_checked else None, JSON_FIELDS["denied"]),
    ]
    width = max(len(name) for name, _, _ in rows)
    for name, value, note in rows:
        shown = "-" if value is None else str(value)
        lines.append(f"  {name:<{width}}  {shown:>6}  {note}")
    lines += ["", "Invariants:"]
    for check in checks:
        mark = "ok  " if check.ok else "FAIL"
        lines.append(f"  {mark}  {check.name:<54} {check.values}")
        if not check.ok and check.hint:
            lines.append(f"        {check.hint}")
    lines += _iam_lines(result, verbose)
    for message in result.alert_messages:
        lines += ["", f"Alert: {message}"]
    return "\n".join(lines)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _run_minute(result: RunResult) -> str:
    """How long a minute of the run's clock lasted (``--backoff-minute-ms``)."""
    if not result.run_minutes:
        return "a minute lasts --backoff-minute-ms"
    return f"a minute lasts {result.elapsed_s / result.run_minutes:g} s of wall time"


def _iam_lines(result: RunResult, verbose: bool) -> list[str]:
    if not result.iam_checked:
        return []
    lines = []
    if result.denials:
        lines += ["", "Denied AWS calls (the role in cdk.out lacks the permission):"]
        shown = sorted(set(result.denials))
        lines += [f"  {denial}" for denial in shown[:20]]
        if len(shown) > 20:
            lines.append(f"  ... and {len(shown) - 20} more")
    if not verbose:
        unused = sum(len(grants) for grants in result.unused_grants.values())
        assumed = len(result.unevaluated_conditions)
        lines += [
            "",
            f"IAM: {_plural(unused, 'grant')} never used in this run and "
            f"{_plural(assumed, 'condition')} assumed to hold (--verbose lists them)",
        ]
    else:
        lines += ["", "Granted but never used in this run (per function; log delivery excluded):"]
        for function, grants in sorted(result.unused_grants.items()):
            lines.append(f"  {function}: " + ("none" if not grants else ""))
            lines += [f"    {grant}" for grant in grants]
    if result.provider == "bedrock":
        # Issue 22: the SDK's Bedrock calls, checked outside botocore (local_engine.bedrock_iam).
        routed = ", ".join(f"{r} x{n}" for r, n in sorted(result.bedrock_destinations.items()))
        lines += [
            "",
            f"Bedrock: {result.bedrock_invocations_checked} InvokeModel calls checked against "
            "the calling role (the inference profile, then the foundation model in the region "
            f"each was routed to: {routed or 'none'})",
        ]
    if verbose and result.unevaluated_conditions:
        lines += ["", "IAM conditions assumed to hold (not evaluated locally):"]
        lines += [f"  {condition}" for condition in result.unevaluated_conditions]
    return lines


def json_line(result: RunResult) -> str:
    """The JSON object on one line."""
    return json.dumps(to_json(result), separators=(",", ":"), sort_keys=False)
