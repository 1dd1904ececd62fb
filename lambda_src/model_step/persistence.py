"""Powertools' DynamoDB persistence layer, made safe to release and able to say what it stores.

Three changes to ``DynamoDBPersistenceLayer``, each for a failure seen under combined faults:

- **A release deletes only the caller's own lock.** Powertools deletes the record
  unconditionally when the function raises or a save fails. If the save's UpdateItem was
  applied but its answer lost (a client timeout), that delete removed a COMPLETED record and
  the retry billed again; if the holder's lock had expired and another delivery took it, the
  delete dropped that delivery's lock. Here the delete is conditional on ``status =
  INPROGRESS`` and on this thread's own ``in_progress_expiration``, the lock's identity.
- **A failed save releases the lock** (conditionally, as above) and re-raises, so the
  delivery fails as a transient error and its retry really runs, instead of meeting
  ``IdempotencyAlreadyInProgressError`` until the lock's deadline.
- **Each store call can be traced**: with tracing on (:mod:`.tracing`), every DynamoDB
  call of the layer is an X-Ray subsegment ``idempotency store: <operation>``.
- :func:`stored_form` is the exact serialisation Powertools' ``save_success`` writes, so a
  result is checked for storability with the serialiser that stores it.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from aws_lambda_powertools.shared.json_encoder import Encoder
from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer, IdempotencyConfig
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
)
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import (
    STATUS_CONSTANTS,
    DataRecord,
)
from botocore.config import Config
from botocore.exceptions import ClientError

from .tracing import NO_TRACING, STORE_PREFIX, StepTracer

logger = logging.getLogger(__name__)

_P = ParamSpec("_P")
_T = TypeVar("_T")


class LockHeld(IdempotencyAlreadyInProgressError):
    """``IdempotencyAlreadyInProgressError`` naming the deadline of the lock it met."""

    def __init__(self, message: str, lock_expiry_ms: int | None) -> None:
        super().__init__(message)
        #: The held record's in-progress expiry, epoch ms (None when unknown).
        self.lock_expiry_ms = lock_expiry_ms


def naming_the_holder(
    function: Callable[_P, _T], persistence: ReleasingDynamoDBPersistenceLayer
) -> Callable[_P, _T]:
    """``function``, an idempotent function over ``persistence`` called with ``request=``,
    whose ``IdempotencyAlreadyInProgressError`` is a :class:`LockHeld` naming the lock of the
    record it met. A delivery has up to three records (its key's, the DLQ hand-off's, the
    result event's): it waits for the one held, never for another, which may be long
    expired (a one-second requeue loop until the holder's deadline)."""

    @functools.wraps(function)
    def call(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return function(*args, **kwargs)
        except LockHeld:
            raise  # an inner hand-off's lock, already named
        except IdempotencyAlreadyInProgressError as exc:
            request = kwargs.get("request")
            expiry = (
                persistence.in_progress_expiry_ms(request) if isinstance(request, dict) else None
            )
            raise LockHeld(str(exc), expiry) from exc

    return call


def stored_form(result: Any) -> str:
    """``result`` as Powertools stores it (``json.dumps(..., cls=Encoder, sort_keys=True)``).
    Raises ``TypeError`` or ``ValueError`` for a value the store cannot serialise (a
    ``date``, a ``set``, dict keys of mixed types, ...)."""
    return json.dumps(result, cls=Encoder, sort_keys=True)


class ReleasingDynamoDBPersistenceLayer(DynamoDBPersistenceLayer):
    """``DynamoDBPersistenceLayer`` whose releases are conditional on the caller's own lock
    and whose failed ``save_success`` releases that lock. See the module docstring.

    A drop-in: it takes every constructor argument of the parent, positionally or by name,
    and Powertools' own idempotency suite runs against it
    (``scripts/powertools_idempotency_suite.py``, docs/testing.md)."""

    def __init__(
        self,
        table_name: str,
        key_attr: str = "id",
        static_pk_value: str | None = None,
        sort_key_attr: str | None = None,
        expiry_attr: str = "expiration",
        in_progress_expiry_attr: str = "in_progress_expiration",
        status_attr: str = "status",
        data_attr: str = "data",
        validation_key_attr: str = "validation",
        boto_config: Config | None = None,
        boto3_session: Any = None,
        boto3_client: Any = None,
        *,
        tracer: StepTracer = NO_TRACING,
    ) -> None:
        """Every argument of Powertools' ``DynamoDBPersistenceLayer`` (3.37), in its order,
        with its defaults: ``table_name`` is required; ``key_attr`` ``"id"``,
        ``static_pk_value`` and ``sort_key_attr`` None, ``expiry_attr`` ``"expiration"``,
        ``in_progress_expiry_attr`` ``"in_progress_expiration"``, ``status_attr``
        ``"status"``, ``data_attr`` ``"data"``, ``validation_key_attr`` ``"validation"``,
        ``boto_config``, ``boto3_session`` and ``boto3_client`` None (the client is then made
        from the session or a new one, with ``boto_config``). Keyword-only beyond them:
        ``tracer``, default no tracing, traces each store call (:mod:`.tracing`)."""
        super().__init__(
            table_name=table_name,
            key_attr=key_attr,
            static_pk_value=static_pk_value,
            sort_key_attr=sort_key_attr,
            expiry_attr=expiry_attr,
            in_progress_expiry_attr=in_progress_expiry_attr,
            status_attr=status_attr,
            data_attr=data_attr,
            validation_key_attr=validation_key_attr,
            boto_config=boto_config,
            boto3_session=boto3_session,
            boto3_client=boto3_client,
        )
        self._tracer = tracer
        # Locks this thread holds, by record id: an invocation runs on one thread, and two
        # threads of one process (the local run) can hold locks of one record in turn.
        self._held = threading.local()

    def bind(self, config: IdempotencyConfig, record_prefix: str) -> None:
        """Configure as Powertools' decorator would, so record ids can be computed before
        the first call."""
        self.configure(config=config, key_prefix=record_prefix)

    def record_id(self, data: dict[str, Any]) -> str:
        """The record id (``<prefix>#<hash of the record key>``) ``data`` maps to."""
        record_id = self._get_hashed_idempotency_key(data=data)
        if record_id is None:  # raise_on_no_idempotency_key is always on here
            raise ValueError("the request has no record key")
        return record_id

    def _locks(self) -> dict[str, int]:
        locks: dict[str, int] | None = getattr(self._held, "locks", None)
        if locks is None:
            locks = self._held.locks = {}
        return locks

    def _get_record(self, idempotency_key: str) -> DataRecord:
        with self._tracer.subsegment(STORE_PREFIX + "GetItem"):
            return super()._get_record(idempotency_key)

    def _put_record(self, data_record: DataRecord) -> None:
        with self._tracer.subsegment(STORE_PREFIX + "PutItem"):
            super()._put_record(data_record=data_record)
        if data_record.in_progress_expiry_timestamp is not None:
            self._locks()[data_record.idempotency_key] = data_record.in_progress_expiry_timestamp

    def _delete_record(self, data_record: DataRecord) -> None:
        lock = self._locks().pop(data_record.idempotency_key, None)
        condition = "#status = :inprogress"
        names = {"#status": self.status_attr}
        values: dict[str, Any] = {":inprogress": {"S": STATUS_CONSTANTS["INPROGRESS"]}}
        if lock is not None:
            condition += " AND #lock = :lock"
            names["#lock"] = self.in_progress_expiry_attr
            values[":lock"] = {"N": str(lock)}
        try:
            with self._tracer.subsegment(STORE_PREFIX + "DeleteItem"):
                self.client.delete_item(
                    TableName=self.table_name,
                    Key=self._get_key(data_record.idempotency_key),
                    ConditionExpression=condition,
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues=values,
                )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            # Completed meanwhile (a save applied but answered with an error), or another
            # delivery holds the lock now: either way the record is not ours to delete.
            logger.info("idempotency record kept: it is completed or another delivery holds it")

    def _update_record(self, data_record: DataRecord) -> None:
        with self._tracer.subsegment(STORE_PREFIX + "UpdateItem"):
            super()._update_record(data_record=data_record)
        self._locks().pop(data_record.idempotency_key, None)

    def save_success(self, data: dict[str, Any], result: dict[str, Any]) -> None:
        try:
            super().save_success(data=data, result=result)
        except Exception as save_error:
            try:
                self.delete_record(data=data, exception=save_error)
            except Exception:
                logger.exception("could not release the idempotency record after a failed save")
            raise

    def in_progress_expiry_ms(self, data: dict[str, Any]) -> int | None:
        """The in-progress expiry (epoch ms) of the record ``data`` maps to, if it is held;
        None when unknown. Best effort: one consistent GetItem."""
        try:
            expiry = self._get_record(self.record_id(data)).in_progress_expiry_timestamp
            return None if expiry is None else int(expiry)  # DynamoDB numbers are Decimals
        except Exception:
            return None

    def stored_result(self, data: dict[str, Any]) -> dict[str, Any] | None:
        """The COMPLETED result stored for ``data``'s record, or None (absent, in progress,
        or unreadable)."""
        try:
            record_id = self.record_id(data)
        except Exception:
            return None
        return self.stored_result_of(record_id)

    def stored_result_of(self, record_id: str) -> dict[str, Any] | None:
        """The COMPLETED, unexpired result stored under ``record_id``, or None (absent,
        expired, in progress, or unreadable)."""
        try:
            record = self._get_record(record_id)
        except Exception:
            return None
        if record.is_expired:
            return None
        if record.status != STATUS_CONSTANTS["COMPLETED"]:
            return None
        stored = record.response_json_as_dict()
        return stored if isinstance(stored, dict) else None
