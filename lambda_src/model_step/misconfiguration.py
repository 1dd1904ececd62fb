"""Configuration errors: the step's own table, queue or secret refuses it (issue 36, item 6).

A refused grant (``AccessDenied``), a missing table, queue or secret, or a KMS key the step
may not use is not a failure of the row nor a transient blip: every delivery meets it until
someone fixes the deployment. Such an error (:data:`CONFIGURATION_ERROR_CODES`, anywhere in
the exception's chain) is:

- **logged once per container** per (action, resource), at ERROR, with the IAM action
  (``dynamodb:PutItem``) and the resource the call named (table name, queue URL, secret ARN),
  never a row value: ``configuration error: the step may not call <action> on <resource>``;
- **counted** in the EMF metric ``ConfigurationErrors`` (once per delivery that met it), which
  the step's ``ConfigurationErrorsAlarm`` watches;
- **left to be retried**: nothing is stored for the key (no dead letter, no attempt spent
  that was not really spent), and a buffered row comes back after
  :data:`CONFIGURATION_RETRY_SECONDS`, so it waits for the fix instead of spinning. SQS bounds
  the wait: after the buffer queue's ``maxReceiveCount`` receives the row moves to the redrive
  queue, whose consumer leaves it (no re-queue) to its own redrive policy, which moves it to
  the DLQ. There it keeps its body (and, being uncoded, its key's budget) until an operator
  redrives it once the grant is fixed.

A DLQ that refuses a dead letter is one of these too (it is logged and counted), but keeps its
own flow: :class:`~.errors.DeadLetterError` is retried ``MAX_HAND_OFF_FAILURES`` times, then
the redrive policy moves the row on (see :mod:`.runtime`).

The action and resource come from the call itself: :func:`watch` hooks every client the step
creates and keeps, per thread, the last call of each operation (``provide-client-params``
runs before botocore builds the request, so even a call refused before it is sent is named).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from .errors import DeadLetterError

#: Error codes that say the deployment, not the row, is wrong; no retry within minutes fixes
#: them. ``AccessDenied`` (SQS) / ``AccessDeniedException`` (DynamoDB, Secrets Manager): the
#: role lacks the action. ``ResourceNotFoundException`` (DynamoDB, Secrets Manager),
#: ``QueueDoesNotExist`` / ``AWS.SimpleQueueService.NonExistentQueue`` (SQS, JSON and query
#: spellings): the resource is not there. The KMS codes (SQS's ``Kms*`` and their query
#: spellings ``KMS.*``, DynamoDB's and Secrets Manager's ``DecryptionFailure``): the role may
#: not use the queue's or secret's key, or the key is disabled or gone. Not here:
#: ``KmsThrottled`` and every throttle (transient), ``UnrecognizedClientException`` and
#: expired tokens (the credentials of the moment, which Lambda renews, not the grant).
CONFIGURATION_ERROR_CODES = frozenset(
    {
        "AccessDenied",
        "AccessDeniedException",
        "ResourceNotFoundException",
        "QueueDoesNotExist",
        "AWS.SimpleQueueService.NonExistentQueue",
        "KmsAccessDenied",
        "KmsDisabled",
        "KmsNotFound",
        "KmsInvalidState",
        "KmsInvalidKeyUsage",
        "KMS.AccessDeniedException",
        "KMS.DisabledException",
        "KMS.NotFoundException",
        "KMS.InvalidStateException",
        "KMSAccessDeniedException",
        "KMSDisabledException",
        "KMSNotFoundException",
        "KMSInvalidStateException",
        "DecryptionFailure",
    }
)
#: The services of the step's own resources: its table, its queues, its secret.
OWN_SERVICES = frozenset({"dynamodb", "sqs", "secretsmanager"})
#: Seconds a buffered row met by a configuration error stays invisible before its next
#: receive: long enough not to spin, short enough that a fixed grant is seen within minutes.
CONFIGURATION_RETRY_SECONDS = 300
#: Request parameters that name the resource a call acts on.
_RESOURCE_PARAMETERS = ("TableName", "QueueUrl", "QueueName", "SecretId")
#: Links of an exception's chain looked at (a cause's cause, ...).
_MAX_CHAIN = 8

_calls = threading.local()
_reported: set[tuple[str, str]] = set()
_reported_lock = threading.Lock()


@dataclass(frozen=True)
class DeniedCall:
    """A call of the step that its deployment refused."""

    service: str  # "dynamodb", "sqs", "secretsmanager"; "" when the call was not watched
    action: str  # the IAM action, e.g. "dynamodb:PutItem"
    resource: str  # table name, queue URL or secret ARN as the call named it
    code: str  # the AWS error code


def watch(client: Any) -> Any:
    """``client``, its calls now remembered per thread (:func:`denied_call` names them)."""
    client.meta.events.register("provide-client-params", _remember)
    return client


def _remember(params: Mapping[str, Any], model: Any, **_: Any) -> None:
    """Keep this call's action and resource for its operation; returns None (botocore would
    take any other value for the call's parameters)."""
    service = str(model.service_model.signing_name)
    calls: dict[str, tuple[str, str]] = _calls.__dict__.setdefault("by_operation", {})
    calls[str(model.name)] = (service, _resource(params))


def _resource(params: Mapping[str, Any]) -> str:
    for name in _RESOURCE_PARAMETERS:
        if params.get(name):
            return str(params[name])
    for item in params.get("TransactItems") or ():  # TransactWriteItems: the first table
        for operation in item.values() if isinstance(item, Mapping) else ():
            if isinstance(operation, Mapping) and operation.get("TableName"):
                return str(operation["TableName"])
    return "unknown"


def denied_call(exc: BaseException) -> DeniedCall | None:
    """The refused call behind ``exc`` (itself, or a cause of it: Powertools and the DLQ
    hand-off wrap botocore's error), when it is a configuration error of the step's own
    resources; else None."""
    seen: BaseException | None = exc
    for _ in range(_MAX_CHAIN):
        if seen is None:
            return None
        if isinstance(seen, ClientError):
            return _denied(seen)
        seen = seen.__cause__ or seen.__context__
    return None


def _denied(error: ClientError) -> DeniedCall | None:
    code = str(error.response.get("Error", {}).get("Code") or "")
    if code not in CONFIGURATION_ERROR_CODES:
        return None
    calls: dict[str, tuple[str, str]] = getattr(_calls, "by_operation", {})
    service, resource = calls.get(error.operation_name, ("", "unknown"))
    if service and service not in OWN_SERVICES:
        return None  # the result bus, the model provider: their own handling
    action = f"{service}:{error.operation_name}" if service else error.operation_name
    return DeniedCall(service, action, resource, code)


def first_report(call: DeniedCall) -> bool:
    """True the first time this container meets ``call``'s (action, resource)."""
    key = (call.action, call.resource)
    with _reported_lock:
        if key in _reported:
            return False
        _reported.add(key)
        return True


def waits_for_the_fix(exc: BaseException) -> bool:
    """True when a queue record's failure ``exc`` is a configuration error the row waits out:
    raised as a batch item failure, never put back on the buffer by the step (see the module
    docstring). A DLQ refusing a dead letter keeps :class:`~.errors.DeadLetterError`'s own
    flow."""
    return not isinstance(exc, DeadLetterError) and denied_call(exc) is not None
