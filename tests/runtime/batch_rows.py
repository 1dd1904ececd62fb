"""Helpers of the Message Batches delivery tests (issue 19): the buffer queue's SQS batches
of many rows, the schedule tick, and the per-key checks every crash test ends with."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

from model_step.batch_store import custom_id_of

from .conftest import Buffer, FakeLambdaContext, fresh_event

TICK = {"model_step_batch": "tick"}
#: Seconds past which an uncertain create is reconciled (create deadline + grace).
PAST_GRACE = 181


class LambdaKilled(BaseException):
    """A Lambda kill: nothing after it runs (no ``except Exception``, no cleanup)."""


def sqs_batch(buffer: Buffer, events: list[dict]) -> dict:
    """Send ``events`` to the buffer queue, receive them all, shaped as Lambda hands them."""
    for event in events:
        buffer.sqs.send_message(QueueUrl=buffer.url, MessageBody=json.dumps(event))
    records = []
    while len(records) < len(events):
        response = buffer.sqs.receive_message(
            QueueUrl=buffer.url,
            AttributeNames=["All"],
            MaxNumberOfMessages=10,
            VisibilityTimeout=300,
        )
        for message in response.get("Messages", []):
            records.append(
                {
                    "messageId": message["MessageId"],
                    "receiptHandle": message["ReceiptHandle"],
                    "body": message["Body"],
                    "attributes": dict(message["Attributes"]),
                    "messageAttributes": {},
                    "md5OfBody": message["MD5OfBody"],
                    "eventSource": "aws:sqs",
                    "eventSourceARN": buffer.arn,
                    "awsRegion": "us-east-1",
                }
            )
    return {"Records": records}


def rows(count: int, start: int = 1) -> list[dict]:
    """``count`` fresh prospect events, rows ``start`` on."""
    return [fresh_event(row_number=n) for n in range(start, start + count)]


def tick(step, **context) -> dict:
    """One schedule tick."""
    return step.handle(TICK, FakeLambdaContext(**context))


@dataclass
class KeyOutcome:
    status: str | None
    error_code: str | None
    delivery: str | None
    batch_id: str | None


def stored(aws, step, event: dict) -> KeyOutcome:
    """The stored result of ``event``'s key (status None: nothing stored yet)."""
    return outcome_in(stored_by_key(aws, step), event)


def outcome_in(outcomes: dict[tuple, KeyOutcome], event: dict) -> KeyOutcome:
    """``event``'s key's outcome in what :func:`stored_by_key` read (status None: none)."""
    return outcomes.get(_key_of(event)) or KeyOutcome(None, None, None, None)


def _key_of(event: dict) -> tuple:
    return (event["detail"]["upload_id"], event["detail"]["row_number"])


def stored_by_key(aws, step) -> dict[tuple, KeyOutcome]:
    """Every stored result of ``step``'s keys, by key ``(upload_id, row_number)``, from one
    scan of the table (the first item of a key in scan order, as :func:`stored` reads it)."""
    prefix = step._components().settings.record_prefix
    found: dict[tuple, KeyOutcome] = {}
    for item in aws.idempotency_items():
        if not item["id"]["S"].startswith(prefix + "#") or "#batch" in item["id"]["S"]:
            continue
        if item.get("status", {}).get("S") != "COMPLETED":
            continue
        data = json.loads(item["data"]["S"])
        key = data.get("key")
        if isinstance(key, list) and all(isinstance(part, str | int) for part in key):
            found.setdefault(
                tuple(key),
                KeyOutcome(
                    data["status"],
                    data.get("error_code"),
                    data.get("delivery"),
                    data.get("batch_id"),
                ),
            )
    return found


def billed_per_key(fake_api) -> Counter:
    """Succeeded batch results per custom_id, over every batch (the billed requests)."""
    return Counter(fake_api.batches.billed_by_custom_id)


def assert_every_key_ends_once(
    aws, step, fake_api, events: list[dict], outcomes=None, *, exactly_once: bool = True
) -> None:
    """Per key: at most one billed request over all batches (and realtime), and a stored
    label or a stored coded dead letter; with ``outcomes``, one terminal outcome per key
    (at least one with ``exactly_once=False``: a kill after ``on_outcome`` returned and
    before the row was marked answered calls it again, as a realtime retry does)."""
    billed = billed_per_key(fake_api)
    assert all(count <= 1 for count in billed.values()), billed
    assert fake_api.request_count == 0, "no realtime request under batch delivery"
    stored_now = stored_by_key(aws, step)
    for event in events:
        outcome = outcome_in(stored_now, event)
        assert outcome.status in ("completed", "dead_lettered"), (event["detail"], outcome)
        if outcome.status == "dead_lettered":
            assert outcome.error_code
    if outcomes is not None:
        terminal = Counter(
            (e["detail"]["row_number"])
            for e, o in outcomes.seen
            if o["status"] in ("completed", "dead_lettered") and not o["replayed"]
        )
        if exactly_once:
            assert all(terminal[e["detail"]["row_number"]] == 1 for e in events), terminal
            assert sum(o["model_requests"] for _, o in outcomes.seen) == sum(billed.values())
        else:
            assert all(terminal[e["detail"]["row_number"]] >= 1 for e in events), terminal


def custom_id_for(step, event: dict) -> str:
    """The custom_id of ``event``'s key."""
    parts = step._components()
    from model_step.key import record_key

    key = record_key(
        [event["detail"]["upload_id"], event["detail"]["row_number"]],
        prompt_version=parts.settings.prompt_version,
        model_id=parts.settings.model_id,
        fingerprint=parts.fingerprint,
    )
    return custom_id_of(parts.persistence.record_id({"key": key}))


def memory_for_requests(step, monkeypatch, requests: float) -> dict:
    """Make 1 MB of function memory send a create body of about ``requests`` of this
    step's requests (user messages of 300 characters); the context kwargs that say so."""
    import model_step.batch_limits

    request_bytes = step._components().batch.staging._bytes_of("x" * 300)
    monkeypatch.setattr(model_step.batch_limits, "RUNTIME_RESERVE_MB", 0)
    monkeypatch.setattr(model_step.batch_limits, "MIN_CREATE_BYTES", 0)
    monkeypatch.setattr(
        model_step.batch_limits, "CREATE_BYTES_PER_MB", int(request_bytes * requests)
    )
    return {"memory_limit_in_mb": 1}
