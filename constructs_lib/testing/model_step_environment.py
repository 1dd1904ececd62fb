"""A model step handler's world, in one process: moto for AWS, a fake Messages API for the model.

``IdempotentModelStep`` gives its function an idempotency table, a dead-letter queue, the API
key secret and a set of environment variables. :func:`model_step_environment` makes the same
in moto and sets the same variables, pointed at a :class:`FakeMessagesAPI`, so a custom
handler runs its real code path (Powertools idempotency, the Anthropic SDK over HTTP, the
dead-letter send) in a unit test. Needs the ``local`` extra (moto, boto3, anthropic,
aws-lambda-powertools).
"""

from __future__ import annotations

import importlib
import json
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from constructs_lib._runtime_environment import runtime_environment as env
from constructs_lib.local_engine.environment import patched_environ
from constructs_lib.system_prompt_asset import system_prompt_on_path

from .lambda_context import FakeLambdaContext
from .messages_api import FakeMessagesAPI
from .runtime_import import LOCAL_EXTRA_HINT, RUNTIME_PACKAGE, RuntimeImportError, runtime_on_path

__all__ = ["LocalModelStep", "model_step_environment"]

REGION = "us-east-1"
TABLE_NAME = "model-step-idempotency"
DEAD_LETTER_QUEUE_NAME = "model-step-dead-letters"
SECRET_NAME = "model-step-api-key"
SECRET_VALUE = "sk-ant-test-key-for-the-fake-messages-api"

#: Variables from the developer's shell that would send the handler to real AWS or the real
#: API, or change how it authenticates or which path it takes.
_CLEARED = (
    env.ANTHROPIC_API_KEY,
    "ANTHROPIC_AUTH_TOKEN",
    "AWS_PROFILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_ENDPOINT_URL_SQS",
    "AWS_ENDPOINT_URL_SECRETS_MANAGER",
    env.BUFFER_QUEUE_URL,
    env.REDRIVE_QUEUE_ARN,
)


@dataclass
class LocalModelStep:
    """The environment :func:`model_step_environment` made: load a handler, make its inputs,
    read what it left behind."""

    #: The fake Messages API the handler calls.
    api: FakeMessagesAPI
    #: The variables set for the handler (what the construct would set, and yours).
    environ: dict[str, str]
    #: A moto DynamoDB client (the idempotency table).
    dynamodb: Any
    #: A moto SQS client (the dead-letter queue).
    sqs: Any

    def handler(self, name: str) -> Callable[[Any, Any], Any]:
        """The function ``"<package>.<module>.<function>"`` (the construct's ``handler``
        string), imported afresh as a Lambda cold start imports it.

        Your package's modules are dropped from ``sys.modules`` first, so a step built at
        module level reads this environment on its first event. For the library's own
        ``"model_step.handler.handler"`` only that module is reloaded: the runtime's classes
        (the exceptions you may import in a test) stay the same objects.
        """
        module_name, _, function = name.rpartition(".")
        package = module_name.split(".", 1)[0]
        if "." not in module_name:
            raise ValueError(f"handler must be '<package>.<module>.<function>', got {name!r}")
        if package == RUNTIME_PACKAGE:
            stale = [module_name]
        else:
            stale = [m for m in sys.modules if m.split(".", 1)[0] == package]
        for loaded in stale:
            sys.modules.pop(loaded, None)
        loaded_handler: Callable[[Any, Any], Any] = getattr(
            importlib.import_module(module_name), function
        )
        return loaded_handler

    def event(self, detail: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
        """An EventBridge event as the function receives it, with ``detail`` and a new id;
        ``fields`` override the envelope (``source``, ``detail-type`` via a dict, ...)."""
        event: dict[str, Any] = {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "Test Event",
            "source": "test.events",
            "account": "123456789012",
            "time": "2026-01-01T00:00:00Z",
            "region": REGION,
            "resources": [],
            "detail": dict(detail),
        }
        event.update(fields)
        return event

    def context(self, **fields: Any) -> FakeLambdaContext:
        """A new Lambda context (new request id); ``fields`` set its attributes."""
        return FakeLambdaContext(region=REGION, **fields)

    def dead_letters(self) -> list[dict[str, Any]]:
        """Takes every message off the dead-letter queue: ``{"body": <the event, with the
        runtime's "dead_letter" member>, "attributes": {"ERROR_CODE": ..., ...}}``."""
        url = self.environ[env.DEAD_LETTER_QUEUE_URL]
        found: list[dict[str, Any]] = []
        while True:
            messages = self.sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
            ).get("Messages", [])
            if not messages:
                return found
            for message in messages:
                found.append(
                    {
                        "body": json.loads(message["Body"]),
                        "attributes": {
                            name: value["StringValue"]
                            for name, value in message.get("MessageAttributes", {}).items()
                        },
                    }
                )
                self.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])

    def records(self) -> list[dict[str, Any]]:
        """The idempotency table's items, as DynamoDB returns them: Powertools records
        (``id``, ``status``, ``data``, ...) and each key's attempt budget (``id`` ending in
        ``#budget``)."""
        items: list[dict[str, Any]] = self.dynamodb.scan(TableName=TABLE_NAME)["Items"]
        return items


@contextmanager
def model_step_environment(
    api: FakeMessagesAPI,
    *,
    idempotency_key: str,
    prompt_version: str = "v1",
    system_prompt: str = "You are a model step under test.",
    model_id: str = "claude-haiku-5-5",
    allowed_labels: Sequence[str] | None = None,
    model_timeout_seconds: float = 5.0,
    environment: Mapping[str, str] | None = None,
    thinking: str | None = None,
    effort: str | None = None,
) -> Iterator[LocalModelStep]:
    """moto (idempotency table, dead-letter queue, API key secret) and the step's environment.

    The variables are those ``IdempotentModelStep`` sets from the same-named props; the API key
    is read from the secret, as on Lambda, and ``ANTHROPIC_BASE_URL`` is ``api``. Everything
    is undone on exit: the environment restored, moto stopped. It also calls
    :func:`runtime_on_path`, so handlers can import ``model_step``.

    :param api: a started fake; script it and count its requests. Required.
    :param idempotency_key: the step's ``idempotency_key`` (JMESPath over ``detail``).
        Required.
    :param prompt_version: the step's ``prompt_version``. Default ``"v1"``.
    :param system_prompt: the step's ``system_prompt``, shipped as the construct ships it (a
        file on ``sys.path``, named by its sha256). Default a short test prompt.
    :param model_id: the step's ``model_id``. Default ``"claude-haiku-5-5"``.
    :param allowed_labels: the step's ``allowed_labels``. Default None: any answer.
    :param model_timeout_seconds: ``MODEL_TIMEOUT_SECONDS``, the model call's deadline.
        Default 5.
    :param environment: extra variables, as the construct's ``environment`` prop. Default
        None: none.
    :param thinking: the step's ``thinking`` (``"adaptive"``, ``"disabled"``). Default None:
        the model's default. The step's price (``MODEL_RATES``) is the model catalogue's, as
        the construct sets it.
    :param effort: the step's ``effort`` (``"low"`` ... ``"max"``). Default None: the
        model's default.

    Usage::

        with FakeMessagesAPI(text="hot") as api, model_step_environment(
            api, idempotency_key="[lead_id]"
        ) as local:
            handler = local.handler("my_step.handler.handler")
            event = local.event({"lead_id": "L-1"})
            handler(event, local.context())
            handler(event, local.context())
        assert api.request_count == 1
    """
    runtime_on_path()
    try:
        import boto3
        from moto import mock_aws

        from constructs_lib.local_engine.moto_fixes import atomic_dynamodb_writes
    except ModuleNotFoundError as missing:
        raise RuntimeImportError(
            f"model_step_environment needs moto and boto3 ({missing.name} is missing), which "
            f"the library's 'local' extra installs: {LOCAL_EXTRA_HINT}"
        ) from missing

    fake_aws = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
    }
    with ExitStack() as stack:
        stack.enter_context(patched_environ(fake_aws, _CLEARED))
        stack.enter_context(mock_aws())
        stack.enter_context(atomic_dynamodb_writes())
        session = boto3.session.Session(region_name=REGION)
        dynamodb = session.client("dynamodb")
        dynamodb.create_table(
            TableName=TABLE_NAME,
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        sqs = session.client("sqs")
        queue_url = sqs.create_queue(QueueName=DEAD_LETTER_QUEUE_NAME)["QueueUrl"]
        secret_arn = session.client("secretsmanager").create_secret(
            Name=SECRET_NAME, SecretString=SECRET_VALUE
        )["ARN"]
        environ: dict[str, str] = {
            "AWS_LAMBDA_FUNCTION_NAME": "model-step-test",
            env.IDEMPOTENCY_TABLE_NAME: TABLE_NAME,
            env.IDEMPOTENCY_RECORD_PREFIX: "LocalModelStep",
            env.DEAD_LETTER_QUEUE_URL: queue_url,
            env.IDEMPOTENCY_KEY: idempotency_key,
            env.PROMPT_VERSION: prompt_version,
            env.SYSTEM_PROMPT_SHA256: stack.enter_context(system_prompt_on_path(system_prompt)),
            env.MODEL_ID: model_id,
            env.MODEL_PROVIDER: "anthropic",
            env.MODEL_TIMEOUT_SECONDS: str(model_timeout_seconds),
            env.ANTHROPIC_API_KEY_SECRET_ARN: secret_arn,
            env.ANTHROPIC_BASE_URL: api.base_url,
            env.POWERTOOLS_SERVICE_NAME: "LocalModelStep",
            env.POWERTOOLS_METRICS_NAMESPACE: "IdempotentModelStepTest",
            **({env.ALLOWED_LABELS: ",".join(allowed_labels)} if allowed_labels else {}),
            **_model_environment(model_id, thinking, effort),
            **dict(environment or {}),
        }
        stack.enter_context(patched_environ(environ, ()))
        yield LocalModelStep(api=api, environ=environ, dynamodb=dynamodb, sqs=sqs)


def _model_environment(model_id: str, thinking: str | None, effort: str | None) -> dict[str, str]:
    """``THINKING``, ``EFFORT`` and ``MODEL_RATES`` as ``IdempotentModelStep`` sets them."""
    from constructs_lib.model_prices import PRICE_TABLE, price_for

    found = {env.THINKING: thinking, env.EFFORT: effort}
    price = price_for(model_id, PRICE_TABLE)
    if price is not None:
        found[env.MODEL_RATES] = price.for_step()
    return {name: value for name, value in found.items() if value is not None}
