"""DynamoDB calls per new event and per duplicate event: ours vs check-then-act.

Every DynamoDB API call is counted with a botocore ``before-call.dynamodb`` hook registered on
the boto3 session both handlers' clients come from, so what is listed is what would be billed
and what needs IAM permission. moto stands in for DynamoDB; the model API is the fake.

Run: ``python -m bench.dynamodb_calls [--quick]``.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import baselines
from bench.harness import (
    NAIVE_TABLE,
    FakeLambdaContext,
    bench_main,
    create_idempotency_table,
    create_queue,
    fake_api,
    make_event,
    mocked_aws,
    patched_env,
    per_event_script,
    print_table,
    ratio,
    step_environment,
)

#: case -> (fake-API script per event, deliveries of the same event before the measured one)
CASES: dict[str, tuple[list[int], int]] = {
    "new event": ([], 0),
    "duplicate (answer stored)": ([], 1),
    "new event, model 529 (retryable)": ([-529], 0),
    # A non-retryable outcome is stored (PutItem + UpdateItem) and handed to the DLQ through
    # its own record (PutItem + UpdateItem); a duplicate replays both (two failed PutItems).
    "new event, model 400 (dead-lettered)": ([-400], 0),
    "duplicate of a dead-lettered event": ([-400], 1),
}


class CallRecorder:
    """Names of the DynamoDB operations made through a session, in order."""

    def __init__(self, session: Any) -> None:
        self._calls: list[str] = []
        self._lock = threading.Lock()
        # Registered on the session, so it applies to every client created from it afterwards.
        session.events.register("before-call.dynamodb", self._record)

    def _record(self, model: Any, **_: Any) -> None:
        with self._lock:
            self._calls.append(model.name)

    def take(self) -> list[str]:
        with self._lock:
            calls, self._calls = self._calls, []
        return calls


def count_calls(
    recorder: CallRecorder, handler: Callable[[dict, Any], Any], event: dict, warmups: int
) -> list[str]:
    """DynamoDB operations of one delivery of ``event`` after ``warmups`` earlier ones."""
    for _ in range(warmups):
        _invoke(handler, event)
    recorder.take()
    _invoke(handler, event)
    return recorder.take()


def _invoke(handler: Callable[[dict, Any], Any], event: dict) -> None:
    try:
        handler(event, FakeLambdaContext())
    except Exception:
        pass  # a retryable failure raises, as it should; only its DynamoDB calls matter here


def run(*, quick: bool = False, out_dir: Path | None = None) -> dict:
    # Deterministic per case, so --quick measures the same cases (it is already fast).
    rows: list[dict[str, Any]] = []
    with mocked_aws() as session:
        recorder = CallRecorder(session)
        create_idempotency_table(session)
        create_idempotency_table(session, NAIVE_TABLE)
        queue_url = create_queue(session)
        with fake_api() as api, patched_env(step_environment(queue_url, api.base_url)):
            from model_step import ModelStep, Settings

            handlers = {
                "ours": ModelStep(
                    settings=Settings.from_environment(), boto3_session=session
                ).handle,
                "check-then-act": baselines.CheckThenActHandler(session, NAIVE_TABLE),
            }
            recorder.take()  # table creation
            for case, (script, warmups) in CASES.items():
                api.script = per_event_script(script)
                row: dict[str, Any] = {"case": case}
                for name, handler in handlers.items():
                    event = make_event(f"upload-{uuid.uuid4().hex[:8]}", 1)
                    operations = count_calls(recorder, handler, event, warmups)
                    row[name] = {"calls": len(operations), "operations": operations}
                rows.append(row)
    print_table(
        "DynamoDB calls per delivery (botocore before-call hook)",
        ["case", "ours", "ours: operations", "check-then-act", "c-t-a: operations", "ours/c-t-a"],
        [
            [
                r["case"],
                r["ours"]["calls"],
                "+".join(r["ours"]["operations"]),
                r["check-then-act"]["calls"],
                "+".join(r["check-then-act"]["operations"]),
                ratio(r["ours"]["calls"], r["check-then-act"]["calls"]),
            ]
            for r in rows
        ],
    )
    return {"rows": rows}


def main(argv: Sequence[str] | None = None) -> dict:
    return bench_main("dynamodb_calls", __doc__.splitlines()[0], run, argv)


if __name__ == "__main__":
    main()
