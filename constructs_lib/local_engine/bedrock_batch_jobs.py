"""Amazon Bedrock batch inference's control plane on 127.0.0.1, its jobs run on the run's clock.

:class:`LocalBedrockBatchJobs` answers the four calls the step makes (issue 37) in the
``bedrock`` REST-JSON shape botocore speaks (point a client at it with ``endpoint_url`` or
``AWS_ENDPOINT_URL_BEDROCK``):

- ``POST /model-invocation-job`` (CreateModelInvocationJob): a SigV4 signature for service
  ``bedrock`` in the run's region (:mod:`constructs_lib.testing.sigv4`; refused 403 as
  Bedrock refuses), a ``timeoutDurationInHours`` of 24-168, a catalogued model id
  (``ValidationException`` otherwise). A repeated ``clientRequestToken`` answers the job it
  made first, and makes no second one ("ignored, not an error"); a create while
  :attr:`jobs_in_progress` jobs are submitted or running is refused
  ``ServiceQuotaExceededException``; every create is counted in :attr:`create_calls`, every
  job made in :attr:`jobs`;
- ``GET /model-invocation-job/{id}``, ``GET /model-invocation-jobs`` (newest first,
  ``nameContains``, ``submitTimeAfter/Before``, ``statusEquals``, pages of ``maxResults``)
  and ``POST /model-invocation-job/{id}/stop``.

A job moves on ``clock``: Submitted, then Validating (its input JSONL is read from S3 through
``s3()``, moto's in a local run; fewer records than ``min_records`` or an unreadable input is
Failed, as Bedrock fails it), InProgress, and ``processing_delay`` seconds after its
submission it ends: every record is answered (``answer(modelInput, recordId)``, a Messages
body) or errored (``decide(recordId, modelInput)``: ``"succeeded"`` or an ``errorCode`` int),
the output ``<output>/<job id>/<input name>.out`` and ``manifest.json.out`` are written to S3,
the lines in a seeded shuffled order (the step applies them by ``recordId``). Completed when
none errored, else PartiallyCompleted. A job not ended ``timeoutDurationInHours`` after its
submission is Expired. A stop makes it Stopping, then Stopped at the next look.

``end_state(job_number)`` injects how a job ends (the n-th job made, from 1): ``Failed``
(nothing answered), ``Stopped`` / ``Expired`` (a seeded half of the records answered, the
rest have no line), ``PartiallyCompleted`` or ``Completed``; None: as above. ``create_faults``
(consumed in order, or ``create_fault_hook``): ``"disconnect"`` (closed unanswered, nothing
made), ``"disconnect_after_create"`` / ``"error_after_create"`` (the job IS made, then the
connection closes / a 500 answers), or a Bedrock error name (its status, nothing made).
:attr:`stuck`: jobs neither end nor expire until they are stopped.

Only answered records are billed (:attr:`billed_by_record`, by ``recordId``), as Bedrock
bills.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from constructs_lib.testing.bedrock_api import ERROR_STATUSES, error_headers
from constructs_lib.testing.sigv4 import SignatureError, check_signature

from .intrinsics import LOCAL_REGION
from .loopback import LoopbackServer, send_json

OPEN = ("Submitted", "Validating", "Scheduled", "InProgress", "Stopping")
ENDED = ("Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired")
#: Bedrock's range of ``timeoutDurationInHours``.
TIMEOUT_HOURS = (24, 168)
#: The Service Quotas defaults "Minimum number of records per batch inference job" and
#: "Sum of in-progress and submitted batch inference jobs using a base model".
MIN_RECORDS = 100
JOBS_IN_PROGRESS = 20
ACCOUNT = "123456789012"

#: ``(modelInput, recordId, the job's modelId) -> Messages body``.
Answer = Callable[[dict[str, Any], str, str], dict[str, Any]]
Decide = Callable[[str, dict[str, Any]], "str | int"]


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _split(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    return parsed.netloc, parsed.path.lstrip("/")


@dataclass
class Job:
    """One model invocation job."""

    number: int
    arn: str
    name: str
    token: str | None
    model_id: str
    role_arn: str
    input_uri: str
    output_uri: str
    timeout_hours: int
    submitted_at: float
    status: str = "Submitted"
    message: str | None = None
    ended_at: float | None = None
    stop_requested: bool = False
    records: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    answered: int = 0
    errored: int = 0

    @property
    def job_id(self) -> str:
        return self.arn.rsplit("/", 1)[-1]

    def describe(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "jobArn": self.arn,
            "jobName": self.name,
            "modelId": self.model_id,
            "roleArn": self.role_arn,
            "status": self.status,
            "submitTime": _iso(self.submitted_at),
            "lastModifiedTime": _iso(self.ended_at or self.submitted_at),
            "inputDataConfig": {
                "s3InputDataConfig": {"s3Uri": self.input_uri, "s3InputFormat": "JSONL"}
            },
            "outputDataConfig": {"s3OutputDataConfig": {"s3Uri": self.output_uri}},
            "timeoutDurationInHours": self.timeout_hours,
            "jobExpirationTime": _iso(self.submitted_at + self.timeout_hours * 3600),
        }
        if self.token:
            found["clientRequestToken"] = self.token
        if self.message:
            found["message"] = self.message
        if self.ended_at is not None:
            found["endTime"] = _iso(self.ended_at)
        if self.records:
            found["totalRecordCount"] = len(self.records)
            found["processedRecordCount"] = self.answered + self.errored
            found["successRecordCount"] = self.answered
            found["errorRecordCount"] = self.errored
        return found


class JobError(Exception):
    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name
        self.message = message


class LocalBedrockBatchJobs(LoopbackServer):
    """The stand-in (see the module docstring). Parameters: ``s3`` (a boto3 S3 client
    factory), ``answer``, ``decide`` [all succeeded], ``clock`` [``time.time``],
    ``processing_delay`` [60 s], ``min_records`` [:data:`MIN_RECORDS`], ``region`` [the
    run's], ``seed`` [0], ``models`` [None: any model id; else the ids accepted],
    ``hour_seconds`` [3600: seconds of ``clock`` per hour of a job's timeout]."""

    thread_name = "local-bedrock-batch"

    def __init__(
        self,
        s3: Callable[[], Any],
        answer: Answer,
        *,
        decide: Decide | None = None,
        clock: Callable[[], float] = time.time,
        processing_delay: float = 60.0,
        min_records: int = MIN_RECORDS,
        region: str = LOCAL_REGION,
        seed: int = 0,
        models: frozenset[str] | None = None,
        hour_seconds: float = 3600.0,
    ) -> None:
        super().__init__()
        self.s3 = s3
        self.answer = answer
        self.decide: Decide = decide or (lambda record_id, model_input: "succeeded")
        self.clock = clock
        self.processing_delay = processing_delay
        self.min_records = min_records
        self.region = region
        self.seed = seed
        self.models = models
        #: Seconds of ``clock`` per hour of ``timeoutDurationInHours`` (a run's clock).
        self.hour_seconds = hour_seconds
        #: "Sum of in-progress and submitted batch inference jobs using a base model": a
        #: create past it is refused ``ServiceQuotaExceededException``.
        self.jobs_in_progress = JOBS_IN_PROGRESS
        #: ``job number -> end state or None``.
        self.end_state: Callable[[int], str | None] = lambda number: None
        self.create_faults: list[str] = []
        #: Jobs neither end nor expire until stopped (a stuck job).
        self.stuck = False
        self.create_fault_hook: Callable[[], str | None] | None = None
        self.jobs: dict[str, Job] = {}
        self.by_token: dict[str, str] = {}
        self.create_calls = 0
        self.stop_calls = 0
        #: Calls answered, by operation (``CreateModelInvocationJob``, ``Get...``, ...).
        self.calls: Counter[str] = Counter()
        self.billed_by_record: Counter[str] = Counter()
        self.refused: list[str] = []
        self._lock = threading.RLock()

    @property
    def billed(self) -> int:
        return sum(self.billed_by_record.values())

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        return _handler_class(self)

    # -- the calls -------------------------------------------------------------------------
    def create(self, body: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """``(answer, fault after the job is made or None)``; raises :class:`JobError`."""
        with self._lock:
            self.create_calls += 1
            fault = self.create_faults.pop(0) if self.create_faults else None
            if fault is None and self.create_fault_hook is not None:
                fault = self.create_fault_hook()
            if fault is not None and fault not in ("disconnect_after_create", "error_after_create"):
                raise JobError(fault, f"local bedrock: injected {fault}")
            token = body.get("clientRequestToken")
            if token and token in self.by_token:
                return {"jobArn": self.by_token[token]}, fault
            for job in self.jobs.values():
                self._advance(job)
            running = sum(job.status in OPEN for job in self.jobs.values())
            if running >= self.jobs_in_progress:
                raise JobError(
                    "ServiceQuotaExceededException",
                    f"the account has {running} batch inference jobs submitted or in progress "
                    f"for this model, its quota",
                )
            hours = body.get("timeoutDurationInHours", 24)
            if not isinstance(hours, int) or not TIMEOUT_HOURS[0] <= hours <= TIMEOUT_HOURS[1]:
                raise JobError(
                    "ValidationException",
                    f"timeoutDurationInHours must be between {TIMEOUT_HOURS[0]} and "
                    f"{TIMEOUT_HOURS[1]}",
                )
            model_id = str(body.get("modelId") or "")
            if self.models is not None and model_id not in self.models:
                raise JobError("ValidationException", "The provided model identifier is invalid.")
            for name in ("jobName", "roleArn"):
                if not body.get(name):
                    raise JobError("ValidationException", f"{name} is required")
            job_id = uuid.uuid4().hex[:12]
            job = Job(
                number=len(self.jobs) + 1,
                arn=f"arn:aws:bedrock:{self.region}:{ACCOUNT}:model-invocation-job/{job_id}",
                name=str(body["jobName"]),
                token=token,
                model_id=model_id,
                role_arn=str(body["roleArn"]),
                input_uri=body["inputDataConfig"]["s3InputDataConfig"]["s3Uri"],
                output_uri=body["outputDataConfig"]["s3OutputDataConfig"]["s3Uri"],
                timeout_hours=hours,
                submitted_at=self.clock(),
            )
            self.jobs[job.arn] = job
            if token:
                self.by_token[token] = job.arn
            return {"jobArn": job.arn}, fault

    def get(self, identifier: str) -> dict[str, Any]:
        with self._lock:
            job = self._job(identifier)
            self._advance(job)
            return job.describe()

    def list_jobs(self, query: dict[str, list[str]]) -> dict[str, Any]:
        with self._lock:
            jobs = sorted(self.jobs.values(), key=lambda j: j.submitted_at, reverse=True)
            for job in jobs:
                self._advance(job)
            name = (query.get("nameContains") or [""])[0]
            after = query.get("submitTimeAfter")
            before = query.get("submitTimeBefore")
            status = (query.get("statusEquals") or [""])[0]
            found = [
                j
                for j in jobs
                if name in j.name
                and (not after or j.submitted_at >= _parse_time(after[0]))
                and (not before or j.submitted_at <= _parse_time(before[0]))
                and (not status or j.status == status)
            ]
            size = int((query.get("maxResults") or ["100"])[0])
            start = int((query.get("nextToken") or ["0"])[0])
            page = found[start : start + size]
            answer: dict[str, Any] = {"invocationJobSummaries": [j.describe() for j in page]}
            if start + size < len(found):
                answer["nextToken"] = str(start + size)
            return answer

    def stop_job(self, identifier: str) -> None:
        with self._lock:
            self.stop_calls += 1
            job = self._job(identifier)
            self._advance(job)
            if job.status in ENDED:
                raise JobError("ValidationException", f"the job is {job.status}")
            job.status = "Stopping"
            job.stop_requested = True

    def _job(self, identifier: str) -> Job:
        for job in self.jobs.values():
            if identifier in (job.arn, job.job_id):
                return job
        raise JobError("ResourceNotFoundException", "The specified job was not found.")

    # -- running a job on the clock --------------------------------------------------------
    def _advance(self, job: Job) -> None:
        if job.status in ENDED:
            return
        now = self.clock()
        if job.status == "Submitted":
            job.status = "Validating"
            if not self._read_input(job):
                return
            job.status = "InProgress"
        if job.stop_requested:
            self._end(job, "Stopped", now)
            return
        if self.stuck:
            return
        if now - job.submitted_at >= job.timeout_hours * self.hour_seconds:
            self._end(job, "Expired", now)
            return
        if now - job.submitted_at >= self.processing_delay:
            self._end(job, self.end_state(job.number) or "", now)

    def _read_input(self, job: Job) -> bool:
        bucket, key = _split(job.input_uri)
        try:
            raw = self.s3().get_object(Bucket=bucket, Key=key)["Body"].read()
            records = [json.loads(line) for line in raw.splitlines() if line.strip()]
        except Exception as exc:
            self._fail(job, f"the input could not be read: {type(exc).__name__}")
            return False
        job.records = [(str(r["recordId"]), r["modelInput"]) for r in records]
        if len(job.records) < self.min_records:
            self._fail(
                job,
                f"the job has {len(job.records)} records; the minimum per job is "
                f"{self.min_records}",
            )
            return False
        return True

    def _fail(self, job: Job, message: str) -> None:
        job.status, job.message, job.ended_at = "Failed", message, self.clock()

    def _end(self, job: Job, state: str, now: float) -> None:
        """Answer the job's records (all, or a seeded half when it is stopped or expires),
        write the output and the manifest, and end it in ``state`` ('' : by its errors)."""
        if state == "Failed":
            self._fail(job, "local bedrock: injected Failed")
            return
        rng = random.Random(f"{self.seed}:{job.number}")
        records = list(job.records)
        if state in ("Stopped", "Expired"):
            rng.shuffle(records)
            records = records[: len(records) // 2]
        lines: list[dict[str, Any]] = []
        for record_id, model_input in records:
            verdict = self.decide(record_id, model_input)
            if verdict == "succeeded":
                output = self.answer(model_input, record_id, job.model_id)
                self.billed_by_record[record_id] += 1
                job.answered += 1
                lines.append(
                    {"recordId": record_id, "modelInput": model_input, "modelOutput": output}
                )
            else:
                job.errored += 1
                code = int(verdict)
                lines.append(
                    {
                        "recordId": record_id,
                        "modelInput": model_input,
                        "error": {"errorCode": code, "errorMessage": f"injected {code}"},
                    }
                )
        rng.shuffle(lines)
        self._write_output(job, lines)
        job.status = state or ("PartiallyCompleted" if job.errored else "Completed")
        job.ended_at = now

    def _write_output(self, job: Job, lines: list[dict[str, Any]]) -> None:
        bucket, prefix = _split(job.output_uri)
        _, input_key = _split(job.input_uri)
        folder = f"{prefix.rstrip('/')}/{job.job_id}/"
        body = "".join(json.dumps(line) + "\n" for line in lines).encode()
        s3 = self.s3()
        s3.put_object(Bucket=bucket, Key=folder + input_key.rsplit("/", 1)[-1] + ".out", Body=body)
        manifest = {
            "totalRecordCount": len(job.records),
            "processedRecordCount": len(lines),
            "successRecordCount": job.answered,
            "errorRecordCount": job.errored,
            "inputTokenCount": 0,
            "outputTokenCount": 0,
        }
        s3.put_object(Bucket=bucket, Key=folder + "manifest.json.out", Body=json.dumps(manifest))


def _handler_class(api: LocalBedrockBatchJobs) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            return

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {name.lower(): value for name, value in self.headers.items()}
            signed = check_signature(
                method, self.path, headers, raw, service="bedrock", region=api.region
            )
            if isinstance(signed, SignatureError):
                with api._lock:
                    api.refused.append(signed.error_type)
                self._error(403, signed.error_type, signed.message)
                return
            parsed = urlparse(self.path)
            parts = [unquote(p) for p in parsed.path.strip("/").split("/")]
            with api._lock:
                api.calls[_operation(method, parts)] += 1
            try:
                if method == "POST" and parts == ["model-invocation-job"]:
                    self._create(json.loads(raw or b"{}"))
                    return
                if method == "GET" and len(parts) == 2 and parts[0] == "model-invocation-job":
                    self._send(200, api.get(parts[1]))
                    return
                if method == "GET" and parts == ["model-invocation-jobs"]:
                    self._send(200, api.list_jobs(parse_qs(parsed.query)))
                    return
                if method == "POST" and len(parts) == 3 and parts[2] == "stop":
                    api.stop_job(parts[1])
                    self._send(200, {})
                    return
            except JobError as error:
                if error.name == "disconnect":
                    self.close_connection = True
                    return
                self._error(ERROR_STATUSES.get(error.name, 400), error.name, error.message)
                return
            self._error(404, "UnknownOperationException", f"{method} {parsed.path}")

        def _create(self, body: dict[str, Any]) -> None:
            answer, fault = api.create(body)
            if fault == "disconnect_after_create":
                self.close_connection = True
                return
            if fault == "error_after_create":
                self._error(500, "InternalServerException", "local bedrock: injected 500")
                return
            self._send(200, answer)

        def _error(self, status: int, name: str, message: str) -> None:
            request_id = str(uuid.uuid4())
            send_json(self, status, {"message": message}, error_headers(name, request_id))

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            send_json(self, status, payload, {"x-amzn-requestid": str(uuid.uuid4())})

    return Handler


def _operation(method: str, parts: list[str]) -> str:
    """The API operation a request path names."""
    if parts == ["model-invocation-jobs"]:
        return "ListModelInvocationJobs"
    if method == "POST" and parts == ["model-invocation-job"]:
        return "CreateModelInvocationJob"
    if method == "POST" and parts[-1:] == ["stop"]:
        return "StopModelInvocationJob"
    return "GetModelInvocationJob" if method == "GET" else "Unknown"
