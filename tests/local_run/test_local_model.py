"""The shipped local Messages API: deterministic answers, seeded faults, real SDK over HTTP."""

from __future__ import annotations

import hashlib
import threading

import anthropic
import pytest

from constructs_lib.local_engine.local_model import (
    TIMEOUT,
    LocalMessagesAPI,
    RateLimiter,
    fault_plan,
    label_for,
)


def _ask(api: LocalMessagesAPI, text: str, timeout: float = 5.0):
    client = anthropic.Anthropic(api_key="sk-local", base_url=api.base_url, max_retries=0)
    return _create(client, text, timeout)


def _create(client: anthropic.Anthropic, text: str, timeout: float):
    return client.messages.create(
        model="claude-haiku-5-5",
        max_tokens=16,
        # A one-word label: no thinking, which would use up 16 tokens (issue 32).
        thinking={"type": "disabled"},
        messages=[{"role": "user", "content": text}],
        timeout=timeout,
    )


def test_answers_are_a_stable_label_with_a_request_id():
    with LocalMessagesAPI() as api:
        first = _ask(api, "prospect one")
        again = _ask(api, "prospect one")
        assert first.content[0].text == again.content[0].text == label_for("prospect one")
        assert first._request_id and first._request_id != again._request_id
        assert api.request_count == 2 and api.outcomes["200"] == 2


def test_labels_cover_all_three_over_many_rows():
    assert {label_for(f"row {n}") for n in range(50)} == {"hot", "warm", "cold"}


def test_fault_plans_are_seeded_per_content():
    plans = [fault_plan(f"{n:064x}", 0.3, seed=7) for n in range(400)]
    assert plans == [fault_plan(f"{n:064x}", 0.3, seed=7) for n in range(400)]
    faulty = [plan for plan in plans if plan.kind != "healthy"]
    assert 0.2 < len(faulty) / len(plans) < 0.4
    assert {plan.kind for plan in faulty} == {"transient", "persistent", "invalid"}
    for plan in faulty:
        if plan.kind == "transient":
            assert 1 <= len(plan.faults) <= 2 and list(plan.faults).count(TIMEOUT) <= 1
            assert plan.outcome(len(plan.faults)) == 200
        if plan.kind == "invalid":
            assert {plan.outcome(i) for i in range(3)} == {400}
    assert all(plan.kind == "healthy" for plan in (fault_plan("x", 0.0, 1), fault_plan("y", 0, 2)))


def test_injected_errors_and_timeouts_reach_the_sdk():
    # A held request waits until the server stops (long after the client gave up), so the
    # client's timeout fires before the connection closes, however late its thread runs.
    with LocalMessagesAPI(fault_rate=1.0, seed=3, timeout_hold_seconds=60) as api:
        held = threading.Semaphore(0)
        hold = api.hold

        def counted_hold() -> None:
            held.release()
            hold()

        api.hold = counted_hold  # type: ignore[method-assign]
        client = anthropic.Anthropic(api_key="sk-local", base_url=api.base_url, max_retries=0)
        planned, got = [], []
        for n in range(40):
            text = f"row {n}"
            # Each row's first request: its plan's first outcome. Only a held request gets
            # the short timeout; an error answer has all the time a loaded machine needs.
            outcome = api.plan_of(hashlib.sha256(text.encode()).hexdigest()).outcome(0)
            planned.append(outcome)
            try:
                _create(client, text, timeout=0.1 if outcome == TIMEOUT else 5.0)
            except anthropic.APITimeoutError:
                got.append(TIMEOUT)
            except anthropic.APIStatusError as exc:
                got.append(exc.status_code)
                assert exc.request_id
        assert got == planned
        assert {400, 429, 500, 529, TIMEOUT} <= set(got)
        # A held request is counted when the server reads it, which may come after the
        # client gave up: wait until every one of them is held.
        assert all(held.acquire(timeout=10) for _ in range(planned.count(TIMEOUT)))
        assert api.request_count == 40


@pytest.mark.parametrize("rate", [-0.1, 1.5])
def test_fault_rate_is_a_fraction(rate):
    with pytest.raises(ValueError):
        LocalMessagesAPI(fault_rate=rate)


def test_the_rate_limiter_admits_rpm_per_run_minute_and_names_the_wait():
    limiter = RateLimiter(per_minute=2, seconds_per_minute=0.5)  # a minute lasts 0.5 s
    assert limiter.admit(now=10.0) is None
    assert limiter.admit(now=10.1) is None
    wait = limiter.admit(now=10.2)  # the first leaves the window at 10.5: 0.3 s = 36 s
    assert wait == pytest.approx(36.0)
    assert limiter.admit(now=10.5) is None  # a refused request did not use quota
    assert limiter.admit(now=10.55) is not None
    assert limiter.admit(now=10.61) is None


def test_over_the_limit_the_sdk_gets_429_with_retry_after_and_no_tokens_billed():
    limiter = RateLimiter(per_minute=2, seconds_per_minute=60.0)
    with LocalMessagesAPI(rate_limit=limiter) as api:
        _ask(api, "one")
        _ask(api, "two")
        with pytest.raises(anthropic.RateLimitError) as raised:
            _ask(api, "three")
        headers = raised.value.response.headers
        assert 1 <= int(headers["retry-after"]) <= 60
        assert 1 <= int(headers["retry-after-ms"]) <= 60_000
        assert raised.value.request_id
        assert api.rate_limited == 1 and api.outcomes["429"] == 1 and api.request_count == 3
        assert api.output_tokens == 2 and api.input_tokens > 0
