"""Runtime settings read from the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass

from prospect_contract.cost import Price
from prospect_contract.errors import ConfigurationError
from prospect_contract.events import EVENT_SOURCE
from prospect_contract.settings import positive_int

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
DEFAULT_EVENT_SOURCE = EVENT_SOURCE
BUS_KINDS = ("classic", "v2")


@dataclass(frozen=True)
class Settings:
    """Viewer settings.

    Environment variables (defaults in brackets):
    - FAILURES_TABLE_NAME (required): the failures table.
    - EVENT_BUS_NAME (required for the classic bus): bus retries are re-published to.
    - UPLOADS_TABLE_NAME [unset]: the uploads table; unset, the page lists no uploads.
    - ROWS_TABLE_NAME [unset]: RowsTable (``prospect_contract.rows``), where a failed row's
      values are (failure records hold ids only); unset, the page shows no row values.
    - PROSPECTS_TABLE_NAME [unset]: ProspectsTable, a row's label once answered (a retry
      that succeeded shows it); unset, a retried row shows failed or pending only.
    - PAGE_SIZE [50, at most 500]: failures per page.
    - EVENT_SOURCE [``prospect_contract.events.EVENT_SOURCE``]: the only event Source a
      retry may re-publish, and the Source it publishes under.
    - EVENT_BUS_KIND ["classic"]: ``classic`` (events PutEvents to EVENT_BUS_NAME) or
      ``v2`` (eventbridgev2 PutEvents to EVENT_BUS_ARN, with a deduplication id).
    - EVENT_BUS_ARN (required when EVENT_BUS_KIND is v2).
    - MODEL_PRICE [unset: cost unknown]: the classify model's price, JSON
      (``prospect_contract.cost``), for the uploads' dollar figures.
    """

    failures_table_name: str
    event_bus_name: str
    page_size: int = DEFAULT_PAGE_SIZE
    event_source: str = DEFAULT_EVENT_SOURCE
    uploads_table_name: str = ""
    rows_table_name: str = ""
    prospects_table_name: str = ""
    event_bus_kind: str = "classic"
    event_bus_arn: str = ""
    model_price: Price | None = None

    @classmethod
    def from_env(cls) -> Settings:
        """Read settings from ``os.environ``; raises ConfigurationError when incomplete."""
        kind = os.environ.get("EVENT_BUS_KIND", "").strip().lower() or "classic"
        if kind not in BUS_KINDS:
            raise ConfigurationError(f"EVENT_BUS_KIND must be classic or v2, got {kind!r}")
        required = ["FAILURES_TABLE_NAME", "EVENT_BUS_ARN" if kind == "v2" else "EVENT_BUS_NAME"]
        missing = [n for n in required if not os.environ.get(n)]
        if missing:
            raise ConfigurationError("missing environment variables: " + ", ".join(missing))
        return cls(
            failures_table_name=os.environ["FAILURES_TABLE_NAME"],
            event_bus_name=os.environ.get("EVENT_BUS_NAME", ""),
            page_size=positive_int("PAGE_SIZE", DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE),
            event_source=os.environ.get("EVENT_SOURCE", "").strip() or DEFAULT_EVENT_SOURCE,
            uploads_table_name=os.environ.get("UPLOADS_TABLE_NAME", "").strip(),
            rows_table_name=os.environ.get("ROWS_TABLE_NAME", "").strip(),
            prospects_table_name=os.environ.get("PROSPECTS_TABLE_NAME", "").strip(),
            event_bus_kind=kind,
            event_bus_arn=os.environ.get("EVENT_BUS_ARN", "").strip() if kind == "v2" else "",
            model_price=Price.from_environment(),
        )
