"""The invariants module on results built by hand: each new check fails, with its hint, on
exactly the result that breaks it."""

from __future__ import annotations

from dataclasses import replace

from constructs_lib.prospect_uploader.local_run import RunResult, check_invariants


def _healthy(**changes) -> RunResult:
    base = RunResult(
        file="rows.csv",
        object_key="rows.csv",
        rows=10,
        valid=10,
        classified=8,
        failed=2,
        dlq=2,
        faults_enabled=True,
        retry_attempts=2,
        model_requests=14,
        billed_requests=13,
        max_requests_per_key=3,
        redriven_by_queue={"Classify/BufferQueue": 1, "Classify/RedriveQueue": 0},
    )
    return replace(base, **changes)


def _failing(result: RunResult) -> dict[str, str]:
    return {check.name: check.hint for check in check_invariants(result) if not check.ok}


def test_a_healthy_faulty_run_passes_every_check():
    assert _failing(_healthy()) == {}
    assert _healthy().redriven == 1 and _healthy().max_attempts == 3


def test_a_key_billed_beyond_its_budget_fails():
    failing = _failing(_healthy(max_requests_per_key=4))
    assert list(failing) == ["max_requests_per_key <= MAX_ATTEMPTS"]
    assert "counted per message" in failing["max_requests_per_key <= MAX_ATTEMPTS"]


def test_an_uncoded_dead_letter_fails_unless_its_function_never_ran():
    assert _failing(_healthy(unrun_dead_letters=3)) == {}
    failing = _failing(_healthy(uncoded_dead_letters=1, unrun_dead_letters=3))
    hint = failing["uncoded step dead letters = 0"]
    assert "function ran" in hint and "3 more came from receives that were all throttled" in hint


def test_a_failure_recorded_without_a_code_fails():
    assert list(_failing(_healthy(uncoded_failures=1))) == ["failures without a code = 0"]


def test_without_faults_throttles_still_mean_one_request_per_row():
    # A throttle is not an attempt: with throttles only, every row costs one request.
    calm = _healthy(
        faults_enabled=False, classified=10, failed=0, dlq=0, model_requests=10, throttles=40
    )
    assert _failing(calm) == {}
    twice = _failing(replace(calm, model_requests=11))
    assert list(twice) == ["http_requests - rate_limited = valid"]


def test_more_billed_requests_than_the_budgets_allow_fails():
    failing = _failing(_healthy(billed_requests=31))
    assert "billed <= MAX_ATTEMPTS x valid" in failing


def test_late_attempts_are_the_only_extra_requests_allowed():
    # GIVEN a run without faults in which two requests failed in transport after the model
    # counted them (a loaded machine answers late): each was billed, and its retry too
    calm = _healthy(
        faults_enabled=False, classified=10, failed=0, dlq=0, model_requests=12, throttles=40
    )
    late = replace(calm, model_transport_errors=2)
    # THEN the bounds that hold under any timing pass, and the exact checks are not made
    assert _failing(late) == {}
    assert {check.name for check in check_invariants(late)} >= {
        "failed x MAX_ATTEMPTS <= late attempts",
        "http_requests - rate_limited <= valid + late attempts",
    }
    # BUT a request beyond them is a broken key, and so is a row failed with attempts left
    assert list(_failing(replace(late, model_requests=13))) == [
        "http_requests - rate_limited <= valid + late attempts"
    ]
    failed = replace(late, classified=9, failed=1, dlq=1)
    assert list(_failing(failed)) == ["failed x MAX_ATTEMPTS <= late attempts"]
    assert _failing(replace(failed, model_transport_errors=2, overruns=1)) == {}
