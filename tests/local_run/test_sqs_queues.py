"""Mapped SQS queues on the compressed clock: delays, visibility, redrive, the concurrency
cap, and interception of a real boto3 client's calls."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from constructs_lib.local_engine.sqs_queues import LocalQueues
from tests.local_run.local_queues import MINUTE, make_poller, make_queue


def _receive_when_visible(queue, within: float) -> tuple[dict, float]:
    """The first message a receive returns, polling for at most ``within`` real seconds, and
    the time.monotonic() after the receive that returned it."""
    deadline = time.monotonic() + within
    while True:
        taken, _ = queue.receive(1)
        received = time.monotonic()
        if taken:
            return taken[0], received
        assert received < deadline, f"nothing visible within {within} s"
        time.sleep(0.01)


def test_delay_and_visibility_run_on_the_compressed_clock(clock):
    # An hour in flight (12 s locally): long past any pause between two calls here.
    queue = make_queue(clock, "buffer", visibility_timeout=3600)
    sent = time.monotonic()
    queue.send("a", delay_seconds=120)  # two minutes: 0.4 s locally, not 120 s
    # Received as soon as it is visible (the first receive comes right after the send): never
    # before its delay on the run's clock however slow the machine, and within seconds.
    message, received = _receive_when_visible(queue, within=10)
    assert received - sent >= 2 * MINUTE - 1e-6
    assert message["Attributes"]["ApproximateReceiveCount"] == "1"
    assert queue.receive(1)[0] == []  # in flight
    queue.change_visibility(message["ReceiptHandle"], 0)
    (again,), _ = queue.receive(1)
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
    queue.delete(again["ReceiptHandle"])
    assert len(queue) == 0


def test_a_message_received_max_receive_count_times_moves_to_the_dead_letter_queue(clock):
    dlq = make_queue(clock, "dlq")
    queue = make_queue(clock, "buffer", visibility_timeout=0, max_receive_count=2)
    queue.dead_letter = dlq
    queue.send("poison", attributes={"attempts": {"DataType": "Number", "StringValue": "1"}})
    assert len(queue.receive(1)[0]) == 1
    assert len(queue.receive(1)[0]) == 1
    taken, redriven = queue.receive(1)
    assert taken == [] and len(redriven) == 1
    (moved,), _ = dlq.receive(1)
    assert moved["Body"] == "poison" and moved["MessageAttributes"]["attempts"]["StringValue"]
    assert queue.stats.redriven == 1


def test_the_poller_never_exceeds_maximum_concurrency_and_settles(clock):
    scheduler, tracker = clock
    queue = make_queue(clock, "buffer", visibility_timeout=30)
    running, peak, lock = [0], [0], threading.Lock()
    three_run, release = threading.Event(), threading.Event()

    def invoke(event):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            if running[0] == 3:
                three_run.set()
        release.wait(10)  # held until the test has looked, however slowly rows arrive
        with lock:
            running[0] -= 1
        return {"batchItemFailures": []}

    with ThreadPoolExecutor(max_workers=8) as pool:
        poller = make_poller(queue, invoke, pool, tracker, max_concurrency=3)
        for n in range(30):
            queue.send(f"row {n}")
        try:
            # WHEN three invocations run and every send's wake-up has run on the timer thread
            # (a callback scheduled now runs after them), with 27 rows still visible
            assert three_run.wait(10)
            woken = threading.Event()
            scheduler.call_later(0, woken.set)
            assert woken.wait(10)
            # THEN the poller started no fourth, though its pool had room for five more
            assert peak[0] == poller.stats.peak_concurrency == 3
        finally:
            release.set()
        assert tracker.wait_idle(10)
    # ... nor at any time until the queue was empty
    assert peak[0] == poller.stats.peak_concurrency == 3
    assert poller.stats.invocations == 30 and len(queue) == 0


def test_a_reported_item_failure_comes_back_after_the_visibility_timeout(clock):
    scheduler, tracker = clock
    queue = make_queue(clock, "buffer", visibility_timeout=60)  # 0.2 s locally
    receives: list[tuple[float, float]] = []  # (before, after) each receive that took one
    receive = queue.receive

    def timed_receive(*args, **kwargs):
        before = time.monotonic()
        taken = receive(*args, **kwargs)
        if taken[0]:
            receives.append((before, time.monotonic()))
        return taken

    queue.receive = timed_receive  # type: ignore[method-assign]

    def invoke(event):
        (record,) = event["Records"]
        if record["attributes"]["ApproximateReceiveCount"] == "1":
            return {"batchItemFailures": [{"itemIdentifier": record["messageId"]}]}
        return {"batchItemFailures": []}

    with ThreadPoolExecutor(max_workers=2) as pool:
        make_poller(queue, invoke, pool, tracker, max_concurrency=2)
        queue.send("row")
        assert tracker.wait_idle(10)
    # The timeout runs from the first receive, not from when its handler started (a loaded
    # machine starts it later): the second receive ended at least 0.2 s after the first
    # began, however slow the machine.
    (first, _), (_, second) = receives
    assert second - first >= 0.2


def test_a_message_is_not_received_again_while_its_invocation_outlasts_the_timeout(clock):
    # On AWS the function timeout is at most the visibility timeout; on the compressed clock
    # a slow handler (a loaded machine) could outlast it and run twice at once.
    scheduler, tracker = clock
    queue = make_queue(clock, "buffer", visibility_timeout=60)  # 0.2 s locally
    spans: list[tuple[float, float]] = []
    running, finish = threading.Event(), threading.Event()

    def invoke(event):
        start = time.monotonic()
        (record,) = event["Records"]
        first = record["attributes"]["ApproximateReceiveCount"] == "1"
        if first:
            running.set()
            assert finish.wait(10)  # until the test has looked, past the visibility timeout
        spans.append((start, time.monotonic()))
        failures = [{"itemIdentifier": record["messageId"]}] if first else []
        return {"batchItemFailures": failures}

    with ThreadPoolExecutor(max_workers=4) as pool:
        poller = make_poller(queue, invoke, pool, tracker, max_concurrency=4)
        queue.send("row")
        assert running.wait(10)
        # WHEN the first invocation outlasts three visibility timeouts (a sleep lasts at least
        # that long) THEN its message stays in flight and no second invocation takes it
        try:
            time.sleep(3 * MINUTE)  # three visibility timeouts of 60 s
            attributes = queue.attributes()
            assert attributes["ApproximateNumberOfMessagesNotVisible"] == "1"
            assert attributes["ApproximateNumberOfMessages"] == "0"
            assert poller.stats.invocations == 1
        finally:
            finish.set()
        assert tracker.wait_idle(10)
    assert len(spans) == 2 and spans[1][0] >= spans[0][1]
    assert poller.stats.invocations == 2 and len(queue) == 0


def test_a_real_client_is_answered_by_the_local_queue(clock):
    queue = make_queue(clock, "buffer")
    queues = LocalQueues()
    queues.add(queue)
    with mock_aws(), queues.installed():
        sqs = boto3.session.Session(region_name="us-east-1").client("sqs")
        sqs.send_message(
            QueueUrl=queue.url,
            MessageBody="{}",
            DelaySeconds=900,  # the most SQS allows: 3 s locally, still delayed when read
            MessageAttributes={"attempts": {"DataType": "Number", "StringValue": "2"}},
        )
        assert queue.stats.delayed_sends == 1 and len(queue) == 1
        attributes = sqs.get_queue_attributes(QueueUrl=queue.url, AttributeNames=["All"])
        assert attributes["Attributes"]["ApproximateNumberOfMessagesDelayed"] == "1"
        with pytest.raises(ClientError) as raised:
            sqs.send_message(QueueUrl=queue.url, MessageBody="{}", DelaySeconds=901)
        assert raised.value.response["Error"]["Code"] == "InvalidParameterValue"
        with pytest.raises(ClientError) as raised:
            sqs.change_message_visibility(
                QueueUrl=queue.url, ReceiptHandle="nope", VisibilityTimeout=60
            )
        assert raised.value.response["Error"]["Code"] == "MessageNotInflight"


# --- batching windows (issue 19: the Message Batches step's mapping) ----------------------


def _window_poller(clock, queue, pool, batches, *, batch_size, window, started=None, **kwargs):
    """``queue``'s poller, appending each batch's size to ``batches`` (and the
    time.monotonic() its invocation started to ``started``); ``kwargs`` add to the poller."""
    scheduler, tracker = clock

    def invoke(event):
        if started is not None:
            started.append(time.monotonic())
        batches.append(len(event["Records"]))
        return {"batchItemFailures": []}

    return make_poller(
        queue,
        invoke,
        pool,
        tracker,
        name="batch-step",
        batch_size=batch_size,
        batching_window_seconds=window,
        scheduler=scheduler,
        seconds_per_minute=MINUTE,
        **kwargs,
    )


def test_a_batching_window_gathers_the_rows_sent_within_it_into_one_invocation(clock):
    _, tracker = clock
    queue = make_queue(clock, "batch-buffer", visibility_timeout=600)
    batches: list[int] = []
    started: list[float] = []
    all_sent = threading.Event()
    with ThreadPoolExecutor(max_workers=2) as pool:
        # GIVEN a mapping of batch size 10,000 with the longest window, 300 s (1 s locally),
        # that receives nothing before the last row is sent: the rows all arrive within its
        # window however slowly the machine sends them (a loaded one once sent only 196 of
        # the 300 within a 0.2 s window)
        poller = _window_poller(
            clock,
            queue,
            pool,
            batches,
            batch_size=10_000,
            window=300,
            started=started,
            may_receive=all_sent.is_set,
        )
        # WHEN 300 rows arrive
        first_sent = time.monotonic()
        for n in range(300):
            queue.send(f"row {n}")
        all_sent.set()
        poller.kick()  # in case the window passed while they were sent
        assert tracker.wait_idle(10)
    # THEN one invocation took them all, not 30 invocations of 10, and not before the window
    # had passed since the first row arrived (a poller that did not wait for it would have
    # invoked as soon as the rows were in, well within the window on an idle machine)
    assert batches == [300] and len(queue) == 0
    assert started[0] - first_sent >= 300 * MINUTE / 60 - 1e-6


def test_without_a_window_a_batch_holds_at_most_ten_records(clock):
    _, tracker = clock
    queue = make_queue(clock, "plain-buffer", visibility_timeout=600)
    batches: list[int] = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        _window_poller(clock, queue, pool, batches, batch_size=10_000, window=0)
        for n in range(25):
            queue.send(f"row {n}")
        assert tracker.wait_idle(10)
    assert max(batches) <= 10 and sum(batches) == 25


def test_a_batch_stops_at_lambdas_six_megabyte_payload(clock):
    queue = make_queue(clock, "big-buffer", visibility_timeout=600)
    body = "x" * (1024 * 1024)  # 1 MiB rows: six do not fit with their record overhead
    for _ in range(8):
        queue.send(body)
    taken, _ = queue.receive(10_000, 6 * 1024 * 1024)
    assert len(taken) == 5


def test_sent_timestamp_reads_the_age_on_the_runs_clock(clock):
    queue = make_queue(clock, "aged", visibility_timeout=600)
    before = time.monotonic()
    queue.send("row")
    time.sleep(MINUTE)  # at least one minute of AWS time
    (message,), _ = queue.receive(1)
    age_ms = time.time() * 1000 - int(message["Attributes"]["SentTimestamp"])
    elapsed = time.monotonic() - before  # real seconds from the send to reading the age
    # The age is the real time the message waited, on the run's clock (a real second lasts
    # 60 / MINUTE seconds there): at least the minute slept, at most all the time measured
    # (plus the real milliseconds between the receive and time.time() above). A loaded
    # machine only lengthens both; an age in real time (200 ms) or on a wrong scale fails.
    run_ms_per_real_second = 60 / MINUTE * 1000
    assert age_ms >= 60_000 - 1
    assert age_ms <= elapsed * (run_ms_per_real_second + 1000) + 1, (age_ms, elapsed)
