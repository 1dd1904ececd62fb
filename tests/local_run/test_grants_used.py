"""Every grant is used: the IAM-checked local run over the test paths, function by function.

Each path is a whole local run of the real stack (cdk.out) with every handler call
evaluated against its role; after the run, the viewer and the sweeper are invoked as Lambda
would invoke them (under their own roles). A grant is unused when no path used it: the
intersection of each run's unused grants.

Paths:

- ``clean``: valid and invalid rows, every row classified; then the viewer lists uploads
  and failures (all, and one upload's) and the sweeper closes an upload past its deadline;
- ``refused``: every answer refused (LabelNotAllowed): dead letters, the recorder, the
  ledger's failed rows; then the viewer retries one;
- ``faults``: every request faulted, each event delivered twice, Lambda kills and
  throttles: transient retries, released records, the redrive queue, on-failure records;
- ``throttled`` and ``killed``: throttles and kills at high rates;
- ``unreachable``: the subscriber may not send to the buffer queue (an explicit Deny, as a
  bad policy edit would add), so every row goes to its on-failure queue and is recorded;
- ``batch-refused`` (issue 19): the refused path with every row sent by ``ClassifyBatch``
  (``--delivery batch``): staging, the tick, collection, dead letters from batch results,
  the key from the secret, a row moved to its redrive queue, and a viewer retry that goes
  by batch again; ``batch-unreachable``: the unreachable path with every row for it;
  ``batch-faults``: every row by batch, each event delivered twice, a kill around the
  create, and three faults of the batch step's own: one copy of a row moved to its redrive
  queue before its key was answered goes back to the buffer queue (``sqs:SendMessage``),
  the first staging of each key fails after its row was written, so its retry is spaced
  (``sqs:ChangeMessageVisibility``), and the first submission is never written, so the
  rows' redeliveries adopt them (``dynamodb:ConditionCheckItem``).

After the ``clean`` run the splitter also gets the same upload event again (answered from
its record), an event for an object deleted since (S3 answers 404 only with
``s3:ListBucket``; ``ObjectNotFound`` is recorded) and an event for an object whose reads
fail every time (the split raises, Powertools deletes its record, Lambda retries twice and
sends the on-failure record); and one row's message is moved to the redrive queue, as SQS
moves a message after ``maxReceiveCount``, and answered from there.
"""

from __future__ import annotations

import base64
import json
import multiprocessing
import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from constructs_lib.local_engine import identity
from constructs_lib.local_engine.event_bus import DEFAULT_BUS
from constructs_lib.local_engine.iam import DENIED_KEY, RolePolicies
from constructs_lib.local_engine.intrinsics import LOCAL_ACCOUNT, LOCAL_REGION
from constructs_lib.prospect_uploader.local_run import RunOptions
from constructs_lib.prospect_uploader.local_run.pipeline import LOCAL_API_KEY, LocalPipeline
from constructs_lib.prospect_uploader.local_run.s3_events import s3_object_created_event

from .conftest import FAST_CLOCK

pytestmark = pytest.mark.slow

HEADER = "email,first_name,last_name,company,title,country,notes"
ROWS = [
    "ada@example.com,Ada,Lovelace,Analytical Engines,CTO,GB,Wants a demo",
    "grace@example.com,Grace,Hopper,Navy,Rear Admiral,US,Budget approved",
    "alan@example.com,Alan,Turing,Bletchley,Researcher,GB,Just browsing",
    "not-an-email,Bad,Row,Co,CEO,US,",
]
#: The fault paths' local-run options, on the fast clock: at 1 s a minute the module took
#: 6-8 minutes of wall time, 20 s of CPU.
PATH_OPTIONS: dict[str, dict[str, Any]] = {
    "faults": {
        "fault_rate": 1.0,
        "seed": 5,
        "duplicates": 2,
        "kill_rate": 0.3,
        "throttle_rate": 0.3,
        "seconds_per_minute": FAST_CLOCK,
    },
    "throttled": {
        "fault_rate": 1.0,
        "seed": 5,
        "duplicates": 2,
        "throttle_rate": 0.9,
        "seconds_per_minute": FAST_CLOCK,
    },
    "killed": {"seed": 7, "kill_rate": 0.6, "throttle_rate": 0.3, "seconds_per_minute": FAST_CLOCK},
    # The subscriber retries 185 times, up to a minute apart, before its on-failure queue:
    # about 3 hours of AWS time, 9 s at this clock.
    "unreachable": {"seconds_per_minute": 0.05},
    # Message Batches (issue 19): the refused path again, every row sent by ClassifyBatch,
    # and the unreachable one.
    "batch-refused": {"delivery": "batch", "seconds_per_minute": FAST_CLOCK},
    "batch-unreachable": {"delivery": "batch", "seconds_per_minute": 0.05},
    # Seed 36 kills the run's first create before its batch id is recorded, and no other.
    "batch-faults": {
        "delivery": "batch",
        "duplicates": 2,
        "batch_create_kill_rate": 0.5,
        "seed": 36,
        "seconds_per_minute": FAST_CLOCK,
    },
}
#: Each path settles in 10-25 s on an idle 2-core machine; its derived bound (about 90 s) once
#: ran out in CI beside the 100,000-result memory test. This module checks grants, not the
#: bound (tests/local_run/test_run_bound.py does), so it allows more.
RUN_TIMEOUT_SECONDS = 300.0
#: Paths run at once, each in its own process (see ``unused``): they mostly wait, so more
#: than the machine's 2 cores; each run's CPU share stays far inside its bounds.
PATH_PROCESSES = 4
#: What every path imports, loaded once by the fork server its processes are forked from
#: (about 4 s of CPU a process when each imported them itself).
FORK_SERVER_PRELOAD = (
    "constructs_lib.prospect_uploader.local_run.pipeline",
    "constructs_lib.local_engine.engine",
    "anthropic",
    "aws_lambda_powertools.utilities.idempotency",
    "boto3",
    "moto",
    *(f"moto.{service}.models" for service in ("dynamodb", "events", "iam", "s3", "sns", "sqs")),
    "moto.secretsmanager.models",
)
#: The paths whose subscribers may not send to the buffer queues.
UNREACHABLE = ("unreachable", "batch-unreachable")
PATHS = ("clean", "refused", *PATH_OPTIONS)
POST_HEADERS = {"x-requested-with": "prospect-viewer", "content-type": "application/json"}
#: An object whose every read fails as S3 fails a GetObject of an archived object.
ARCHIVED_KEY = "archived.csv"
#: The role a subscriber delivers (and sends its failures) with, in the IAM check.
SUBSCRIBER_ROLE_PREFIX = "subscriber:"
#: The batch step's Powertools records (its batch items and hand-off records have a further
#: ``#`` after the prefix).
BATCH_RECORD_PREFIX = "ProspectUploader/ClassifyBatch#"


def _csv(tmp_path: Path) -> Path:
    path = tmp_path / "grants.csv"
    path.write_text("\n".join([HEADER, *ROWS]) + "\n", encoding="utf-8")
    return path


def _function(pipeline: LocalPipeline, suffix: str) -> tuple[str, Any]:
    assert pipeline.assembly is not None
    resource = pipeline.assembly.by_path_suffix(f"/{suffix}/Resource", "AWS::Lambda::Function")
    function = pipeline.engine.functions[resource.logical_id]
    return resource.logical_id, function


def _invoke(pipeline: LocalPipeline, suffix: str, event: dict[str, Any]) -> Any:
    """Invoke ``suffix`` (a function's construct path) as Lambda would, under its role."""
    logical_id, function = _function(pipeline, suffix)
    with identity.acting_as(logical_id):
        return function.handler(event, function.context("grants-test"))


def _viewer(pipeline: LocalPipeline, method: str, path: str, body: Any = None) -> dict:
    raw = json.dumps(body).encode() if body is not None else b""
    target, _, query = path.partition("?")
    event = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": target,
        "rawQueryString": query,
        "headers": {"host": "viewer.local", **(POST_HEADERS if body is not None else {})},
        "requestContext": {"http": {"method": method, "path": target, "sourceIp": "127.0.0.1"}},
        "body": base64.b64encode(raw).decode() if raw else None,
        "isBase64Encoded": bool(raw),
    }
    response = _invoke(pipeline, "Viewer", event)
    assert response["statusCode"] == 200, response
    return response


def _tables(pipeline: LocalPipeline) -> tuple[Any, Any]:
    engine = pipeline.engine
    dynamodb = engine.aws.session.resource("dynamodb")
    return (
        dynamodb.Table(engine.environment["FAILURES_TABLE_NAME"]),
        dynamodb.Table(engine.environment["UPLOADS_TABLE_NAME"]),
    )


def _browse_and_sweep(pipeline: LocalPipeline) -> None:
    failures, uploads = _tables(pipeline)
    [upload] = uploads.scan()["Items"]
    _viewer(pipeline, "GET", "/api/uploads")
    _viewer(pipeline, "GET", "/api/failures")
    _viewer(pipeline, "GET", f"/api/failures?upload_id={upload['upload_id']}")
    # The operator's clock: this upload is past its deadline, so the sweep closes it.
    # The operator's clock: this upload is past its deadline with its summary unsent, so
    # the sweep closes it and publishes the completion event.
    uploads.update_item(
        Key={"upload_id": upload["upload_id"]},
        UpdateExpression="SET sweep_shard = :shard, sweep_after = :due, #s = :open "
        "REMOVE summary_published_at",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":shard": "open", ":due": 0, ":open": "classifying"},
    )
    swept = _invoke(pipeline, "UploadSweeper", {"source": "aws.events"})
    assert swept["swept"] == {upload["upload_id"]: "completed"}, swept
    assert failures.scan()["Items"]


def _read_key_from_the_secret(pipeline: LocalPipeline) -> None:
    """As deployed: no ANTHROPIC_API_KEY, the step reads its secret (the local key)."""
    from moto.secretsmanager.models import secretsmanager_backends

    engine = pipeline.engine
    arn = engine.variable("ANTHROPIC_API_KEY_SECRET_ARN")
    name = arn.split(":secret:", 1)[1].rsplit("-", 1)[0]
    engine.aws.client("secretsmanager").create_secret(Name=name, SecretString=LOCAL_API_KEY)
    # moto picks its own random suffix; the deployed secret's is the one the role names.
    for secret in secretsmanager_backends[LOCAL_ACCOUNT][LOCAL_REGION].secrets.values():
        if secret.name == name:
            secret.arn = arn
    os.environ.pop("ANTHROPIC_API_KEY")


def _retry_one(pipeline: LocalPipeline) -> None:
    """Retry one refused row from the viewer; this time the model answers a label."""
    assert pipeline.model is not None
    pipeline.model.labels = ("hot", "warm", "cold")
    failures, _ = _tables(pipeline)
    model = [item for item in failures.scan()["Items"] if item.get("kind") == "model"]
    assert model, "no model failure to retry"
    item = model[0]
    _viewer(
        pipeline,
        "POST",
        "/api/retry",
        {
            "upload_id": item["upload_id"],
            "failure_id": item["failure_id"],
            "expected_generation": int(item.get("replay_generation") or 0),
        },
    )
    pipeline.engine.wait_until_settled()
    # The row's outcome since: its label, read from ProspectsTable (issue 36 item 1).
    _viewer(pipeline, "GET", f"/api/failures?upload_id={item['upload_id']}")


def _s3_event(pipeline: LocalPipeline, key: str) -> dict[str, Any]:
    assert pipeline.assembly is not None
    bucket = pipeline.engine.aws.ref(pipeline.assembly.upload_bucket().logical_id)
    head = pipeline.engine.aws.client("s3").head_object(Bucket=bucket, Key=key)
    return s3_object_created_event(
        bucket, key, head["ContentLength"], head["ETag"], head.get("VersionId")
    )


@contextmanager
def _archived_object_reads_fail(pipeline: LocalPipeline) -> Iterator[None]:
    """S3 answers every read of ARCHIVED_KEY as it answers a GetObject of an object in an
    archive storage class (403 InvalidObjectState), after the IAM check has evaluated it
    (the engine's hook slot comes after the check, and every client sees it). The test's own
    calls (made as the engine, no function) read it as it is."""

    def answer(model: Any, context: dict[str, Any], **_: Any) -> Any:
        params = context.get("grants-test.params") or {}
        if (
            model.service_model.service_name != "s3"
            or model.name not in ("GetObject", "HeadObject")
            or params.get("Key") != ARCHIVED_KEY
            or context.get(DENIED_KEY)
            or identity.current() is None
        ):
            return None
        response = AWSResponse("https://local-s3/", 403, {}, None)
        return response, {
            "Error": {
                "Code": "InvalidObjectState",
                "Message": "The operation is not valid for the object's storage class",
            },
            "ResponseMetadata": {"HTTPStatusCode": 403},
        }

    with pipeline.engine.hooks.added("grants-test.params", answer):
        yield


@contextmanager
def _batch_staging_faults(pipeline: LocalPipeline) -> Iterator[dict[str, Any]]:
    """Two DynamoDB faults of ``ClassifyBatch``'s staging, after the IAM check evaluated the
    call (open it after the pipeline):

    - the first DeleteItem of each of its Powertools records (the release of the key's lock
      once its row is staged) is applied and answered with a 500, as when the answer is
      lost: Powertools raises instead of the staging's Staged, so the message is a batch
      item failure whose retry is spaced (its attempt was claimed);
    - the first listing of a submission in the index fails (the SDK's retries exhausted),
      so it is never written: the rows staged under it are owned by a submission that never
      existed, and their redeliveries adopt them.

    Yields what fired: ``released`` (the records whose release answered a 500) and
    ``refused`` (the index listing that failed)."""
    released: set[str] = set()
    refused: list[str] = []
    dynamodb = pipeline.engine.aws.client("dynamodb")

    def error(status: int, code: str) -> Any:
        response = AWSResponse("https://local-dynamodb/", status, {}, None)
        return response, {
            "Error": {"Code": code, "Message": f"injected {code}"},
            "ResponseMetadata": {"HTTPStatusCode": status},
        }

    def answer(model: Any, context: dict[str, Any], **_: Any) -> Any:
        if (
            model.service_model.service_name != "dynamodb"
            or context.get(DENIED_KEY)
            or identity.current() is None  # the test's own calls, this hook's delete among them
        ):
            return None
        params = context.get("grants-test.staging") or {}
        record = str(((params.get("Key") or {}).get("id") or {}).get("S") or "")
        if model.name == "UpdateItem":
            # The listing's write also moves the item's expiration (issue 33): "SET ... ADD".
            listing = "ADD #open" in str(params.get("UpdateExpression") or "")
            if refused or record != BATCH_RECORD_PREFIX + "batch-index" or not listing:
                return None
            refused.append(record)
            return error(400, "ProvisionedThroughputExceededException")
        if model.name != "DeleteItem":
            return None
        if (
            not record.startswith(BATCH_RECORD_PREFIX)
            or "#" in record[len(BATCH_RECORD_PREFIX) :]
            or record in released
        ):
            return None
        released.add(record)
        dynamodb.delete_item(TableName=params["TableName"], Key=params["Key"])
        return error(500, "InternalServerError")

    # A tick of the schedule may have created the steps' clients already (the engine's
    # schedule starts with the pipeline), and a client never sees a hook registered after it:
    # the engine's slot was registered before any client.
    with pipeline.engine.hooks.added("grants-test.staging", answer):
        yield {"released": released, "refused": refused}


def _move_first_to_redrive(pipeline: LocalPipeline, step: str) -> None:
    """The first message sent to ``step``'s buffer queue goes to its redrive queue instead, as
    SQS moves a message after maxReceiveCount, before its key is answered."""
    queue = _buffer_queue(pipeline, step)
    redrive = queue.dead_letter
    assert redrive is not None
    send = queue.send
    moved: list[str] = []

    def divert(body: str, **kwargs: Any) -> Any:
        if moved:
            return send(body, **kwargs)
        moved.append(body)
        return redrive.send(body, **kwargs)

    queue.send = divert  # type: ignore[method-assign]


def _split_edge_cases(pipeline: LocalPipeline, upload_key: str) -> None:
    """The splitter's other answers: a duplicate event, a deleted object, a split that
    raises on every attempt (Lambda's retries, then its on-failure record)."""
    engine = pipeline.engine
    again = _s3_event(pipeline, upload_key)
    aws = engine.aws
    assert pipeline.assembly is not None
    bucket = aws.ref(pipeline.assembly.upload_bucket().logical_id)
    s3 = aws.client("s3")
    s3.put_object(Bucket=bucket, Key="deleted.csv", Body=b"email\n")
    deleted = _s3_event(pipeline, "deleted.csv")
    # The bucket is versioned: the event names a version, and that version is deleted.
    version = deleted["detail"]["object"]["version-id"]
    s3.delete_object(Bucket=bucket, Key="deleted.csv", VersionId=version)
    s3.put_object(
        Bucket=bucket, Key=ARCHIVED_KEY, Body=("\n".join([HEADER, *ROWS]) + "\n").encode()
    )
    archived = _s3_event(pipeline, ARCHIVED_KEY)
    failures, _ = _tables(pipeline)
    before = {item["failure_id"] for item in failures.scan()["Items"]}
    for event in (again, deleted, archived):
        assert engine.put_event(DEFAULT_BUS, event)
    engine.wait_until_settled()
    engine.drain_event_sources()
    codes = {
        item.get("error_code")
        for item in failures.scan()["Items"]
        if item["failure_id"] not in before
    }
    # The deleted object is recorded as such; the archived one, after Lambda's retries, by
    # its on-failure record (the recorder reads the split's error from it).
    assert "ObjectNotFound" in codes, codes
    assert len(codes) == 2, codes


def _local_queue(pipeline: LocalPipeline, path: str) -> Any:
    """The local queue of the stack's queue whose construct path ends in ``path``."""
    assert pipeline.assembly is not None
    resource = pipeline.assembly.by_path_suffix(f"/{path}/Resource", "AWS::SQS::Queue")
    queue = pipeline.engine.queues.by_url_or_arn(pipeline.engine.aws.ref(resource.logical_id))
    assert queue is not None
    return queue


def _buffer_queue(pipeline: LocalPipeline, step: str) -> Any:
    """The local buffer queue of the model step ``step`` (Classify or ClassifyBatch)."""
    return _local_queue(pipeline, f"{step}/BufferQueue")


def _redrive_one(pipeline: LocalPipeline, moved: list[str], step: str = "Classify") -> None:
    """Move one row's buffer message to the redrive queue, as SQS moves a message after the
    buffer's maxReceiveCount, and let the step answer it from there (from its record)."""
    assert moved
    queue = _buffer_queue(pipeline, step)
    assert queue.dead_letter is not None
    redrive = queue.dead_letter
    deleted = redrive.stats.deleted
    redrive.send(moved[0])
    pipeline.engine.wait_until_settled()
    assert redrive.stats.deleted == deleted + 1


def _keep_bodies(queue: Any) -> list[str]:
    """Observe (not change) what a local ``queue`` receives: the bodies, in order."""
    bodies: list[str] = []
    send = queue.send

    def keep(body: str, **kwargs: Any) -> str:
        bodies.append(body)
        return send(body, **kwargs)

    queue.send = keep  # type: ignore[method-assign]
    return bodies


def _recorder_closes_the_upload(pipeline: LocalPipeline, row_event: str) -> None:
    """The FailureRecorder counts an upload's last row and closes it: it reads the upload
    (``GetItem``), changes its status and publishes the completion event (``PutEvents``).

    Which write completes an upload is a race between the splitter's count of valid rows,
    the step's reports and the recorder's dead letters; the recorder wins it only in some
    runs. So this does not leave it to the run: the row of ``row_event`` (a row event the
    buffer queue received) is made the upload's last, its marker removed and the upload
    reopened one row short, and its dead letter arrives as a classic rule's DLQ sends it
    (the event, ``RULE_ARN``, ``TARGET_ARN``, ``ERROR_CODE``): a failure no step reports,
    so the recorder's count completes the upload."""
    engine = pipeline.engine
    _, uploads = _tables(pipeline)
    markers = engine.aws.session.resource("dynamodb").Table(
        engine.environment["UPLOAD_ROWS_TABLE_NAME"]
    )
    detail = json.loads(row_event)["detail"]
    key = {"upload_id": detail["upload_id"]}
    markers.delete_item(Key={**key, "row_number": detail["row_number"]})
    uploads.update_item(
        Key=key,
        UpdateExpression="SET #s = :open ADD classified_total :less REMOVE summary_published_at",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":open": "classifying", ":less": -1},
    )
    text, region, account = {"DataType": "String"}, LOCAL_REGION, LOCAL_ACCOUNT
    # FailureQueue: the subscribers' on-failure destination, the recorder's input.
    _local_queue(pipeline, "FailureQueue").send(
        row_event,
        attributes={
            "RULE_ARN": {**text, "StringValue": f"arn:aws:events:{region}:{account}:rule/Rows"},
            "TARGET_ARN": {**text, "StringValue": _buffer_queue(pipeline, "Classify").arn},
            "ERROR_CODE": {**text, "StringValue": "SQS.AccessDenied"},
            "ERROR_MESSAGE": {**text, "StringValue": "the rule may not send to its target"},
        },
    )
    engine.wait_until_settled()
    closed = uploads.get_item(Key=key, ConsistentRead=True)["Item"]
    assert closed["status"] == "completed" and "summary_published_at" in closed, closed


def _deny_buffer_to_subscriber(pipeline: LocalPipeline, step: str) -> str:
    """An explicit Deny of SendMessage on the buffer queues in every subscriber's role;
    returns ``step``'s buffer queue ARN (the one this path's rows go to)."""
    iam = pipeline.engine.iam
    assert iam is not None and pipeline.assembly is not None
    arns = [_buffer_queue(pipeline, step).arn for step in ("Classify", "ClassifyBatch")]
    deny = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Deny", "Action": "sqs:SendMessage", "Resource": arns}],
    }
    keys = [k for k in iam.roles if k.startswith(SUBSCRIBER_ROLE_PREFIX)]
    assert len(keys) == 2, keys
    for key in keys:
        role = iam.roles[key]
        iam.roles[key] = RolePolicies(role.function, role.role_name, [*role.documents, deny])
    return arns[("Classify", "ClassifyBatch").index(step)]


def _unused(cdk_out: Path, tmp_path: Path, path: str) -> dict[str, set[str]]:
    options: dict[str, Any] = PATH_OPTIONS.get(path, {})
    run_options = RunOptions(
        csv_path=_csv(tmp_path),
        cdk_out=cdk_out,
        log_file=tmp_path / "h.log",
        run_timeout_seconds=RUN_TIMEOUT_SECONDS,
        **options,
    )
    with LocalPipeline(run_options) as pipeline, _archived_object_reads_fail(pipeline):
        if path in ("refused", "batch-refused"):
            assert pipeline.model is not None
            pipeline.model.labels = ("lukewarm",)
            _read_key_from_the_secret(pipeline)
        step = "ClassifyBatch" if options.get("delivery") == "batch" else "Classify"
        denied = _deny_buffer_to_subscriber(pipeline, step) if path in UNREACHABLE else None
        bodies = _keep_bodies(_buffer_queue(pipeline, step))
        if path == "batch-faults":
            _move_first_to_redrive(pipeline, step)
            faults = _batch_staging_faults(pipeline)
        else:
            faults = nullcontext()
        with faults as fired:
            result = pipeline.run()
        if fired is not None:
            # Each fault fired (else the grants it exercises would look unused).
            assert fired["released"] and fired["refused"], fired
        iam = pipeline.engine.iam
        assert iam is not None
        if denied is not None:
            # Every row was denied the buffer, and every one ended in FailuresTable.
            assert {(d.action, d.resource) for d in iam.denials} == {("sqs:SendMessage", denied)}
            assert result.classified == 0 and result.failed == result.valid, result
            return {function: set(grants) for function, grants in iam.unused_grants().items()}
        assert result.denied == 0, result.denials
        if path == "batch-faults":
            # Every staging fault and the kill cost a receive, never a row or a second bill.
            assert result.batch_create_kills["before_batch_id_recorded"] == 1, result
            assert result.classified == result.valid == result.model_requests, result
        if path == "clean":
            _browse_and_sweep(pipeline)
            _split_edge_cases(pipeline, result.object_key)
            _redrive_one(pipeline, bodies)
            _recorder_closes_the_upload(pipeline, bodies[-1])
        if path == "batch-refused":
            _redrive_one(pipeline, bodies, step)
        if path in ("refused", "batch-refused"):
            _retry_one(pipeline)
        assert not iam.denials, iam.denials
        return {function: set(grants) for function, grants in iam.unused_grants().items()}


@pytest.fixture(scope="module")
def unused(cdk_out: Path, tmp_path_factory) -> dict[str, set[str]]:
    """Per function, the grants no path used.

    The paths run in :data:`PATH_PROCESSES` processes at a time: a path spends most of its
    wall time waiting on its run's clock (about 30 s of CPU over the ten paths against nearly
    3 minutes of wall time one after another), and a process gives it a moto, a model and
    IAM hooks no other path touches at once. The processes are forked from a fork server
    that imported this module and :data:`FORK_SERVER_PRELOAD` once (spawned, each imported
    them again); the server forks from a single thread, never from this threaded test
    process. An assertion failing in a path fails the fixture with that path's traceback."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__, *FORK_SERVER_PRELOAD])
    with ProcessPoolExecutor(PATH_PROCESSES, mp_context=context) as pool:
        futures = [
            pool.submit(_unused, cdk_out, tmp_path_factory.mktemp(path), path) for path in PATHS
        ]
        runs = [future.result() for future in futures]
    functions = set().union(*runs)
    return {f: set.intersection(*(run.get(f, set()) for run in runs)) for f in functions}


FUNCTIONS = [
    "Splitter",
    "Classify/Function",
    "FailureRecorder",
    "UploadSweeper",
    "Viewer",
    "Classify/Subscriber",
    "ClassifyBatch/Function",
    "ClassifyBatch/Subscriber",
]


def test_every_function_is_checked(unused):
    assert set(unused) == set(FUNCTIONS)


@pytest.mark.parametrize("function", FUNCTIONS)
def test_no_grant_of_the_function_is_unused_over_the_test_paths(unused, function):
    assert unused[function] == set()
