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
    - valid = classified + failed (every valid row ends labelled or recorded as failed), and
      every recorded failure has an error code;
    - max_requests_per_key <= MAX_ATTEMPTS: no record key got more billed model requests
      than the step's budget, whatever the copies, kills, throttles and redrives;
    - no dead letter of the step without an ERROR_CODE, unless the function could not run at
      all with it (every receive throttled);
    - without faults (throttles are none: a throttle is not an attempt): failed = 0 and
      http_requests - rate_limited = valid (one billed request per row at any duplicates,
      whatever the rate limit's 429s). Timing alone can add a request that failed in
      transport (timed out client-side after the model counted it; its retry is billed
      again; or an attempt overran its deadline and a copy took its expired lock): with
      ``late_attempts`` T > 0 (requests that failed in transport plus overruns) the checks
      are the bounds that hold under any timing, http_requests - rate_limited <= valid + T
      and failed x MAX_ATTEMPTS <= T (a row fails only when every attempt was late);
    - with faults or kills: billed <= MAX_ATTEMPTS x valid, and failed = dlq (no row both
      labelled and recorded, no failure record that names no row);
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
        Check(
            "failures without a code = 0",
            f"{result.uncoded_failures} = 0",
            result.uncoded_failures == 0,
            "a row's failure record has no error code: FailuresTable cannot say why it failed",
        ),
        Check(
            "max_requests_per_key <= MAX_ATTEMPTS",
            f"{result.max_requests_per_key} <= {result.max_attempts}",
            result.max_requests_per_key <= result.max_attempts,
            "a record key was billed more requests than its attempt budget: the budget is "
            "counted per message or per copy, not on the key's record",
        ),
        Check(
            "uncoded step dead letters = 0",
            f"{result.uncoded_dead_letters} = 0",
            result.uncoded_dead_letters == 0,
            "a message reached the step's DLQ without an ERROR_CODE although the function ran "
            "with it (a redrive of a row the step never dead-lettered itself)"
            + (
                f"; {result.unrun_dead_letters} more came from receives that were all "
                "throttled, which is allowed"
                if result.unrun_dead_letters
                else ""
            ),
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
        checks.extend(_one_request_per_row(result))
    else:
        bound = result.max_attempts * result.valid
        checks.append(
            Check(
                "billed <= MAX_ATTEMPTS x valid",
                f"{result.billed_requests} <= {result.max_attempts} x {result.valid}",
                result.billed_requests <= bound,
                "more billed model requests than the rows' attempt budgets allow",
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


def _one_request_per_row(result: RunResult) -> list[Check]:
    """With no fault injected: every row classified with one billed request, exactly when no
    request failed in transport, else within the bounds that hold under any timing."""
    late = result.late_attempts
    rate_limited = " (the rate limit dead-lettered rows)" if result.rate_limited else ""
    billed = result.model_requests - result.rate_limited
    if late == 0:
        return [
            Check(
                "failed = 0",
                f"{result.failed} = 0",
                result.failed == 0,
                "with no fault injected every valid row must be classified" + rate_limited,
            ),
            Check(
                "http_requests - rate_limited = valid",
                f"{result.model_requests} - {result.rate_limited} = {result.valid}",
                billed == result.valid,
                "some row reached the model more than once, or never: idempotency did not hold",
            ),
        ]
    return [
        Check(
            "failed x MAX_ATTEMPTS <= late attempts",
            f"{result.failed} x {result.max_attempts} <= {late}",
            result.failed * result.max_attempts <= late,
            "with no fault injected a row may fail only when every attempt was late" + rate_limited,
        ),
        Check(
            "http_requests - rate_limited <= valid + late attempts",
            f"{result.model_requests} - {result.rate_limited} <= {result.valid} + {late}",
            billed <= result.valid + late,
            "some row reached the model more than once beyond the late attempts (requests "
            "that failed in transport, attempts past their deadline: a loaded machine; "
            "--timeout-cap gives them longer): idempotency did not hold",
        ),
    ]


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
