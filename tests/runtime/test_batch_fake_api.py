"""Issue 19: the Message Batches endpoints of the fake Messages API and of the local model,
driven by the real SDK over HTTP (create, retrieve, list, results, cancel)."""

from __future__ import annotations

import anthropic
import pytest

from constructs_lib.local_engine.local_model import LocalMessagesAPI
from tests.fakes import FakeMessagesAPI


def request(custom_id: str, text: str = "row") -> dict:
    return {
        "custom_id": custom_id,
        "params": {
            "model": "claude-haiku-5-5",
            "max_tokens": 16,
            # A one-word label: thinking off, as the reference classifier sends it (issue 32).
            "thinking": {"type": "disabled"},
            "messages": [{"role": "user", "content": text}],
        },
    }


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def api(clock):
    with FakeMessagesAPI(batch_delay=60, batch_clock=clock) as server:
        yield server


@pytest.fixture
def client(api) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="test", base_url=api.base_url, max_retries=0)


def test_a_batch_is_in_progress_until_its_delay_then_ends_with_every_result_type(
    api, client, clock
):
    api.batches.decide = lambda custom_id, params: custom_id.split("-")[0]
    ids = ["succeeded-1", "invalid_request_error-2", "api_error-3", "expired-4", "canceled-5"]

    batch = client.messages.batches.create(requests=[request(i) for i in ids])

    assert batch.type == "message_batch"
    assert batch.processing_status == "in_progress"
    assert batch.request_counts.processing == 5 and batch.results_url is None
    assert (batch.expires_at - batch.created_at).total_seconds() == 24 * 3600
    clock.now += 60
    ended = client.messages.batches.retrieve(batch.id)
    assert ended.processing_status == "ended" and ended.ended_at is not None
    counts = ended.request_counts
    assert (counts.succeeded, counts.errored, counts.expired, counts.canceled) == (1, 2, 1, 1)
    results = {line.custom_id: line.result for line in client.messages.batches.results(batch.id)}
    # The default model thinks first: the answer is its text block, selected by type.
    assert _text(results["succeeded-1"].message) == "warm"
    assert results["invalid_request_error-2"].error.error.type == "invalid_request_error"
    assert results["api_error-3"].error.error.type == "api_error"
    assert results["expired-4"].type == "expired"
    assert results["canceled-5"].type == "canceled"
    assert api.batches.billed == 1
    assert api.batches.billed_by_custom_id == {"succeeded-1": 1}


def test_list_pages_newest_first_with_after_id_before_id_and_limit(api, client):
    ids = [client.messages.batches.create(requests=[request("a")]).id for _ in range(5)]

    first = client.messages.batches.list(limit=2)
    assert [b.id for b in first.data] == [ids[4], ids[3]]
    assert first.has_more and first.last_id == ids[3]
    after = client.messages.batches.list(limit=2, after_id=ids[3])
    assert [b.id for b in after.data] == [ids[2], ids[1]]
    before = client.messages.batches.list(limit=2, before_id=ids[1])
    assert [b.id for b in before.data] == [ids[3], ids[2]]
    assert [b.id for b in client.messages.batches.list(limit=2)] == ids[::-1]  # auto-paging


def test_cancel_ends_an_open_batch_with_canceled_results_after_canceling(api, client, clock):
    api.batches.cancel_survivor_rate = 0.0
    batch = client.messages.batches.create(requests=[request("a"), request("b")])

    canceling = client.messages.batches.cancel(batch.id)

    assert canceling.cancel_initiated_at is not None
    assert canceling.processing_status == "canceling"
    clock.now += api.batches.cancel_delay_seconds
    ended = client.messages.batches.retrieve(batch.id)
    assert ended.processing_status == "ended"
    assert ended.request_counts.canceled == 2
    assert api.batches.billed == 0


def test_create_refuses_bad_custom_ids_duplicates_and_too_many_requests(api, client):
    with pytest.raises(anthropic.BadRequestError):
        client.messages.batches.create(requests=[request("has space")])
    with pytest.raises(anthropic.BadRequestError):
        client.messages.batches.create(requests=[request("a"), request("a")])
    with pytest.raises(anthropic.BadRequestError):
        client.messages.batches.create(requests=[request("x" * 65)])
    api.batches.max_requests = 2
    with pytest.raises(anthropic.APIStatusError) as too_large:
        client.messages.batches.create(requests=[request(f"r{n}") for n in range(3)])
    assert too_large.value.status_code == 413
    assert api.batches.batches == {}


def test_faults_around_create(api, client):
    api.batches.create_faults = [429, "disconnect", "disconnect_after_create", "error_after_create"]

    with pytest.raises(anthropic.RateLimitError):
        client.messages.batches.create(requests=[request("a")])
    with pytest.raises(anthropic.APIConnectionError):
        client.messages.batches.create(requests=[request("a")])
    assert api.batches.batches == {}
    with pytest.raises(anthropic.APIConnectionError):
        client.messages.batches.create(requests=[request("a")])
    with pytest.raises(anthropic.InternalServerError):
        client.messages.batches.create(requests=[request("a")])

    assert len(api.batches.batches) == 2  # the two that went through before the fault
    assert api.batches.create_calls == 4


def test_an_unknown_batch_is_a_404(client):
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve("msgbatch_nope")


def test_the_local_model_processes_batches_on_the_run_clock_with_injected_results(clock):
    with LocalMessagesAPI(
        run_clock=clock,
        batch_delay_seconds=120,
        batch_errored_rate=0.3,
        batch_expired_rate=0.3,
        seed=7,
    ) as local:
        client = anthropic.Anthropic(api_key="test", base_url=local.base_url, max_retries=0)
        batch = client.messages.batches.create(
            requests=[request(f"row{n}", f"text {n}") for n in range(40)]
        )
        clock.now += 119
        assert client.messages.batches.retrieve(batch.id).processing_status == "in_progress"
        clock.now += 1
        counts = client.messages.batches.retrieve(batch.id).request_counts
        results = list(client.messages.batches.results(batch.id))

    assert counts.succeeded + counts.errored + counts.expired == 40
    assert counts.errored > 0 and counts.expired > 0 and counts.succeeded > 0
    labels = {_text(r.result.message) for r in results if r.result.type == "succeeded"}
    assert labels <= {"hot", "warm", "cold"}
    assert local.batch_requests == counts.succeeded == local.batches.billed


def test_the_local_model_kills_around_create(clock):
    with LocalMessagesAPI(
        run_clock=clock, batch_create_faults=["disconnect_after_create"]
    ) as local:
        client = anthropic.Anthropic(api_key="test", base_url=local.base_url, max_retries=0)
        with pytest.raises(anthropic.APIConnectionError):
            client.messages.batches.create(requests=[request("a")])
        assert len(local.batches.batches) == 1


def test_results_read_again_stream_the_same_answers_billed_and_counted_once(clock):
    """A collection that resumes reads a batch's results again from the start: the local
    model answers (and counts the tokens of) each request once, and the second read gets
    the same Messages. The batch-billed tokens are also kept apart from the totals."""
    system = [{"type": "text", "text": "rubric " * 2000, "cache_control": {"type": "ephemeral"}}]
    requests = [request(f"row{n}", f"text {n}") for n in range(12)]
    for entry in requests:
        entry["params"]["system"] = system
    with LocalMessagesAPI(run_clock=clock, batch_delay_seconds=0) as local:
        client = anthropic.Anthropic(api_key="test", base_url=local.base_url, max_retries=0)
        batch = client.messages.batches.create(requests=requests)
        first = [line.model_dump() for line in client.messages.batches.results(batch.id)]
        tokens = dict(local.batch_tokens)
        second = [line.model_dump() for line in client.messages.batches.results(batch.id)]
        held = local.batches.batches[batch.id].requests

    # Each read has its own order (the API promises none); the answers are the same.
    assert sorted(second, key=str) == sorted(first, key=str) and len(first) == 12
    assert local.batch_requests == 12 == local.batches.billed
    assert local.batch_tokens == tokens and tokens["input_tokens"] > 0
    assert tokens["output_tokens"] == local.output_tokens
    # The 12 requests' system prompts (parsed apart from one body) are held as one value.
    assert len({id(params["system"]) for _, params in held}) == 1


def _text(message) -> str:
    """The answer of a message: its text blocks (a thinking block comes first)."""
    return "".join(block.text for block in message.content if block.type == "text")
