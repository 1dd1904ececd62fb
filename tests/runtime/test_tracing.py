"""tracing=True: real Powertools Tracer / X-Ray SDK subsegments, caught on a local UDP port.

The X-Ray SDK sends finished subsegments as UDP datagrams to ``AWS_XRAY_DAEMON_ADDRESS``;
the test is that daemon. Lambda's own variables (``LAMBDA_TASK_ROOT``, ``_X_AMZN_TRACE_ID``)
are set as Lambda sets them, so the SDK runs in its Lambda mode.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator

import pytest

from .conftest import FakeLambdaContext, make_event, prospect_detail

TRACE_ID = "1-6745a1b2-0123456789abcdef01234567"


@pytest.fixture
def daemon(monkeypatch) -> Iterator[socket.socket]:
    """A UDP socket standing in for the X-Ray daemon, and Lambda's tracing environment."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    port = sock.getsockname()[1]
    monkeypatch.setenv("AWS_XRAY_DAEMON_ADDRESS", f"127.0.0.1:{port}")
    monkeypatch.setenv("LAMBDA_TASK_ROOT", "/var/task")
    monkeypatch.setenv("_X_AMZN_TRACE_ID", f"Root={TRACE_ID};Parent=53995c3f42cd8ad8;Sampled=1")
    monkeypatch.setenv("AWS_XRAY_CONTEXT_MISSING", "LOG_ERROR")
    yield sock
    sock.close()


def received(sock: socket.socket) -> list[dict]:
    """Every subsegment document sent so far (each datagram: a JSON header line, then it)."""
    documents = []
    while True:
        try:
            datagram = sock.recv(65_536).decode()
        except TimeoutError:
            return documents
        _header, body = datagram.split("\n", 1)
        documents.append(json.loads(body))


def names(documents: list[dict]) -> list[str]:
    return [doc["name"] for doc in documents]


def test_tracing_on_records_the_model_call_and_each_store_call(make_step, daemon, monkeypatch):
    # GIVEN a step with TRACING_ENABLED=true (what tracing=True sets)
    monkeypatch.setenv("TRACING_ENABLED", "true")
    step = make_step()
    # WHEN a row is answered, then delivered again (a duplicate)
    step.handle(make_event(), FakeLambdaContext())
    first = received(daemon)
    step.handle(make_event(), FakeLambdaContext())
    second = received(daemon)

    # THEN the first delivery shows the store's PutItem, the model call and the save; the
    # duplicate only its failed PutItem (marked as a fault, by class name)
    assert "model call" in names(first)
    assert {"idempotency store: PutItem", "idempotency store: UpdateItem"} <= set(names(first))
    assert "model call" not in names(second)
    [put] = [doc for doc in second if doc["name"] == "idempotency store: PutItem"]
    assert put["fault"] is True and put["annotations"]["error_type"]
    assert all(doc["trace_id"] == TRACE_ID for doc in first + second)
    # and no subsegment carries the model's answer (the fake's "warm") or a row value
    text = json.dumps(first + second)
    for value in ("warm", "Lovelace", "Analytical Engines", "ada1@example.com", "upload-001"):
        assert value not in text
    assert all("cause" not in doc for doc in first + second)


def test_tracing_off_by_default_sends_nothing_and_never_imports_the_sdk(make_step, daemon):
    # GIVEN no TRACING_ENABLED  WHEN a row is answered  THEN no subsegment is sent
    sys.modules.pop("aws_xray_sdk", None)
    make_step().handle(make_event(prospect_detail(row_number=2)), FakeLambdaContext())
    assert received(daemon) == []
    assert "aws_xray_sdk" not in sys.modules


def test_tracing_enabled_must_be_true_or_false(make_step, monkeypatch):
    from model_step.errors import ConfigurationError

    monkeypatch.setenv("TRACING_ENABLED", "yes")
    with pytest.raises(ConfigurationError, match="TRACING_ENABLED must be true or false"):
        make_step().handle(make_event(), FakeLambdaContext())
