"""Writing a classification onto the prospect's row in ``PROSPECTS_TABLE_NAME``."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import boto3
from prospect_contract.errors import ConfigurationError
from prospect_contract.settings import positive_int

PROSPECTS_TABLE_ENV = "PROSPECTS_TABLE_NAME"
#: Days a classified row is kept (TTL ``expires_at``); the stack sets it to
#: ``failure_retention_days``.
RETENTION_DAYS_ENV = "PROSPECT_RETENTION_DAYS"
DEFAULT_RETENTION_DAYS = 90


class ProspectStore:
    """Upserts classifications into the prospects table (pk ``upload_id`` S, sk
    ``row_number`` N). The table name is read from ``PROSPECTS_TABLE_NAME`` on first write."""

    def __init__(self, table_name: str | None = None) -> None:
        self._table_name = table_name
        self._client: Any = None
        self._lock = threading.Lock()

    def upsert_classification(self, detail: Mapping[str, Any], result: Mapping[str, Any]) -> None:
        """SET label, request_id, prompt_version, model, classified_at and expires_at on the
        row.

        An upsert with values taken from the (replayable) model-step result, so a duplicate
        or a replay writes the same values again and the row converges. ``expires_at`` (the
        table's TTL) is ``PROSPECT_RETENTION_DAYS`` (default 90) after the stored answer's
        ``completed_at``, so it converges too.
        """
        completed = datetime.fromisoformat(result["completed_at"].replace("Z", "+00:00"))
        expires_at = int(completed.timestamp()) + 86400 * positive_int(
            RETENTION_DAYS_ENV, DEFAULT_RETENTION_DAYS
        )
        self._dynamodb().update_item(
            TableName=self._name(),
            Key={
                "upload_id": {"S": str(detail["upload_id"])},
                "row_number": {"N": str(int(detail["row_number"]))},
            },
            UpdateExpression=(
                "SET #label = :label, request_id = :request_id, "
                "prompt_version = :prompt_version, #model = :model, "
                "classified_at = :classified_at, expires_at = :expires_at"
            ),
            # "label" and "model" are not reserved today; the names keep it safe if they become so.
            ExpressionAttributeNames={"#label": "label", "#model": "model"},
            ExpressionAttributeValues={
                ":label": {"S": result["label"]},
                ":request_id": _string_or_null(result.get("request_id")),
                ":prompt_version": {"S": result["prompt_version"]},
                ":model": {"S": result["model"]},
                ":classified_at": {"S": result["completed_at"]},
                ":expires_at": {"N": str(expires_at)},
            },
        )

    def _name(self) -> str:
        name = self._table_name or os.environ.get(PROSPECTS_TABLE_ENV, "")
        if not name:
            raise ConfigurationError(f"environment variable {PROSPECTS_TABLE_ENV} is required")
        return name

    def _dynamodb(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = boto3.session.Session().client("dynamodb")
            return self._client


def _string_or_null(value: str | None) -> dict[str, Any]:
    return {"S": value} if value else {"NULL": True}
