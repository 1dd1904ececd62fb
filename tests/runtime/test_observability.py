"""Powertools EMF metrics, no warnings: what a request cost is one line written as soon as it is
answered or fails (issue 31: a killed delivery still counts it), the rest one line at the end
of the delivery."""

from __future__ import annotations

import json
import warnings

import pytest

from .conftest import FakeLambdaContext, make_event, prospect_detail


def _emf_metrics(out: str) -> list[dict[str, list[float]]]:
    found = []
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        document = json.loads(line)
        if "_aws" not in document:
            continue
        names = [m["Name"] for d in document["_aws"]["CloudWatchMetrics"] for m in d["Metrics"]]
        assert document["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "IdempotentModelStepTest"
        found.append({name: document[name] for name in names})
    return found


def test_metrics_for_request_duplicate_and_failure(make_step, fake_api, capsys):
    fake_api.script = [200, 400]
    step = make_step()
    with warnings.catch_warnings():
        # Any Powertools warning (empty flush, missing context) fails the test. Not a
        # ResourceWarning: the collector may close a socket an earlier test of this worker
        # left open (a model client dropped with a keep-alive connection to its fake) in the
        # middle of this block, and "error" turned its warning into an unraisable exception
        # here, in a test that has no socket of its own to leak.
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", ResourceWarning)
        step.handle(make_event(), FakeLambdaContext())
        step.handle(make_event(), FakeLambdaContext())
        step.handle(make_event(prospect_detail(row_number=9)), FakeLambdaContext())

    # The dead letter's count is its own document, written the moment it is won (issue 15.12),
    # and so is each request's cost, written when it is answered (issue 31). Only the answered
    # request reports tokens (the fake API's usage: 12 in, and 3 out after the default model's
    # thinking tokens, which are output too).
    output = float(fake_api.answered[0]["usage"]["output_tokens"])
    assert output > 3
    assert _emf_metrics(capsys.readouterr().out) == [
        {"ModelRequests": [1.0], "InputTokens": [12.0], "OutputTokens": [output]},
        {"DuplicatesSuppressed": [1.0]},
        {"ModelRequests": [1.0]},
        {"NonRetryableFailures": [1.0]},
    ]


def test_metrics_for_transient_failure(make_step, fake_api, capsys):
    fake_api.script = [500, 529]
    for row in (1, 2):
        with pytest.raises(Exception):  # noqa: B017 (InternalServerError, OverloadedError)
            make_step().handle(make_event(prospect_detail(row_number=row)), FakeLambdaContext())

    # A rate-limit answer (429/529) is counted apart from model requests: it is not billed.
    assert _emf_metrics(capsys.readouterr().out) == [
        {"ModelRequests": [1.0]},
        {"TransientFailures": [1.0]},
        {"RateLimited": [1.0]},
        {"TransientFailures": [1.0]},
    ]


def test_non_retryable_failures_counted_only_once_the_dead_letter_is_sent(
    make_step, fake_api, model_env, monkeypatch, capsys
):
    monkeypatch.setenv(
        "DEAD_LETTER_QUEUE_URL", "https://sqs.us-east-1.amazonaws.com/123456789012/missing"
    )
    fake_api.script = [400]
    with pytest.raises(Exception):  # noqa: B017 (DeadLetterError)
        make_step().handle(make_event(), FakeLambdaContext())
    monkeypatch.setenv("DEAD_LETTER_QUEUE_URL", model_env.queue_url)
    make_step().handle(make_event(), FakeLambdaContext())
    make_step().handle(make_event(), FakeLambdaContext())

    # A DLQ that does not exist is the deployment's fault, not a blip (issue 36).
    assert _emf_metrics(capsys.readouterr().out) == [
        {"ModelRequests": [1.0]},
        {"ConfigurationErrors": [1.0]},
        {"NonRetryableFailures": [1.0]},
        {"DuplicatesSuppressed": [1.0]},
    ]
