"""Model requests counted per record key where they are sent, and the kill after one."""

from __future__ import annotations

import json

import anthropic
import pytest

from constructs_lib.local_engine.lambda_faults import (
    RESULTS_KILL_MAX_LINES,
    FaultRates,
    LambdaFaults,
    LambdaKilled,
)
from constructs_lib.local_engine.local_model import LocalMessagesAPI, RateLimiter
from constructs_lib.local_engine.model_requests import ModelRequests, record_key_of

KEY = "[upload_id, row_number]"


def _ask(api: LocalMessagesAPI, text: str):
    client = anthropic.Anthropic(api_key="sk-local", base_url=api.base_url, max_retries=0)
    return client.messages.create(
        model="claude-haiku-5-5",
        max_tokens=16,
        # A one-word label: no thinking, which would use up 16 tokens (issue 32).
        thinking={"type": "disabled"},
        messages=[{"role": "user", "content": text}],
        timeout=5.0,
    )


def test_billed_requests_are_counted_per_key_and_429s_are_not_billed():
    # GIVEN a model that accepts one request a minute, and two keys asking
    limiter = RateLimiter(1, seconds_per_minute=60.0)
    with LocalMessagesAPI(rate_limit=limiter) as api, ModelRequests().installed() as requests:
        with requests.for_key("row 1"):
            _ask(api, "one")
            with pytest.raises(anthropic.RateLimitError):
                _ask(api, "one again")
        with requests.for_key("row 2"), pytest.raises(anthropic.RateLimitError):
            _ask(api, "two")
        received = api.request_count
    # THEN the 200 is billed to its key, the 429s to nobody, and answers were timed
    assert requests.billed == {"row 1": 1}
    assert requests.sent == 3 and requests.statuses == {"200": 1, "429": 2}
    assert requests.max_billed_per_key == 1
    assert set(requests.answer_ms()) == {"p50", "p99", "max"}
    assert received == 3  # the model saw all three


def test_a_request_outside_an_invocation_is_neither_counted_nor_killed():
    faults = LambdaFaults(FaultRates(kill_rate=1.0))
    with LocalMessagesAPI() as api, ModelRequests(faults).installed() as requests:
        assert _ask(api, "the test's own call").content[0].text
    assert requests.sent == 0 and faults.kills == 0


def test_a_kill_comes_after_the_model_counted_the_request_and_skips_except_exception():
    # GIVEN every request followed by a kill
    faults = LambdaFaults(FaultRates(kill_rate=1.0))
    handled = []
    with LocalMessagesAPI() as api, ModelRequests(faults).installed() as requests:
        # WHEN a handler that catches every Exception sends one
        with pytest.raises(LambdaKilled), requests.for_key("row 1"):
            try:
                _ask(api, "row one")
            except Exception as exc:  # what a handler's cleanup would do
                handled.append(exc)
        # THEN the model answered and billed it, and no handler code saw the answer
        assert api.request_count == 1 and api.outcomes["200"] == 1
    assert handled == [] and faults.kills == 1 and requests.billed == {"row 1": 1}


def _ended_batch(api: LocalMessagesAPI, requests: int) -> tuple[anthropic.Anthropic, str]:
    client = anthropic.Anthropic(api_key="sk-local", base_url=api.base_url, max_retries=0)
    params = {"model": "claude-haiku-5-5", "max_tokens": 8, "thinking": {"type": "disabled"}}
    batch = client.messages.batches.create(
        requests=[
            {
                "custom_id": f"row-{n}",
                "params": {**params, "messages": [{"role": "user", "content": f"row {n}"}]},
            }
            for n in range(requests)
        ]
    )
    assert client.messages.batches.retrieve(batch.id).processing_status == "ended"
    return client, batch.id


def test_a_kill_in_a_results_stream_strikes_after_its_drawn_lines_and_skips_except_exception():
    # GIVEN every results read killed partway, 300 results and a handler that catches
    # every Exception
    faults = LambdaFaults(FaultRates(kill_rate=1.0, seed=3))
    lines = LambdaFaults(FaultRates(kill_rate=1.0, seed=3)).kill_in_batch_results()
    assert lines is not None and 1 <= lines <= RESULTS_KILL_MAX_LINES
    read: list[str] = []
    handled = []
    with LocalMessagesAPI(batch_delay_seconds=0.0) as api:
        client, batch_id = _ended_batch(api, 300)
        requests = ModelRequests(faults)
        with requests.installed(), pytest.raises(LambdaKilled), requests.for_key(None):
            try:
                for line in client.messages.batches.results(batch_id):
                    read.append(line.custom_id)
            except Exception as exc:
                handled.append(exc)
        # THEN the handler read distinct results (in the API's own order, which is not the
        # submission's) up to the drawn line (the SDK's line decoder may still hold the
        # last), and the kill was counted once
        assert len(set(read)) == len(read) and set(read) <= {f"row-{n}" for n in range(300)}
        assert lines - 1 <= len(read) <= lines
        assert handled == [] and faults.kills == 1
        # AND a read outside an invocation (the next tick is a new one) reads them all
        assert len(list(client.messages.batches.results(batch_id))) == 300


def test_a_results_stream_shorter_than_its_kill_ends_and_counts_no_kill():
    # GIVEN a kill drawn after more lines than the stream holds (seed 3's first draw)
    faults = LambdaFaults(FaultRates(kill_rate=1.0, seed=3))
    drawn = LambdaFaults(FaultRates(kill_rate=1.0, seed=3)).kill_in_batch_results()
    assert drawn is not None and drawn > 1
    with LocalMessagesAPI(batch_delay_seconds=0.0) as api:
        client, batch_id = _ended_batch(api, 1)
        requests = ModelRequests(faults)
        with requests.installed(), requests.for_key(None):
            lines = list(client.messages.batches.results(batch_id))
    assert [line.custom_id for line in lines] == ["row-0"] and faults.kills == 0


def _sqs_event(detail, **extra):
    body = {"id": "e1", "detail-type": "Row", "source": "s", "detail": detail, **extra}
    return {"Records": [{"messageId": "m1", "body": json.dumps(body)}]}


def test_the_record_key_follows_the_model_steps_key():
    key = record_key_of(_sqs_event({"upload_id": "u", "row_number": 1, "notes": "a"}), KEY)
    # Other fields, the event id, 1 vs 1.0 and NFC vs NFD spellings make no other key ...
    assert key == record_key_of(_sqs_event({"upload_id": "u", "row_number": 1.0}), KEY)
    nfc = record_key_of(_sqs_event({"upload_id": "caf\u00e9", "row_number": 1}), KEY)
    assert nfc == record_key_of(_sqs_event({"upload_id": "cafe\u0301", "row_number": 1}), KEY)
    assert key == record_key_of(
        {"id": "e2", "detail": {"upload_id": "u", "row_number": 1, "notes": "b"}}, KEY
    )
    # ... an operator's retry markers and another row do
    assert key != record_key_of(
        _sqs_event({"upload_id": "u", "row_number": 1, "replay_generation": 1}), KEY
    )
    assert key != record_key_of(
        _sqs_event({"upload_id": "u", "row_number": 1}, dead_letter={"id": "f" * 64}), KEY
    )
    assert key != record_key_of(_sqs_event({"upload_id": "u", "row_number": 2}), KEY)
    # A batch of several records, or no detail, has no single key
    two = {"Records": _sqs_event({})["Records"] * 2}
    assert record_key_of(two, KEY) is None and record_key_of({"x": 1}, KEY) is None


def test_an_answer_cut_while_its_body_streams_is_a_transport_error_counted_once():
    # GIVEN a model whose first answer sends its headers at once and then its body in pieces
    # 60 s apart (the wait ends when the fake stops), and a client that waits at most 1.5 s for
    # a read (as the model call's deadline cuts a late answer): the headers have all that
    # time, and the body's next piece never comes within it, however loaded the machine
    from constructs_lib.testing import FakeMessagesAPI, Reply

    with (
        FakeMessagesAPI([Reply(chunks=3, chunk_delay=60.0), 200]) as api,
        ModelRequests().installed() as requests,
    ):
        client = anthropic.Anthropic(api_key="sk-local", base_url=api.base_url, max_retries=0)
        ask = {"model": "claude-haiku-5-5", "max_tokens": 8, "messages": [{"role": "user"}]}
        ask["messages"][0]["content"] = "row one"
        with requests.for_key("row 1"):
            # WHEN the first answer is cut after its headers, and the retry is answered whole
            with pytest.raises(anthropic.APITimeoutError):
                client.messages.create(**ask, timeout=1.5)
            client.messages.create(**ask, timeout=5.0)
    # THEN both were billed to the key, and the cut one alone counts as failed in transport
    assert requests.billed == {"row 1": 2} and requests.statuses == {"200": 2}
    assert requests.transport_errors == 1
