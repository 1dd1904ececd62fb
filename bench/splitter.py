"""Prospect splitter throughput and peak memory: streaming (ours) vs whole-object read.

For each size a CSV of valid prospect rows is generated and uploaded; then, for each
implementation, a FRESH subprocess imports it and splits the object once:

- ``ours``: the real handler ``prospect_splitter.handler.handler`` (64 KiB streaming reads, a
  counting pass then a publishing pass, PutEvents in batches of 10, Powertools idempotency);
- ``whole-object``: ``bench.baselines.naive_split``: ``body.read().decode()``, every record
  parsed into a list, then the same validation and the same PutEvents batching.

moto runs as ``ThreadedMotoServer`` in the PARENT process and the child reaches S3, DynamoDB
and EventBridge over HTTP on 127.0.0.1. That matters for memory: with in-process moto, the
mocked GetObject hands over the whole object as one bytes value, so even a streaming reader
would hold the file. Over HTTP the child's memory is only the splitter's own.

Memory: ``peak RSS`` is the child's lifetime peak resident set (``VmHWM``; imports included).
``resource.getrusage(...).ru_maxrss`` is NOT used: Linux preserves it across ``execve``, so a
child reports its (large, moto-holding) parent's size. ``RSS growth`` is the split's own
peak: the resident set is sampled every 2 ms during the split, minus the resident set just
before it (after imports and AWS client creation). tracemalloc is not used: it slows this
call-bound workload several times over and would distort rows/s.

Run: ``python -m bench.splitter [--quick]``.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import boto3

from bench import PYCACHE
from bench.harness import (
    LAMBDA_SRC,
    REGION,
    REPO,
    bench_env,
    bench_main,
    moto_server,
    patched_env,
    print_table,
    ratio,
)

BUCKET = "prospect-uploads"
FAILURES_TABLE = "prospect-failures"
IDEMPOTENCY_TABLE = "prospect-idempotency"
BUS = "prospect-bus"
SOURCE = "prospect-uploader"
HEADER = "email,first_name,last_name,company,title,country,notes"
IMPLEMENTATIONS = ("ours", "whole-object")

CHILD = r"""
import gc, json, resource, sys, threading, time
impl, event = sys.argv[1], json.loads(sys.argv[2])
import boto3
if impl == "ours":
    from prospect_splitter.handler import handler

    class Context:
        function_name = "prospect-splitter"
        memory_limit_in_mb = 1024
        invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:prospect-splitter"
        aws_request_id = "bench"
        def get_remaining_time_in_millis(self):
            return 900000

    from prospect_splitter.config import Settings
    from prospect_splitter.handler import _splitter_for
    _splitter_for(Settings.from_env())  # build the clients now, as the baseline does below
    split = lambda: handler(event, Context())
else:
    from bench.baselines import naive_split
    session = boto3.session.Session()
    s3, events = session.client("s3"), session.client("events")
    detail = event["detail"]
    split = lambda: naive_split(
        s3, events, bucket=detail["bucket"]["name"], key=detail["object"]["key"],
        bus_name=sys.argv[3], source=sys.argv[4],
    )
def rss_kb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE_KB

def vm_hwm_kb():
    # The process's own lifetime peak RSS. Not ru_maxrss: Linux keeps ru_maxrss across
    # execve, so a child started by a big parent reports the parent's size.
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))

PAGE_KB = resource.getpagesize() // 1024
gc.collect()
before_kb = rss_kb()
peak = [before_kb]
stop = threading.Event()

def sample():
    # Poll the resident set every 2 ms: the kernel's high-water mark cannot be reset reliably
    # (memory returned with madvise() never updates it), and the import-time peak hides it.
    while not stop.wait(0.002):
        peak[0] = max(peak[0], rss_kb())

sampler = threading.Thread(target=sample, daemon=True)
sampler.start()
start = time.perf_counter()
result = split()
seconds = time.perf_counter() - start
stop.set()
sampler.join()
peak[0] = max(peak[0], rss_kb())
print("RESULT " + json.dumps({
    "seconds": seconds, "rows": result["rows"], "valid": result["valid"],
    "peak_rss_kb": vm_hwm_kb(),
    "rss_before_kb": before_kb, "rss_growth_kb": peak[0] - before_kb,
}))
"""


def generate_csv(rows: int) -> bytes:
    """``rows`` valid prospect rows (about 120 bytes each)."""
    out = io.StringIO()
    out.write(HEADER + "\r\n")
    for i in range(1, rows + 1):
        out.write(
            f"lead{i}@example{i % 97}.com,Ada{i},Lovelace,Analytical Engines {i % 1000} Ltd,"
            f"CTO,GB,Met at the conference; asked for a demo of the batch pipeline\r\n"
        )
    return out.getvalue().encode()


def s3_event(key: str, etag: str, size: int) -> dict[str, Any]:
    """An EventBridge S3 "Object Created" event for one object version."""
    return {
        "version": "0",
        "id": f"bench-{key}",
        "detail-type": "Object Created",
        "source": "aws.s3",
        "account": "123456789012",
        "time": "2026-11-29T09:00:00Z",
        "region": REGION,
        "resources": [f"arn:aws:s3:::{BUCKET}"],
        "detail": {
            "version": "0",
            "bucket": {"name": BUCKET},
            "object": {"key": key, "etag": etag, "size": size, "sequencer": "0062E99A88DC407460"},
            "reason": "PutObject",
        },
    }


def create_resources(session: boto3.session.Session) -> None:
    session.client("s3").create_bucket(Bucket=BUCKET)
    dynamodb = session.client("dynamodb")
    for name, keys in (
        (FAILURES_TABLE, [("upload_id", "HASH"), ("failure_id", "RANGE")]),
        (IDEMPOTENCY_TABLE, [("id", "HASH")]),
    ):
        dynamodb.create_table(
            TableName=name,
            KeySchema=[{"AttributeName": n, "KeyType": t} for n, t in keys],
            AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n, _ in keys],
            BillingMode="PAY_PER_REQUEST",
        )
    session.client("events").create_event_bus(Name=BUS)


def split_in_child(impl: str, event: dict[str, Any], endpoint: str) -> dict[str, Any]:
    env = dict(os.environ)
    env.update(
        AWS_ENDPOINT_URL=endpoint,
        PYTHONPATH=os.pathsep.join([str(REPO), str(LAMBDA_SRC)]),
        PYTHONPYCACHEPREFIX=str(PYCACHE),
        EVENT_BUS_NAME=BUS,
        FAILURES_TABLE_NAME=FAILURES_TABLE,
        IDEMPOTENCY_TABLE_NAME=IDEMPOTENCY_TABLE,
        POWERTOOLS_SERVICE_NAME="prospect-splitter-bench",
    )
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    child = subprocess.run(
        [sys.executable, "-c", CHILD, impl, json.dumps(event), BUS, SOURCE],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=900,
        check=False,
    )
    if child.returncode != 0:
        raise RuntimeError(f"splitter child {impl!r} failed:\n{child.stderr[-3000:]}")
    line = next(x for x in child.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def run(*, quick: bool = False, out_dir: Path | None = None) -> dict:
    sizes = (1_000,) if quick else (10_000, 100_000)
    rows: list[dict[str, Any]] = []
    with bench_env(), moto_server() as endpoint, patched_env({"AWS_ENDPOINT_URL": endpoint}):
        session = boto3.session.Session(region_name=REGION)
        create_resources(session)
        s3 = session.client("s3")
        for size in sizes:
            body = generate_csv(size)
            for impl in IMPLEMENTATIONS:
                key = f"uploads/{impl}-{size}.csv"  # a new object: no idempotent replay
                etag = s3.put_object(Bucket=BUCKET, Key=key, Body=body)["ETag"].strip('"')
                result = split_in_child(impl, s3_event(key, etag, len(body)), endpoint)
                if result["valid"] != size:
                    raise RuntimeError(f"{impl} published {result['valid']} of {size} rows")
                rows.append(
                    {
                        "implementation": impl,
                        "rows": size,
                        "object_bytes": len(body),
                        "rows_per_second": size / result["seconds"],
                        **result,
                    }
                )
            del body
    by_key = {(r["implementation"], r["rows"]): r for r in rows}
    table = []
    for row in rows:
        base = by_key[("whole-object", row["rows"])]
        row["rows_per_second_ratio_vs_whole_object"] = ratio(
            row["rows_per_second"], base["rows_per_second"]
        )
        row["rss_growth_ratio_vs_whole_object"] = ratio(row["rss_growth_kb"], base["rss_growth_kb"])
        table.append(
            [
                row["implementation"],
                row["rows"],
                row["object_bytes"] / 1e6,
                row["seconds"],
                row["rows_per_second"],
                row["rows_per_second_ratio_vs_whole_object"],
                row["peak_rss_kb"] / 1024,
                row["rss_growth_kb"] / 1024,
                row["rss_growth_ratio_vs_whole_object"],
            ]
        )
    print_table(
        "Prospect splitter (fresh subprocess per run; moto over HTTP on 127.0.0.1)",
        [
            "implementation",
            "rows",
            "object MB",
            "seconds",
            "rows/s",
            "rows/s vs whole",
            "peak RSS MiB",
            "RSS growth MiB",
            "growth vs whole",
        ],
        table,
    )
    return {"rows": rows}


def main(argv: Sequence[str] | None = None) -> dict:
    return bench_main("splitter", __doc__.splitlines()[0], run, argv)


if __name__ == "__main__":
    main()
