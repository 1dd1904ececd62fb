"""Powertools' DynamoDB persistence layer, made to release a record it could not complete."""

from __future__ import annotations

import logging
from typing import Any

from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

logger = logging.getLogger(__name__)


class ReleasingDynamoDBPersistenceLayer(DynamoDBPersistenceLayer):
    """``DynamoDBPersistenceLayer`` whose failed ``save_success`` deletes the record.

    Powertools leaves an INPROGRESS record behind when the final UpdateItem fails (throttling,
    an item over DynamoDB's 400 KB, an access error). Every retry then meets
    ``IdempotencyAlreadyInProgressError`` until the attempt's deadline, and the event is filed
    as a harmless duplicate although nobody owns its outcome. Here the record is deleted
    first and the save error re-raised, so the delivery fails as a transient error and its
    retry really runs.
    """

    def save_success(self, data: dict[str, Any], result: dict) -> None:
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
        None when unknown. Best effort: it reads Powertools' record by its hashed key."""
        try:
            key = self._get_hashed_idempotency_key(data=data)
            if key is None:
                return None
            expiry = self._get_record(key).in_progress_expiry_timestamp
            return None if expiry is None else int(expiry)  # DynamoDB numbers are Decimals
        except Exception:
            return None
