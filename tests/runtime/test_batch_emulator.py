"""Issue 33: the Message Batches emulator is at least as strict as the documented API.

The real SDK over HTTP against the fake Messages API's batch endpoints: results in a new
order on every read, the nine errored types, ``canceling`` and "succeeded despite cancel",
``request_counts`` that progress, the 29-day archive, delete (only once ended, 404 after),
auth and Workspaces, ``list`` newest first with a consistency lag, and injected 429/500/529
and dropped connections on every call."""

from __future__ import annotations

import anthropic
import httpx2
import pytest

from constructs_lib.local_engine.message_batches import ERROR_TYPES
from tests.fakes import FakeMessagesAPI

from .test_batch_fake_api import Clock, request

KEY = "sk-ant-test-key"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def api(clock):
    with FakeMessagesAPI(batch_delay=100, batch_clock=clock) as server:
        yield server


def client_for(api, key: str = KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=key, base_url=api.base_url, max_retries=0)


@pytest.fixture
def client(api) -> anthropic.Anthropic:
    return client_for(api)


def ended(api, client, clock, count: int = 3):
    """A batch of ``count`` requests, ended."""
    batch = client.messages.batches.create(requests=[request(f"r{n}") for n in range(count)])
    clock.now += 100
    assert client.messages.batches.retrieve(batch.id).processing_status == "ended"
    return batch


def test_every_read_of_the_results_has_its_own_order_and_the_same_results(api, client, clock):
    batch = ended(api, client, clock, 30)

    reads = [[line.custom_id for line in client.messages.batches.results(batch.id)] for _ in "ab"]

    assert reads[0] != reads[1], "a re-read in the same order is kinder than the API"
    assert sorted(reads[0]) == sorted(reads[1]) == sorted(f"r{n}" for n in range(30))
    assert reads[0] != [f"r{n}" for n in range(30)], "request order is not promised"


def test_all_nine_errored_types_reach_the_sdk(api, client, clock):
    api.batches.decide = lambda custom_id, params: custom_id.removeprefix("e-")
    ids = [f"e-{error_type}" for error_type in ERROR_TYPES]
    batch = client.messages.batches.create(requests=[request(i) for i in ids])
    clock.now += 100

    results = {line.custom_id: line.result for line in client.messages.batches.results(batch.id)}

    assert len(ERROR_TYPES) == 9
    assert {r.type for r in results.values()} == {"errored"}
    expected = dict(zip(ids, ERROR_TYPES, strict=True))
    assert {i: r.error.error.type for i, r in results.items()} == expected
    assert client.messages.batches.retrieve(batch.id).request_counts.errored == 9
    assert api.batches.billed == 0


def test_request_counts_progress_while_the_batch_is_in_progress(api, client, clock):
    batch = client.messages.batches.create(requests=[request(f"r{n}") for n in range(40)])

    clock.now += 50
    middle = client.messages.batches.retrieve(batch.id)

    counts = middle.request_counts
    assert middle.processing_status == "in_progress"
    assert 0 < counts.succeeded < 40 and counts.processing == 40 - counts.succeeded
    assert api.batches.billed == counts.succeeded
    early = httpx2.get(
        f"{api.base_url}/v1/messages/batches/{batch.id}/results",
        headers={"x-api-key": KEY},
    )
    assert early.status_code == 404  # no results before the end


def test_a_cancel_goes_through_canceling_and_some_requests_succeed_despite_it(api, client, clock):
    api.batches.cancel_survivor_rate = 0.5
    batch = client.messages.batches.create(requests=[request(f"r{n}") for n in range(40)])
    clock.now += 10
    done_before = client.messages.batches.retrieve(batch.id).request_counts.succeeded

    assert client.messages.batches.cancel(batch.id).processing_status == "canceling"
    clock.now += api.batches.cancel_delay_seconds - 1
    assert client.messages.batches.retrieve(batch.id).processing_status == "canceling"
    clock.now += 1
    final = client.messages.batches.retrieve(batch.id)

    counts = final.request_counts
    assert final.processing_status == "ended" and final.cancel_initiated_at is not None
    assert counts.canceled > 0 and counts.succeeded > done_before
    assert counts.canceled + counts.succeeded == 40
    kinds = {line.custom_id: line.result.type for line in client.messages.batches.results(batch.id)}
    assert sum(kind == "succeeded" for kind in kinds.values()) == counts.succeeded


def test_results_are_archived_29_days_after_creation(api, client, clock):
    batch = ended(api, client, clock)
    assert len(list(client.messages.batches.results(batch.id))) == 3

    clock.now += 29 * 86_400

    archived = client.messages.batches.retrieve(batch.id)
    assert archived.archived_at is not None
    with pytest.raises(anthropic.NotFoundError):
        list(client.messages.batches.results(batch.id))


def test_delete_needs_an_ended_batch_and_then_every_call_is_a_404(api, client, clock):
    batch = client.messages.batches.create(requests=[request("a")])
    with pytest.raises(anthropic.BadRequestError):
        client.messages.batches.delete(batch.id)
    clock.now += 100

    deleted = client.messages.batches.delete(batch.id)

    assert (deleted.id, deleted.type) == (batch.id, "message_batch_deleted")
    for call in (
        client.messages.batches.retrieve,
        client.messages.batches.delete,
        client.messages.batches.cancel,
        lambda batch_id: list(client.messages.batches.results(batch_id)),
    ):
        with pytest.raises(anthropic.NotFoundError):
            call(batch.id)
    assert batch.id not in [b.id for b in client.messages.batches.list()]


def test_a_batch_is_seen_by_the_keys_of_its_workspace_only(api, client, clock):
    batch = ended(api, client, clock)
    other = client_for(api, "sk-ant-other-workspace")
    api.batches.workspaces["sk-ant-other-workspace"] = "wrkspc_other"

    with pytest.raises(anthropic.NotFoundError):
        other.messages.batches.retrieve(batch.id)
    assert list(other.messages.batches.list()) == []

    api.batches.workspaces[KEY] = "wrkspc_moved"  # the key moved: its batches vanish
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve(batch.id)


def test_a_revoked_or_missing_key_is_a_401(api, client):
    api.batches.revoked_keys.add(KEY)
    with pytest.raises(anthropic.AuthenticationError):
        client.messages.batches.list()
    response = httpx2.get(f"{api.base_url}/v1/messages/batches")
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"


def test_list_is_newest_first_and_lags_behind_creates(api, client, clock):
    api.batches.list_lag_seconds = 30
    first = client.messages.batches.create(requests=[request("a")])
    clock.now += 10
    second = client.messages.batches.create(requests=[request("a")])

    assert [b.id for b in client.messages.batches.list()] == []
    clock.now += 25
    assert [b.id for b in client.messages.batches.list()] == [first.id]
    clock.now += 10
    page = client.messages.batches.list(limit=1)
    assert [b.id for b in page.data] == [second.id]
    assert (page.has_more, page.first_id, page.last_id) == (True, second.id, second.id)


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (429, anthropic.RateLimitError),
        (500, anthropic.InternalServerError),
        (529, anthropic.InternalServerError),
    ],
)
def test_faults_are_injected_into_every_call(api, client, clock, status, error):
    batch = ended(api, client, clock)
    calls = {
        "create": lambda: client.messages.batches.create(requests=[request("x")]),
        "retrieve": lambda: client.messages.batches.retrieve(batch.id),
        "list": lambda: client.messages.batches.list(),
        "results": lambda: list(client.messages.batches.results(batch.id)),
        "delete": lambda: client.messages.batches.delete(batch.id),
    }
    for operation, call in calls.items():
        api.batches.faults[operation] = [status]
        with pytest.raises(error) as raised:
            call()
        assert raised.value.status_code == status
        if status in (429, 529):
            assert raised.value.response.headers["retry-after"]
        call()  # the fault is consumed: the next call goes through


def test_a_dropped_connection_and_a_broken_results_stream(api, client, clock):
    batch = ended(api, client, clock, 10)
    api.batches.faults["retrieve"] = ["disconnect"]
    with pytest.raises(anthropic.APIConnectionError):
        client.messages.batches.retrieve(batch.id)
    api.batches.faults["results"] = ["drop_after:4"]
    read: list[str] = []
    with pytest.raises(Exception):  # noqa: B017 (the SDK's stream error, whatever its class)
        for line in client.messages.batches.results(batch.id):
            read.append(line.custom_id)
    assert 0 < len(read) <= 4  # the SDK may drop the line the break cut into


def test_a_fault_hook_decides_per_call(api, client, clock):
    batch = ended(api, client, clock)
    seen: list[tuple[str, str | None]] = []

    def hook(operation: str, batch_id: str | None):
        seen.append((operation, batch_id))
        return 529 if operation == "retrieve" else None

    api.batches.fault_hook = hook
    with pytest.raises(anthropic.InternalServerError):
        client.messages.batches.retrieve(batch.id)
    assert ("retrieve", batch.id) in seen
