"""A misconfigured deployment is loud at once and loses nothing (issue 36, item 6).

GIVEN the real handler on moto, with a botocore hook (registered on the session BEFORE the
step creates its clients: botocore copies a session's handlers into a client) that refuses one
call of the step's own table, queue or secret as IAM or the service would, WHEN rows are
delivered, THEN the refusal is one ERROR line per container naming the action and resource, a
``ConfigurationErrors`` metric on every delivery, no dead letter, no model request, a spaced
retry on the buffer queue; and once the refusal stops, the row completes with one request.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import pytest
from botocore.exceptions import ClientError
from model_step import misconfiguration

from .conftest import TABLE, FakeLambdaContext, boto3_session, fresh_event, log_records


class Refusal:
    """Refuses ``service.operation`` with ``code`` while ``on``; counts what it refused."""

    def __init__(self, service: str, operation: str, code: str) -> None:
        self.event = f"before-parameter-build.{service}.{operation}"
        self.operation = operation
        self.code = code
        self.on = True
        self.refused = 0

    def __call__(self, params, **_kwargs):
        if self.on:
            self.refused += 1
            raise ClientError(
                {"Error": {"Code": self.code, "Message": "is not authorized to perform"}},
                self.operation,
            )

    @classmethod
    @contextlib.contextmanager
    def installed(cls, service: str, operation: str, code: str) -> Iterator[Refusal]:
        refusal = cls(service, operation, code)
        hooks = boto3_session().events
        hooks.register(refusal.event, refusal)
        try:
            yield refusal
        finally:
            hooks.unregister(refusal.event, refusal)


@pytest.fixture(autouse=True)
def new_container() -> Iterator[None]:
    """Each test is a fresh container: nothing reported yet."""
    misconfiguration._reported.clear()
    yield
    misconfiguration._reported.clear()


@pytest.fixture
def put_item_denied(model_env) -> Iterator[Refusal]:
    """The issue's case: dynamodb:PutItem stripped from the step's role."""
    with Refusal.installed("dynamodb", "PutItem", "AccessDeniedException") as refusal:
        yield refusal


def _metrics(out: str) -> list[str]:
    names = []
    for line in out.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            document = json.loads(line)
            names += [
                m["Name"] for d in document["_aws"]["CloudWatchMetrics"] for m in d["Metrics"]
            ]
    return names


def _configuration_lines(log_capture) -> list[dict]:
    return [r for r in log_records(log_capture) if r.get("outcome") == "configuration_error"]


def test_a_denied_put_item_waits_for_the_fix_and_then_completes(
    make_step, fake_api, model_env, buffer, put_item_denied, log_capture, capsys
):
    step = make_step()
    event = fresh_event()

    # WHEN three copies of the row are delivered while the grant is missing
    for _ in range(3):
        batch = buffer.batch(event)
        response = step.handle(batch, FakeLambdaContext())
        # THEN each is left to its queue (a batch item failure), never dead-lettered
        assert response == {
            "batchItemFailures": [{"itemIdentifier": batch["Records"][0]["messageId"]}]
        }

    # ... one ERROR line for the container, with the action and the resource
    [line] = _configuration_lines(log_capture)
    assert line["levelname"] == "ERROR"
    assert (line["action"], line["resource"]) == ("dynamodb:PutItem", TABLE)
    assert line["error_type"] == "AccessDeniedException"
    assert line["message"].startswith(
        f"configuration error: the step may not call dynamodb:PutItem on {TABLE} "
    )
    assert "upload-001" not in json.dumps(line)  # never a row value
    assert not [r for r in log_records(log_capture) if r.get("outcome") == "retry"]
    # ... a metric on every delivery, and no transient failure counted
    metrics = _metrics(capsys.readouterr().out)
    assert metrics.count("ConfigurationErrors") == 3
    assert "TransientFailures" not in metrics and "NonRetryableFailures" not in metrics
    # ... no dead letter, no model request, no budget spent, nothing stored for the key
    assert model_env.dead_letters() == []
    assert fake_api.request_count == 0
    assert model_env.idempotency_items() == []
    # ... and a spaced retry: minutes, not the queue's visibility timeout
    changes = buffer.visibility_changes()
    assert [c["VisibilityTimeout"] for c in changes] == [300, 300, 300]
    assert buffer.requeued() == []  # the row is never copied: SQS bounds its receives

    # WHEN the grant is fixed and the row comes back
    put_item_denied.on = False
    response = step.handle(buffer.batch(event), FakeLambdaContext())

    # THEN it completes with exactly one billed request
    assert response == {"batchItemFailures": []}
    assert fake_api.request_count == 1
    assert model_env.dead_letters() == []


def test_a_new_container_logs_it_again(make_step, fake_api, buffer, put_item_denied, log_capture):
    make_step().handle(buffer.batch(fresh_event()), FakeLambdaContext())
    make_step().handle(buffer.batch(fresh_event(row_number=2)), FakeLambdaContext())
    assert len(_configuration_lines(log_capture)) == 1  # one process, one container

    misconfiguration._reported.clear()  # a cold start
    make_step().handle(buffer.batch(fresh_event(row_number=3)), FakeLambdaContext())
    assert len(_configuration_lines(log_capture)) == 2


def test_a_missing_secret_is_a_configuration_error_on_the_direct_path(
    make_step, fake_api, model_env, log_capture
):
    with Refusal.installed("secretsmanager", "GetSecretValue", "ResourceNotFoundException"):
        step = make_step()
        for _ in range(2):  # Lambda's async retry: raised, so it is retried
            with pytest.raises(Exception):  # noqa: B017 (Powertools' wrapper)
                step.handle(fresh_event(), FakeLambdaContext())

    [line] = _configuration_lines(log_capture)
    assert (line["action"], line["resource"]) == (
        "secretsmanager:GetSecretValue",
        model_env.secret_arn,
    )
    assert model_env.dead_letters() == [] and fake_api.request_count == 0


def test_a_row_on_the_redrive_queue_is_left_to_its_redrive_policy(
    make_step, fake_api, model_env, buffer, redrive, put_item_denied, log_capture
):
    """No copy back on the buffer queue: a refusal spends no budget, so a copy would loop
    buffer -> redrive -> buffer forever. Raised, the row goes on to the DLQ by the redrive
    policy after its receives, its body whole and its key unspent."""
    event = fresh_event()
    response = make_step().handle(redrive.batch(event, receive_count=1), FakeLambdaContext())

    assert response["batchItemFailures"]
    assert buffer.requeued() == [] and buffer.visibility_changes() == []
    assert model_env.dead_letters() == [] and fake_api.request_count == 0
    assert len(_configuration_lines(log_capture)) == 1


@pytest.mark.parametrize(
    ("service", "operation", "code"),
    [
        ("dynamodb", "UpdateItem", "ResourceNotFoundException"),
        ("dynamodb", "PutItem", "KMSAccessDeniedException"),
    ],
)
def test_other_codes_of_the_table_are_configuration_errors(
    make_step, fake_api, model_env, buffer, log_capture, service, operation, code
):
    with Refusal.installed(service, operation, code):
        response = make_step().handle(buffer.batch(fresh_event()), FakeLambdaContext())

    assert response["batchItemFailures"]
    [line] = _configuration_lines(log_capture)
    assert (line["action"], line["error_type"]) == (f"{service}:{operation}", code)
    assert model_env.dead_letters() == []


def test_a_throttle_is_still_transient(make_step, fake_api, buffer, log_capture):
    with Refusal.installed("dynamodb", "PutItem", "ProvisionedThroughputExceededException"):
        make_step().handle(buffer.batch(fresh_event()), FakeLambdaContext())

    assert _configuration_lines(log_capture) == []
    assert [r["outcome"] for r in log_records(log_capture) if r.get("outcome")] == ["retry"]


def test_the_codes_name_a_refusal_or_a_missing_resource_never_a_throttle():
    codes = misconfiguration.CONFIGURATION_ERROR_CODES
    assert {"AccessDenied", "AccessDeniedException", "ResourceNotFoundException"} <= codes
    assert {"QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue"} <= codes
    assert not {c for c in codes if "Throttl" in c or "Exceeded" in c}


def test_a_denied_re_enqueue_is_a_configuration_error_and_the_row_stays_on_its_queue(
    make_step, fake_api, model_env, buffer, log_capture, capsys
):
    """A 429 puts the row back on the buffer queue with its wait (``sqs:SendMessage``): a
    role without that grant is told at once, and the row stays where it is, never lost and
    never dead-lettered as a model failure; the 429 spent no attempt."""
    fake_api.script = [429, 200]
    step = make_step()
    event = fresh_event()
    with Refusal.installed("sqs", "SendMessage", "AccessDenied"):
        batch = buffer.batch(event)
        response = step.handle(batch, FakeLambdaContext())

    assert response == {"batchItemFailures": [{"itemIdentifier": batch["Records"][0]["messageId"]}]}
    [line] = _configuration_lines(log_capture)
    assert (line["action"], line["resource"]) == ("sqs:SendMessage", buffer.url)
    assert "ConfigurationErrors" in _metrics(capsys.readouterr().out)
    assert model_env.dead_letters() == [] and buffer.requeued() == []
    # ... and it waits minutes for the fix, not the 429's seconds
    assert [c["VisibilityTimeout"] for c in buffer.visibility_changes()] == [300]

    # WHEN the grant is fixed and the row comes back, THEN one billed request answers it
    assert step.handle(buffer.batch(event), FakeLambdaContext()) == {"batchItemFailures": []}
    assert fake_api.request_count == 2  # the 429 (not billed) and the answer
    assert model_env.dead_letters() == []
