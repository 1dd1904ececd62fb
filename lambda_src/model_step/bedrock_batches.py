"""Amazon Bedrock batch inference as a :class:`~.batch_provider.BatchProvider`.

A submission becomes one model invocation job (``bedrock`` control plane, boto3 through
the step's clients, one attempt per call: the core owns every retry):

- **create**: the requests are written as JSONL to the step's batch bucket,
  ``<BATCH_S3_PREFIX>input/<submission>.jsonl`` (one ``{"recordId", "modelInput"}`` a line,
  ``modelInput`` the InvokeModel body the realtime path sends), then
  ``CreateModelInvocationJob`` with ``clientRequestToken`` = the submission id
  (:attr:`idempotent_create`): a create repeated after a kill or a lost answer names the
  same job, never a second one. The output goes to
  ``<BATCH_S3_PREFIX>output/<submission>/``; the job runs as ``BATCH_ROLE_ARN`` for
  ``timeoutDurationInHours`` (:func:`.batch_limits.bedrock_timeout_hours`).
- **recordId**: the row's ``custom_id`` (a hash of its record key) re-encoded alphanumeric
  (Bedrock documents ``recordId`` as an alphanumeric string), one to one, so a line maps
  back to its row by id, never by its place in the file.
- **status**: one ``ListModelInvocationJobs`` a tick serves every job it looks at
  (``GetModelInvocationJob`` for a job the list does not hold): Submitted, Validating,
  Scheduled and InProgress are open; Stopping is canceling; Completed, PartiallyCompleted,
  Failed, Stopped and Expired have ended.
- **results**: ``<output>/<job id>/<input>.jsonl.out`` streamed from S3: ``modelOutput`` is a
  succeeded (billed) line; ``error: {errorCode, errorMessage}`` an errored one named as the
  realtime path names Bedrock's errors (a 4xx other than 408 and 429 is the request's own
  fault, stored as a dead letter; the others are retried within the key's budget). Every
  record of the input with no output line then gets one by the job's state: Stopped
  ``canceled`` and Expired ``expired`` (never billed: the attempt is given back), any other
  state ``errored`` ``BatchJobFailed`` (the attempt stays spent, as a realtime 5xx's).
- **cancel**: ``StopModelInvocationJob``; **delete**: the job's input and output objects in
  S3 (a job itself cannot be deleted; the bucket's lifecycle is the backstop).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlparse

from . import batch_limits, clock
from .batch_provider import (
    BatchCallFailed,
    BatchLine,
    BatchStatus,
    CreateRefused,
)
from .bedrock_batch_wire import (
    JOB_FAILED,
    call_failure,
    create_failure,
    custom_id_of_record,
    error_code,
    http_status,
    output_line,
    record_id_of,
)
from .client import BEDROCK_ANTHROPIC_VERSION
from .config import Settings
from .model_call import system_blocks
from .model_request import model_fields

#: Job states by the phase the core knows.
OPEN_STATES = frozenset({"Submitted", "Validating", "Scheduled", "InProgress"})
CANCELING_STATES = frozenset({"Stopping"})
ENDED_STATES = frozenset({"Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired"})
#: What a record with no output line in an ended job is, by the job's state.
MISSING_RECORD_KIND = {"Stopped": "canceled", "Expired": "expired"}
INPUT = "input/"
OUTPUT = "output/"
#: Every job this runtime creates is named ``model-step-<submission id>``.
JOB_NAME_PREFIX = "model-step-"
#: A tick reads its jobs' states from one ``ListModelInvocationJobs`` (paged) made at most
#: this long ago, instead of a ``Get`` a job: shorter than a tick's period, so each tick
#: lists afresh. A job the list does not hold is asked with ``Get``.
LIST_FRESH_SECONDS = 30.0
#: The list covers jobs submitted this long ago at most: a job's longest life (168 h) plus
#: the day the tick allows to collect it.
LIST_WINDOW_SECONDS = 8 * 86_400.0


class BedrockBatches:
    """Bedrock batch inference (see the module docstring)."""

    idempotent_create = True

    def __init__(self, settings: Settings, boto3_client: Any) -> None:
        if not settings.batch_bucket_name or not settings.batch_role_arn:
            raise ValueError("Bedrock batch delivery needs BATCH_BUCKET_NAME and BATCH_ROLE_ARN")
        self._settings = settings
        self._client = boto3_client
        self.quotas = batch_limits.bedrock_quotas(settings.max_event_age_seconds)
        self._bucket = settings.batch_bucket_name
        self._prefix = settings.batch_s3_prefix
        #: The last ``ListModelInvocationJobs``, by job ARN, and when it was made.
        self._snapshot: dict[str, dict[str, Any]] = {}
        self._snapshot_at = float("-inf")

    # -- requests --------------------------------------------------------------------------
    def request(self, custom_id: str, user_message: str) -> dict[str, Any]:
        """One JSONL record: the realtime InvokeModel body (``anthropic_version`` in it, no
        ``model``: the job names the model)."""
        settings = self._settings
        return {
            "recordId": record_id_of(custom_id),
            "modelInput": {
                "anthropic_version": BEDROCK_ANTHROPIC_VERSION,
                "max_tokens": settings.max_tokens,
                "system": system_blocks(settings),
                "messages": [{"role": "user", "content": user_message}],
                **model_fields(settings),
            },
        }

    def input_key(self, token: str) -> str:
        return f"{self._prefix}{INPUT}{token}.jsonl"

    def output_uri(self, token: str) -> str:
        return f"s3://{self._bucket}/{self._prefix}{OUTPUT}{token}/"

    def job_name(self, token: str) -> str:
        """A job name from the submission id (``[a-zA-Z0-9-+.]``, at most 63)."""
        return f"{JOB_NAME_PREFIX}{token}"[:63]

    def create(self, requests: list[dict[str, Any]], token: str) -> tuple[str, float]:
        """Write the input, then ``CreateModelInvocationJob`` once with ``token`` as its
        ``clientRequestToken``. An input write that fails creates nothing (refused, tried
        again after a wait); a create whose answer is lost is uncertain, and the core
        simply creates again with the same token."""
        body = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in requests)
        key = self.input_key(token)
        try:
            self._s3().put_object(Bucket=self._bucket, Key=key, Body=body.encode())
        except Exception as exc:
            raise CreateRefused(
                error_code(exc), status=http_status(exc), rows_at_fault=False, retry_after=60.0
            ) from exc
        settings = self._settings
        try:
            answer = self._bedrock().create_model_invocation_job(
                jobName=self.job_name(token),
                roleArn=settings.batch_role_arn,
                clientRequestToken=token,
                modelId=settings.model_id,
                inputDataConfig={
                    "s3InputDataConfig": {
                        "s3Uri": f"s3://{self._bucket}/{key}",
                        "s3InputFormat": "JSONL",
                    }
                },
                outputDataConfig={"s3OutputDataConfig": {"s3Uri": self.output_uri(token)}},
                timeoutDurationInHours=int(self.quotas.lifetime_seconds // 3600),
            )
        except Exception as exc:
            raise create_failure(exc) from exc
        return str(answer["jobArn"]), clock.now()

    def created_between(self, low: float, high: float, requests: int) -> list[tuple[str, float]]:
        """Jobs this step submitted between ``low`` and ``high`` (``ListModelInvocationJobs``
        by name and submit time) holding ``requests`` records; the core reconciles with a
        repeated create instead (:attr:`idempotent_create`), so this is for an operator."""
        found: list[tuple[str, float]] = []
        try:
            window = {"submitTimeAfter": _moment(low), "submitTimeBefore": _moment(high)}
            for job in self._step_jobs(**window):
                total = job.get("totalRecordCount")
                if total is None or int(total) == requests:
                    found.append((str(job["jobArn"]), _epoch(job.get("submitTime"))))
        except Exception as exc:
            raise call_failure(exc) from exc
        return found

    def status(self, batch_id: str) -> BatchStatus:
        """From the tick's ``ListModelInvocationJobs`` (one paged list serves every job the
        tick looks at), else ``GetModelInvocationJob``."""
        job = self._listed_job(batch_id) or self._job(batch_id)
        state = str(job.get("status"))
        phase = "ended" if state in ENDED_STATES else "open"
        if state in CANCELING_STATES:
            phase = "canceling"
        return BatchStatus(
            batch_id=batch_id,
            phase=phase,  # type: ignore[arg-type]
            created_at=_epoch(job.get("submitTime")),
            requests=int(job.get("totalRecordCount") or 0),
        )

    @contextmanager
    def results(self, batch_id: str) -> Iterator[Iterator[BatchLine]]:
        job = self._job(batch_id)
        state = str(job.get("status"))
        if state not in ENDED_STATES:
            raise BatchCallFailed(f"JobNotEnded:{state}")
        yield self._lines(job, state)

    def cancel(self, batch_id: str) -> None:
        try:
            self._bedrock().stop_model_invocation_job(jobIdentifier=batch_id)
        except Exception as exc:
            failure = call_failure(exc)
            if error_code(exc) in ("ValidationException", "ConflictException"):
                return  # ended (or stopping) already: nothing to stop
            raise failure from exc

    def delete(self, batch_id: str) -> None:
        """Delete the job's input and output objects (the prompts are row values)."""
        try:
            job = self._job(batch_id)
        except BatchCallFailed as failure:
            if failure.gone:
                return
            raise
        s3 = self._s3()
        try:
            bucket, key = _split(job["inputDataConfig"]["s3InputDataConfig"]["s3Uri"])
            s3.delete_object(Bucket=bucket, Key=key)
            out_bucket, out_prefix = _split(job["outputDataConfig"]["s3OutputDataConfig"]["s3Uri"])
            for page in s3.get_paginator("list_objects_v2").paginate(
                Bucket=out_bucket, Prefix=out_prefix
            ):
                for found in page.get("Contents", []):
                    s3.delete_object(Bucket=out_bucket, Key=found["Key"])
        except Exception as exc:
            raise call_failure(exc) from exc

    def _listed_job(self, batch_id: str) -> dict[str, Any] | None:
        """The job's summary from a list at most :data:`LIST_FRESH_SECONDS` old, listing the
        step's jobs of the last :data:`LIST_WINDOW_SECONDS` again when it is older; None when
        the list does not hold it or failed (the caller asks ``Get``)."""
        now = clock.now()
        if now - self._snapshot_at > LIST_FRESH_SECONDS:
            self._snapshot = {}
            self._snapshot_at = now
            try:
                for job in self._step_jobs(submitTimeAfter=_moment(now - LIST_WINDOW_SECONDS)):
                    self._snapshot[str(job["jobArn"])] = job
            except Exception:
                self._snapshot = {}  # each job is asked with Get instead
        return self._snapshot.get(batch_id)

    def _step_jobs(self, **submitted: Any) -> Iterator[dict[str, Any]]:
        """The summaries of this step's jobs (``ListModelInvocationJobs`` by name, every
        page), within the ``submitTimeAfter``/``submitTimeBefore`` bounds given."""
        paginator = self._bedrock().get_paginator("list_model_invocation_jobs")
        for page in paginator.paginate(nameContains=JOB_NAME_PREFIX, **submitted):
            yield from page.get("invocationJobSummaries", [])

    # -- reading ---------------------------------------------------------------------------
    def _lines(self, job: dict[str, Any], state: str) -> Iterator[BatchLine]:
        """The output lines, then a line for each input record the output does not hold."""
        s3 = self._s3()
        in_bucket, in_key = _split(job["inputDataConfig"]["s3InputDataConfig"]["s3Uri"])
        out_bucket, out_prefix = _split(job["outputDataConfig"]["s3OutputDataConfig"]["s3Uri"])
        job_id = str(job["jobArn"]).rsplit("/", 1)[-1]
        out_key = f"{out_prefix.rstrip('/')}/{job_id}/{in_key.rsplit('/', 1)[-1]}.out"
        seen: set[str] = set()
        # Listed first: a job that ended before answering (Failed, or Stopped early) may
        # write no output, and a GetObject of a missing key is a 403 to a caller whose
        # s3:ListBucket is limited to a prefix, never told apart from a denial.
        if not self._exists(s3, out_bucket, out_key):
            if state == "Completed":
                raise BatchCallFailed("OutputMissing")  # not visible yet: read again later
            out_key = ""
        for line in self._stream(s3, out_bucket, out_key) if out_key else ():
            record = json.loads(line)
            record_id = str(record.get("recordId") or "")
            if not record_id or record_id in seen:
                continue
            seen.add(record_id)
            yield output_line(record_id, record)
        kind = MISSING_RECORD_KIND.get(state, "errored")
        for line in self._stream(s3, in_bucket, in_key):
            record_id = str(json.loads(line).get("recordId") or "")
            if record_id and record_id not in seen:
                seen.add(record_id)
                error = JOB_FAILED if kind == "errored" else None
                yield BatchLine(custom_id_of_record(record_id), kind, error_type=error)

    @staticmethod
    def _exists(s3: Any, bucket: str, key: str) -> bool:
        """Whether ``key`` exists, by listing it (``s3:ListBucket`` on its prefix)."""
        try:
            found = s3.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
        except Exception as exc:
            raise call_failure(exc) from exc
        return any(item.get("Key") == key for item in found.get("Contents", []))

    def _stream(self, s3: Any, bucket: str, key: str) -> Iterator[bytes]:
        try:
            body = s3.get_object(Bucket=bucket, Key=key)["Body"]
        except Exception as exc:
            raise call_failure(exc) from exc
        try:
            for line in body.iter_lines():
                if line.strip():
                    yield line
        except Exception as exc:
            raise call_failure(exc) from exc
        finally:
            body.close()

    def _job(self, batch_id: str) -> dict[str, Any]:
        try:
            job: dict[str, Any] = self._bedrock().get_model_invocation_job(jobIdentifier=batch_id)
        except Exception as exc:
            raise call_failure(exc) from exc
        return job

    def _bedrock(self) -> Any:
        return self._client("bedrock")

    def _s3(self) -> Any:
        return self._client("s3")


def _split(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    return parsed.netloc, parsed.path.lstrip("/")


def _epoch(value: Any) -> float:
    if value is None:
        return clock.now()
    if hasattr(value, "timestamp"):
        return float(value.timestamp())
    return float(value)


def _moment(seconds: float) -> Any:
    import datetime as dt

    return dt.datetime.fromtimestamp(max(0.0, seconds), dt.UTC)
