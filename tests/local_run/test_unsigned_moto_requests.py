"""A local run's requests to the services moto answers the same unsigned go without a SigV4
signature; S3's and every other service's stay signed, and nothing changes after the run."""

from __future__ import annotations

from typing import Any

import boto3
from moto import mock_aws

from constructs_lib.local_engine.local_aws import unsigned_moto_requests


def _authorization(client: Any, call: Any) -> list[str | None]:
    """The ``Authorization`` header of each request ``call(client)`` sends."""
    seen: list[str | None] = []

    def keep(request: Any, **_: Any) -> None:
        value = request.headers.get("Authorization")
        seen.append(value.decode() if isinstance(value, bytes) else value)

    client.meta.events.register_last("before-send", keep)
    call(client)
    return seen


def _queue_calls(client: Any) -> None:
    client.create_queue(QueueName="rows")


def _bucket_calls(client: Any) -> None:
    client.create_bucket(Bucket="uploads")


def test_sqs_goes_unsigned_and_s3_stays_signed_while_open():
    with mock_aws(), unsigned_moto_requests():
        session = boto3.session.Session(region_name="us-east-1")
        sqs = _authorization(session.client("sqs"), _queue_calls)
        s3 = _authorization(session.client("s3"), _bucket_calls)
    assert sqs == [None]
    assert len(s3) == 1 and s3[0] is not None and s3[0].startswith("AWS4-HMAC-SHA256 ")


def test_requests_are_signed_again_after_the_run():
    with mock_aws():
        with unsigned_moto_requests():
            pass
        session = boto3.session.Session(region_name="us-east-1")
        sqs = _authorization(session.client("sqs"), _queue_calls)
    assert len(sqs) == 1 and sqs[0] is not None and sqs[0].startswith("AWS4-HMAC-SHA256 ")
