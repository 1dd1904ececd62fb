"""Billed-request counts of local runs that hold under any timing (issue 35).

On a loaded machine an attempt can end late: its model request fails in transport (the
answer arrives after the call's 5 s deadline, though the local model counted it), or the
whole attempt overruns its Lambda deadline and a copy takes its expired lock. Either way
the request was billed, and the retry or the copy bills again; only the machine's speed
decides how often. So a test asserts an exact count only when no attempt was late, and
otherwise the bound that always holds: at most one more billed request per late attempt.
Throttles, duplicates and redeliveries add nothing in either case.
"""

from __future__ import annotations

from typing import Any

from constructs_lib.prospect_uploader.local_run import RunResult


def assert_billed(count: int, expected: int, late: int, what: str = "billed requests") -> None:
    """``count`` is ``expected`` when no attempt was late (``late`` = 0), else between
    ``expected`` and ``expected + late``."""
    if late == 0:
        assert count == expected, f"{what}: {count}, expected exactly {expected}"
    else:
        assert expected <= count <= expected + late, (
            f"{what}: {count}, expected {expected} plus at most {late} late attempts"
        )


def assert_one_billed_request_per_row(result: RunResult) -> None:
    """A run without injected faults: every valid row classified with one billed request,
    exactly when no attempt was late; else each extra billed request is a late attempt's,
    and a row failed only if every one of its attempts was late."""
    late = result.late_attempts
    assert result.classified + result.failed == result.valid, result
    assert result.failed * result.max_attempts <= late, result
    # Where requests are sent (a throttle or a duplicate that reached the model would add
    # one) and where the model counts them.
    assert_billed(result.billed_requests, result.classified, late, "billed requests")
    billed = result.model_requests - result.rate_limited
    assert_billed(billed, result.classified, late, "http_requests - rate_limited")
    assert_billed(result.max_requests_per_key, min(1, result.valid), late, "most billed per key")


def late_attempts(engine: Any) -> int:
    """A :class:`~constructs_lib.local_engine.engine.LocalEngine`'s late attempts so far:
    model requests that failed in transport, and model-step attempts past their deadline."""
    steps = engine.assembly.model_step_functions()
    overruns = sum(engine.functions[spec.logical_id].stats.overruns for spec in steps)
    return int(engine.model_requests.transport_errors) + overruns
