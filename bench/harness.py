"""What every benchmark shares: paths, a quiet fake AWS environment, moto with an atomic
conditional PutItem, the fake Messages API, Lambda async-retry emulation, table printing and
results.json.

Nothing here reaches AWS or the internet: DynamoDB/SQS/S3/EventBridge are moto (in-process, or
``ThreadedMotoServer`` on 127.0.0.1) and the model API is ``tests.fakes.FakeMessagesAPI`` on
127.0.0.1.
"""

from __future__ import annotations

import argparse
import atexit
import functools
import json
import shutil
import statistics
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
LAMBDA_SRC = REPO / "lambda_src"
BENCH_DIR = REPO / "bench"
DEFAULT_OUT = BENCH_DIR / "out"

# The runtime and the fakes are imported as the tests import them.
for _path in (str(REPO), str(LAMBDA_SRC)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import boto3  # noqa: E402

from constructs_lib.local_engine.environment import (  # noqa: E402
    patched_environ,
)
from constructs_lib.local_engine.moto_fixes import (  # noqa: E402
    atomic_dynamodb_writes,
)
from constructs_lib.system_prompt_asset import ship_prompt  # noqa: E402

REGION = "us-east-1"
FUNCTION_NAME = "model-step-bench"
IDEMPOTENCY_TABLE = "idempotency"
NAIVE_TABLE = "naive-results"
SYSTEM_PROMPT = "You label prospects. Answer hot, warm or cold."
PROMPT_VERSION = "v1"
IDEMPOTENCY_KEY = "[upload_id, row_number]"

#: Lambda async invocation: 1 attempt + ``lambda_retry_attempts`` (the construct's default 2).
LAMBDA_ATTEMPTS = 3

# Environment of every benchmark process: fake credentials, no real endpoints, quiet Powertools.
BASE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "AWS_LAMBDA_FUNCTION_NAME": FUNCTION_NAME,
    # The handler logs and flushes EMF metrics to stdout; that would drown the tables.
    "POWERTOOLS_LOG_LEVEL": "CRITICAL",
    "POWERTOOLS_METRICS_DISABLED": "true",
    "HOME": "/nonexistent-home-for-bench",
}
CLEARED_ENV = (
    "AWS_PROFILE",
    "AWS_ENDPOINT_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
)


# --------------------------------------------------------------------------- environment
# One implementation of each emulator fix, shared with the local run (which ships it).
patched_env = patched_environ


def bench_env(**extra: str) -> Iterator[None]:
    """The fake-AWS, quiet environment plus ``extra``."""
    return patched_env({**BASE_ENV, **extra}, CLEARED_ENV)


atomic_moto_put_item = atomic_dynamodb_writes


@contextmanager
def mocked_aws() -> Iterator[boto3.session.Session]:
    """moto in-process (atomic PutItem) in the bench environment; yields a boto3 session."""
    from moto import mock_aws

    with bench_env(), atomic_moto_put_item(), mock_aws():
        yield boto3.session.Session(region_name=REGION)


def create_idempotency_table(session: boto3.session.Session, name: str = IDEMPOTENCY_TABLE) -> str:
    """A table shaped like Powertools' (and the construct's): partition key ``id`` (S)."""
    session.client("dynamodb").create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


def create_queue(session: boto3.session.Session, name: str = "model-step-dlq") -> str:
    return session.client("sqs").create_queue(QueueName=name)["QueueUrl"]


@functools.cache
def prompt_root() -> Path:
    """The directory :func:`shipped_prompt` ships into (the construct ships prompts with the
    code): a child process that runs the step needs it on its ``sys.path``, as Lambda has the
    asset's copy. Made on first use, and removed when this process exits."""
    root = Path(tempfile.mkdtemp(prefix="bench-prompts-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def shipped_prompt(text: str) -> str:
    """Ship ``text`` as a step's system prompt, on ``sys.path``; its ``SYSTEM_PROMPT_SHA256``."""
    root = prompt_root()
    if str(root) not in sys.path:
        sys.path.append(str(root))
    return ship_prompt(root, text)


def step_environment(queue_url: str, api_base_url: str) -> dict[str, str]:
    """What the construct sets on the function, pointed at moto and the fake API."""
    return {
        "IDEMPOTENCY_TABLE_NAME": IDEMPOTENCY_TABLE,
        "DEAD_LETTER_QUEUE_URL": queue_url,
        "IDEMPOTENCY_KEY": IDEMPOTENCY_KEY,
        "PROMPT_VERSION": PROMPT_VERSION,
        "SYSTEM_PROMPT_SHA256": shipped_prompt(SYSTEM_PROMPT),
        "ANTHROPIC_API_KEY": "sk-ant-bench-local",
        "ANTHROPIC_BASE_URL": api_base_url,
        "MODEL_TIMEOUT_SECONDS": "5",
        # The reference classifier's request (issue 32): a one-word label without thinking,
        # so a row's output tokens do not vary with a seeded thought.
        "THINKING": "disabled",
        "MAX_TOKENS": "16",
    }


# --------------------------------------------------------------------------- fake model API
#: Error replies tell the SDK to wait 1 ms before its own retries (``retry-after-ms``), so SDK
#: backoff costs no wall time; the NUMBER of requests, which is what is measured, is unchanged.
NO_BACKOFF = {"retry-after-ms": "1"}


def per_event_script(entries: Sequence[int]) -> Callable[[int, dict], Any]:
    """A fake-API script applied per distinct user message (i.e. per event): the n-th request
    for an event gets ``entries[n]``, then 200 once the entries are used up. ``entries`` ending
    in a negative number means "repeat the last status forever" (e.g. ``[-529]``)."""
    from tests.fakes import Reply

    counts: dict[str, int] = {}
    lock = threading.Lock()

    def script(_index: int, body: dict) -> Any:
        messages = body.get("messages") or [{}]
        key = json.dumps(messages[0].get("content"), sort_keys=True)
        with lock:
            n = counts.get(key, 0)
            counts[key] = n + 1
        if entries and entries[-1] < 0 and n >= len(entries) - 1:
            status = -entries[-1]
        elif n < len(entries):
            status = abs(entries[n])
        else:
            status = 200
        return 200 if status == 200 else Reply(status=status, headers=NO_BACKOFF)

    return script


@contextmanager
def fake_api(script: Any = None, delay: float = 0.0) -> Iterator[Any]:
    from tests.fakes import FakeMessagesAPI

    with FakeMessagesAPI(script, delay=delay, timeout_sleep=1.0) as api:
        # The fake writes headers and body in two send() calls; with Nagle's algorithm on, the
        # client's delayed ACK adds ~40 ms to every reply. Real APIs do not pay that, and it
        # would dominate the timings, so the bench turns Nagle off (socketserver's own switch).
        api._server.RequestHandlerClass.disable_nagle_algorithm = True
        yield api


# --------------------------------------------------------------------------- Lambda emulation
@dataclass
class FakeLambdaContext:
    """Test double of the Lambda context object."""

    function_name: str = FUNCTION_NAME
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 512
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = f"/aws/lambda/{FUNCTION_NAME}"
    log_stream_name: str = "2026/01/01/[$LATEST]bench"
    invoked_function_arn: str = f"arn:aws:lambda:{REGION}:123456789012:function:{FUNCTION_NAME}"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def make_event(upload_id: str, row_number: int) -> dict:
    """An EventBridge event as Lambda receives it; each delivery gets a new event id, as a
    re-published event would."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "ProspectRow",
        "source": "prospects.uploader",
        "account": "123456789012",
        "time": "2026-01-01T00:00:00Z",
        "region": REGION,
        "resources": [],
        "detail": {
            "upload_id": upload_id,
            "row_number": row_number,
            "email": f"ada{row_number}@example.com",
            "company": "Analytical Engines Ltd",
            "title": "CTO",
        },
    }


Handler = Callable[[dict, Any], Any]


@dataclass
class Delivery:
    """One delivery of an event to Lambda's async queue and the attempts it got."""

    event: dict
    attempts: int = 0
    outcome: str = "pending"  # "ok" | "pending" | "failed" (on-failure destination)
    errors: list[str] = field(default_factory=list)


def attempt(handler: Handler, delivery: Delivery, max_attempts: int = LAMBDA_ATTEMPTS) -> None:
    """One Lambda attempt: an exception is a function error, retried while attempts remain."""
    delivery.attempts += 1
    try:
        handler(delivery.event, FakeLambdaContext())
    except Exception as exc:
        delivery.errors.append(type(exc).__name__)
        delivery.outcome = "pending" if delivery.attempts < max_attempts else "failed"
    else:
        delivery.outcome = "ok"


def run_sequential(handler: Handler, deliveries: Sequence[Delivery]) -> None:
    """Deliveries arrive one after another, each far enough apart that its retries have all
    run before the next delivery arrives."""
    for delivery in deliveries:
        while delivery.outcome == "pending":
            attempt(handler, delivery)


def run_concurrent(handler: Handler, deliveries: Sequence[Delivery]) -> None:
    """All deliveries arrive at the same instant (threads released by a barrier). Lambda retries
    a failed attempt a minute or two later, so every retry runs in a later round, after the
    whole previous round has finished, as concurrently as the first. This is also how an
    ``IdempotencyAlreadyInProgressError`` gets its answer: its retry runs after the first
    delivery completed."""
    pending = list(deliveries)
    while pending:
        barrier = threading.Barrier(len(pending))

        def run(delivery: Delivery, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            attempt(handler, delivery)

        threads = [threading.Thread(target=run, args=(d,)) for d in pending]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        pending = [d for d in pending if d.outcome == "pending"]


# --------------------------------------------------------------------------- output
def ratio(numerator: float, denominator: float) -> float | None:
    return None if not denominator else numerator / denominator


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A small aligned table: text left-aligned, numbers right-aligned."""
    cells = [[fmt(cell) for cell in row] for row in rows]
    numeric = [
        all(isinstance(row[i], int | float) or row[i] is None for row in rows) if rows else False
        for i in range(len(headers))
    ]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    print(f"\n{title}")
    print(line(headers))
    print(line(["-" * w for w in widths]))
    for row in cells:
        print(line(row))
    sys.stdout.flush()


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def write_results(name: str, data: Any, out_dir: Path = DEFAULT_OUT) -> Path:
    """Merge ``{name: data}`` into ``out_dir/results.json`` (one key per benchmark)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "results.json"
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError):
        results = {}
    results[name] = data
    path.write_text(json.dumps(results, indent=2, sort_keys=True, default=str) + "\n")
    return path


def parse_args(
    description: str,
    argv: Sequence[str] | None,
    options: Callable[[argparse.ArgumentParser], None] | None = None,
) -> argparse.Namespace:
    """``--quick`` and ``--out``, plus what ``options`` adds for one benchmark."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="smallest sizes only (smoke run)")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="directory for results.json (bench/out)"
    )
    if options is not None:
        options(parser)
    return parser.parse_args(argv)


def positive_int(text: str) -> int:
    """An ``argparse`` type: a whole number of at least 1 (the error names the value)."""
    value = non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be at least 1, got 0")
    return value


def non_negative_int(text: str) -> int:
    """An ``argparse`` type: a whole number of 0 or more (the error names the value)."""
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from exc
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def bench_main(
    name: str,
    description: str,
    run: Callable[..., dict],
    argv: Sequence[str] | None = None,
    options: Callable[[argparse.ArgumentParser], None] | None = None,
) -> dict:
    """The ``python -m bench.<name> [--quick] [--out DIR]`` entry point of every benchmark.
    ``options`` adds a benchmark's own arguments; each reaches ``run`` as a keyword."""
    args = parse_args(description, argv, options)
    extra = {k: v for k, v in vars(args).items() if k not in ("quick", "out")}
    result = run(quick=args.quick, out_dir=args.out, **extra)
    path = write_results(name, {"quick": args.quick, **result}, args.out)
    print(f"\nresults: {path}")
    return result
