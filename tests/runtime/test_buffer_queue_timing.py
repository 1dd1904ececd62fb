"""The buffer queue's timing arithmetic, on its own (pure functions, no AWS)."""

from __future__ import annotations

import datetime as dt
import email.utils

import httpx2
import pytest
from model_step import buffer_queue


class _Rng:
    """A random source pinned to one value of ``uniform``'s range."""

    def __init__(self, pick: str) -> None:
        self.pick = pick

    def uniform(self, low: float, high: float) -> float:
        return high if self.pick == "high" else low


class _StatusError(Exception):
    """Stands in for an SDK status error: what the runtime reads is ``response.headers``."""

    def __init__(self, headers: dict[str, str]) -> None:
        super().__init__("rate limited")
        self.response = httpx2.Response(429, headers=headers)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "2500"}, 2.5),
        ({"retry-after-ms": "0"}, 0.0),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),  # the ms header wins
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "0"}, 0.0),
        ({"retry-after-ms": "soon", "retry-after": "4"}, 4.0),
        ({}, None),
        ({"retry-after": "later"}, None),
    ],
)
def test_retry_after_headers(headers, expected):
    assert buffer_queue.retry_after_seconds(_StatusError(headers)) == expected


def test_retry_after_as_an_http_date():
    when = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=120)
    error = _StatusError({"retry-after": email.utils.format_datetime(when, usegmt=True)})
    assert 115 <= buffer_queue.retry_after_seconds(error) <= 120
    past = email.utils.format_datetime(when - dt.timedelta(hours=1), usegmt=True)
    assert buffer_queue.retry_after_seconds(_StatusError({"retry-after": past})) == 0.0


def test_an_error_without_a_response_has_no_retry_after():
    assert buffer_queue.retry_after_seconds(ValueError("no response")) is None


@pytest.mark.parametrize(
    ("waits", "high", "low"),
    [(0, 5.0, 2.5), (1, 10.0, 5.0), (3, 40.0, 20.0), (7, 640.0, 320.0), (8, 900.0, 450.0)],
)
def test_backoff_doubles_from_5_s_with_jitter_and_stops_at_900(waits, high, low):
    assert buffer_queue.backoff_seconds(waits, _Rng("high")) == high
    assert buffer_queue.backoff_seconds(waits, _Rng("low")) == low


@pytest.mark.parametrize(
    ("wait", "delay"), [(0, 0), (0.2, 1), (2.5, 3), (900, 900), (901, 900), (-3, 0)]
)
def test_delay_seconds_rounds_up_within_sqs_limits(wait, delay):
    assert buffer_queue.delay_seconds(wait) == delay


def test_record_accounting():
    record = {
        "messageId": "m-1",
        "receiptHandle": "rh-1",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:buffer",
        "attributes": {"ApproximateReceiveCount": "2"},
    }
    delivery = buffer_queue.QueueDelivery.from_record(record, None)
    assert (delivery.message_id, delivery.receipt_handle) == ("m-1", "rh-1")
    assert delivery.event_source_arn == record["eventSourceARN"]
    assert (delivery.receive_count, delivery.source) == (2, "buffer")

    bare = buffer_queue.QueueDelivery.from_record({}, None)
    assert (bare.receive_count, bare.source) == (1, "buffer")


def test_a_record_from_the_redrive_queue_is_told_apart_by_its_source_arn():
    arn = "arn:aws:sqs:us-east-1:123456789012:redrive"
    record = {"eventSourceARN": arn, "attributes": {"ApproximateReceiveCount": "1"}}
    assert buffer_queue.QueueDelivery.from_record(record, arn).source == "redrive"
    assert buffer_queue.QueueDelivery.from_record(record, arn + "-other").source == "buffer"


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        ({"Records": [{"eventSource": "aws:sqs"}]}, True),
        ({"Records": [{"eventSource": "aws:sqs"}, {"eventSource": "aws:s3"}]}, False),
        ({"Records": []}, False),
        ({"Records": "nope"}, False),
        ({"detail-type": "x", "Records": [{"eventSource": "aws:sqs"}]}, False),
        ({"detail": {}}, False),
        ("not a mapping", False),
    ],
)
def test_sqs_batch_shape(event, expected):
    assert buffer_queue.is_sqs_batch(event) is expected


def test_queue_name_from_arn():
    arn = "arn:aws:sqs:us-east-1:123456789012:buffer"
    assert buffer_queue.queue_url_from_arn(arn) == ("buffer", "123456789012")
    assert buffer_queue.queue_url_from_arn("arn:aws:sns:us-east-1:1:t") is None


@pytest.mark.parametrize(
    ("body", "parsed"),
    [('{"detail": {}}', {"detail": {}}), ("[1, 2]", None), ("7", None), ("", None), (None, None)],
)
def test_only_a_json_object_body_is_an_event(body, parsed):
    assert buffer_queue.parse_body({"body": body}) == parsed
