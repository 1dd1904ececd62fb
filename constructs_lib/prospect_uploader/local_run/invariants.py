"""The run's invariants: what must hold whatever the duplicates and faults."""

from __future__ import annotations

from dataclasses import dataclass

from .results import RunResult


@dataclass(frozen=True)
class Check:
    """One invariant: ``name`` (the equation), the numbers, whether it holds, and why not."""

    name: str
    values: str
    ok: bool
    hint: str = ""


def check_invariants(result: RunResult) -> list[Check]:
    """Evaluate the invariants of a completed upload.

    - rows = valid + invalid (rows counted from the file, not from the splitter);
    - valid = classified + failed (every valid row ends labelled or recorded as failed);
    - without faults: failed = 0 and model_requests - rate_limited = valid (one billed
      request per row at any duplicates, whatever the rate limit's 429s);
    - with faults: model_requests - rate_limited <= attempts x valid (the step's
      MAX_ATTEMPTS; 429s are no attempt), and failed = dlq
      (no row both labelled and recorded, no failure record that names no row);
    - when IAM was checked: denied = 0 (every handler call allowed by its role).
    """
    checks = [
        Check(
            "rows = valid + invalid",
            f"{result.rows} = {result.valid} + {result.invalid}",
            result.rows == result.valid + result.invalid,
            "the splitter's summary disagrees with the file's row count",
        ),
        Check(
            "valid = classified + failed",
            f"{result.valid} = {result.classified} + {result.failed}",
            result.valid == result.classified + result.failed,
            _settle_hint(result),
        ),
    ]
    if result.iam_checked:
        checks.append(
            Check(
                "denied = 0",
                f"{result.denied} = 0",
                result.denied == 0,
                "a handler made an AWS call its role in cdk.out does not allow: "
                + "; ".join(sorted(set(result.denials))[:3]),
            )
        )
    if not result.faults_enabled:
        checks.append(
            Check(
                "failed = 0",
                f"{result.failed} = 0",
                result.failed == 0,
                "with no fault injected every valid row must be classified"
                + (" (the rate limit dead-lettered rows)" if result.rate_limited else ""),
            )
        )
        checks.append(
            Check(
                "model_requests - rate_limited = valid",
                f"{result.model_requests} - {result.rate_limited} = {result.valid}",
                result.model_requests - result.rate_limited == result.valid,
                "some row reached the model more than once, or never: idempotency did not hold,"
                " or a request timed out client-side after the model counted it (a loaded"
                " machine; raise --timeout-cap) and its transient retry was billed again",
            )
        )
    else:
        bound = (result.retry_attempts + 1) * result.valid
        billed = result.model_requests - result.rate_limited
        checks.append(
            Check(
                "model_requests - rate_limited <= attempts x valid",
                f"{result.model_requests} - {result.rate_limited} <= "
                f"{result.retry_attempts + 1} x {result.valid}",
                billed <= bound,
                "more model requests than Lambda's retries allow",
            )
        )
    checks.append(
        Check(
            "failed = dlq",
            f"{result.failed} = {result.dlq}",
            result.failed == result.dlq and result.unattributed == 0,
            _dlq_hint(result),
        )
    )
    return checks


def _settle_hint(result: RunResult) -> str:
    if result.unsettled:
        return f"{result.unsettled} valid row(s) neither labelled nor recorded as failed"
    return _dlq_hint(result)


def _dlq_hint(result: RunResult) -> str:
    parts = []
    if result.superseded:
        parts.append(f"{result.superseded} row(s) were labelled after a failure was recorded")
    if result.in_progress_exhausted:
        parts.append(
            f"{result.in_progress_exhausted} delivery(ies) ran out of retries on "
            "IdempotencyAlreadyInProgressError: raise --backoff-minute-ms above the longest "
            "attempt"
        )
    if result.unattributed:
        parts.append(f"{result.unattributed} failure record(s) name no row of this upload")
    if result.left_on_queue:
        parts.append(f"{result.left_on_queue} message(s) left on the failure queue")
    return "; ".join(parts)
