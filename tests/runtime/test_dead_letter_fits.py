"""Every message the step sends fits its queue, and a DLQ that keeps refusing ends the row's
tries (issue 31, item 2).

GIVEN the real handler and moto's SQS behind a botocore hook that applies SQS's own size rule
(a message is at most the queue's size in UTF-8 bytes, its attributes included; moto counts
characters and leaves attributes out, which is kinder than SQS) to queues made with 256 KiB,
the size every queue accepts (and a buffer queue made today with 1 MiB), WHEN a large or
non-ASCII row is dead-lettered or re-enqueued, THEN it is sent, cut only where it cannot
fit, and never in a loop.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator

import pytest
from botocore.exceptions import ClientError

from tests.fakes import Reply

from .conftest import FakeLambdaContext, boto3_session, fresh_event

QUEUE_BYTES = 262_144
#: 50,000 CJK characters: 150,000 bytes in UTF-8, 300,000 as escaped ASCII JSON.
NON_ASCII_NOTES = "漢" * 50_000


class SizeRule:
    """SQS's size rule on every SendMessage: refused (InvalidParameterValue) above the queue's
    size (``limits[url]``, else 256 KiB) in UTF-8 body bytes plus attribute names, types and
    values. ``sent`` holds the sizes it let through."""

    def __init__(self) -> None:
        self.limits: dict[str, int] = {}
        self.sent: list[int] = []

    def __call__(self, params, **_kwargs):
        size = len(params["MessageBody"].encode("utf-8"))
        for name, value in (params.get("MessageAttributes") or {}).items():
            size += len(name.encode()) + len(value["DataType"].encode())
            size += len(value.get("StringValue", "").encode())
        if size > self.limits.get(params["QueueUrl"], QUEUE_BYTES):
            raise ClientError(
                {"Error": {"Code": "InvalidParameterValue", "Message": f"{size} bytes"}},
                "SendMessage",
            )
        self.sent.append(size)


@pytest.fixture
def sqs_size_rule(model_env) -> Iterator[SizeRule]:
    rule = SizeRule()
    hooks = boto3_session().events
    hooks.register("before-parameter-build.sqs.SendMessage", rule)
    yield rule
    hooks.unregister("before-parameter-build.sqs.SendMessage", rule)


def test_a_150_kb_non_ascii_row_is_dead_lettered_whole(
    make_step, fake_api, model_env, buffer, sqs_size_rule
):
    """The issue's case: escaped ASCII made it a 300 KB body that could never be sent."""
    fake_api.script = [400]
    event = fresh_event(notes=NON_ASCII_NOTES)

    assert make_step().handle(buffer.batch(event), FakeLambdaContext()) == {"batchItemFailures": []}

    [message] = model_env.dead_letters()
    assert message["body"] == event  # every character, as it came
    assert "payload_omitted" not in message["marker"]


def test_a_150_kb_non_ascii_row_waiting_out_a_rate_limit_is_re_enqueued(
    make_step, fake_api, buffer, sqs_size_rule
):
    fake_api.script = [Reply(status=429, headers={"retry-after": "5"})]
    event = fresh_event(notes=NON_ASCII_NOTES)

    assert make_step().handle(buffer.batch(event), FakeLambdaContext()) == {"batchItemFailures": []}

    [copy] = buffer.requeued()
    assert json.loads(copy["MessageBody"])["detail"]["notes"] == NON_ASCII_NOTES


def test_a_row_too_big_for_the_dlq_drops_its_largest_fields_never_its_key(
    make_step, fake_api, model_env, buffer, sqs_size_rule
):
    sqs_size_rule.limits[buffer.url] = 1_048_576  # SQS's default for a queue made today
    fake_api.script = [400]
    event = fresh_event(notes="n" * 300_000, history="h" * 50_000)

    make_step().handle(buffer.batch(event), FakeLambdaContext())

    [message] = model_env.dead_letters()
    body, marker = message["body"], message["marker"]
    omitted = marker["payload_omitted"]
    assert omitted["fields"] == ["detail.notes"]  # the largest was enough
    full = json.dumps({**event, "dead_letter": {k: v for k, v in marker.items()
                                               if k != "payload_omitted"}},
                      ensure_ascii=False, separators=(",", ":")).encode()  # fmt: skip
    assert (omitted["bytes"], omitted["sha256"]) == (len(full), hashlib.sha256(full).hexdigest())
    assert body["id"] == event["id"] and body["detail"]["history"] == "h" * 50_000
    assert (body["detail"]["upload_id"], body["detail"]["row_number"]) == ("upload-001", 1)
    [size] = sqs_size_rule.sent  # the step's one send: the dead letter
    assert size <= QUEUE_BYTES


def test_a_redrive_of_a_cut_dead_letter_never_asks_the_model(
    make_step, fake_api, model_env, buffer, sqs_size_rule
):
    sqs_size_rule.limits[buffer.url] = 1_048_576
    fake_api.script = [400]
    step = make_step()
    step.handle(buffer.batch(fresh_event(notes="n" * 300_000)), FakeLambdaContext())
    [dead] = model_env.sqs.receive_message(QueueUrl=model_env.queue_url)["Messages"]

    for _ in range(2):  # "Start DLQ redrive"; SQS may deliver it twice
        assert step.handle(buffer.batch(dead["Body"]), FakeLambdaContext()) == {
            "batchItemFailures": []
        }

    assert fake_api.request_count == 1
    [refused] = model_env.dead_letters()
    assert refused["attributes"]["ERROR_CODE"] == "PayloadOmitted"
    assert refused["marker"]["payload_omitted"]["fields"] == ["detail.notes"]


def test_a_dlq_that_keeps_refusing_stops_the_redrive_queue_putting_the_row_back(
    make_step, fake_api, model_env, buffer, redrive
):
    """A DLQ send that keeps failing ends in a bounded number of tries: after five failed
    deliveries the redrive queue's consumer raises, so SQS's redrive policy moves the row to
    the DLQ (no send permission needed), where the DLQ-depth alarm sees it."""

    def refuse(params, **_kwargs):
        if params.get("QueueUrl") == model_env.queue_url:
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "kms"}}, "SendMessage")

    hooks = boto3_session().events
    hooks.register("before-parameter-build.sqs.SendMessage", refuse)
    try:
        fake_api.script = [400]
        step = make_step()
        event = fresh_event()
        batch = buffer.batch(event)
        for _ in range(5):
            assert step.handle(batch, FakeLambdaContext())["batchItemFailures"]
        response = step.handle(redrive.batch(event, receive_count=1), FakeLambdaContext())
    finally:
        hooks.unregister("before-parameter-build.sqs.SendMessage", refuse)

    assert response["batchItemFailures"]  # left to the redrive policy
    assert buffer.requeued() == []
    assert fake_api.request_count == 1
