"""Ledger settings read from the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass

from prospect_contract.cost import Price
from prospect_contract.events import EVENT_SOURCE
from prospect_contract.settings import positive_int, required

DEFAULT_EVENT_SOURCE = EVENT_SOURCE
#: The classify step's default max event age (24 h) plus an hour for the DLQ and the
#: failure recorder: a row not accounted for by then will not be.
DEFAULT_DEADLINE_SECONDS = 25 * 60 * 60
#: The splitter's async max event age (6 h) plus its 15-minute timeout, rounded up.
DEFAULT_SPLIT_DEADLINE_SECONDS = 7 * 60 * 60
DEFAULT_RETENTION_DAYS = 90


@dataclass(frozen=True)
class LedgerSettings:
    """Where the ledger writes and how long it waits.

    Environment variables (defaults in brackets):
    - UPLOADS_TABLE_NAME (required): one item per upload (pk ``upload_id``).
    - UPLOAD_ROWS_TABLE_NAME (required): one marker per accounted row (pk ``upload_id``,
      sk ``row_number`` N), so a row counts once whatever its deliveries.
    - EVENT_BUS_NAME (required): the classic bus ``UPLOAD_COMPLETED`` is published on.
    - EVENT_SOURCE [``prospect_contract.events.EVENT_SOURCE``]
    - UPLOAD_DEADLINE_SECONDS [90000]: after the split finished, how long rows may still
      arrive before the sweeper closes the upload as incomplete.
    - UPLOAD_SPLIT_DEADLINE_SECONDS [25200]: how long a split may take before the sweeper
      starts the clock above without it.
    - UPLOAD_RETENTION_DAYS [90]: TTL (``expires_at``) of upload items and row markers.
    - MODEL_PRICE [unset: cost unknown]: the classify model's price, JSON
      (``prospect_contract.cost``); the summary's dollar figures are null without it.
    """

    uploads_table_name: str
    upload_rows_table_name: str
    event_bus_name: str
    event_source: str = DEFAULT_EVENT_SOURCE
    deadline_seconds: int = DEFAULT_DEADLINE_SECONDS
    split_deadline_seconds: int = DEFAULT_SPLIT_DEADLINE_SECONDS
    retention_days: int = DEFAULT_RETENTION_DAYS
    model_price: Price | None = None

    @staticmethod
    def configured() -> bool:
        """True when the environment names an uploads table (accounting is on)."""
        return bool(os.environ.get("UPLOADS_TABLE_NAME", "").strip())

    @classmethod
    def from_env(cls) -> LedgerSettings:
        """Read the settings; raises ConfigurationError when incomplete."""
        return cls(
            uploads_table_name=required("UPLOADS_TABLE_NAME"),
            upload_rows_table_name=required("UPLOAD_ROWS_TABLE_NAME"),
            event_bus_name=required("EVENT_BUS_NAME"),
            event_source=os.environ.get("EVENT_SOURCE", "").strip() or DEFAULT_EVENT_SOURCE,
            deadline_seconds=positive_int("UPLOAD_DEADLINE_SECONDS", DEFAULT_DEADLINE_SECONDS),
            split_deadline_seconds=positive_int(
                "UPLOAD_SPLIT_DEADLINE_SECONDS", DEFAULT_SPLIT_DEADLINE_SECONDS
            ),
            retention_days=positive_int("UPLOAD_RETENTION_DAYS", DEFAULT_RETENTION_DAYS),
            model_price=Price.from_environment(),
        )
