"""Lambda entry point: ``prospect_viewer.handler.handler`` (Function URL, payload 2.0)."""

from __future__ import annotations

import functools
import logging
from typing import Any

import boto3
from prospect_contract.put_events import ClassicBus, V2Bus
from prospect_contract.rows import RowReader

from .app import ViewerApp
from .config import Settings
from .publish import Publisher
from .store import FailureStore
from .uploads import UploadStore
from .web import Request, error_response

logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)


def build_app(settings: Settings, session: boto3.session.Session | None = None) -> ViewerApp:
    """Wire the tables and the EventBridge client for ``settings``."""
    session = session or boto3.session.Session()
    dynamodb = session.resource("dynamodb")
    if settings.event_bus_kind == "v2":
        bus: ClassicBus | V2Bus = V2Bus(
            session.client("eventbridgev2"), settings.event_bus_arn, settings.event_source
        )
    else:
        bus = ClassicBus(session.client("events"), settings.event_bus_name, settings.event_source)
    uploads = (
        UploadStore(dynamodb.Table(settings.uploads_table_name), settings.model_price)
        if settings.uploads_table_name
        else None
    )
    return ViewerApp(
        store=FailureStore(dynamodb.Table(settings.failures_table_name), settings.page_size),
        publisher=Publisher(bus),
        event_source=settings.event_source,
        uploads=uploads,
        rows=RowReader(session.client("dynamodb"), settings.rows_table_name)
        if settings.rows_table_name
        else None,
        prospects=RowReader(session.client("dynamodb"), settings.prospects_table_name)
        if settings.prospects_table_name
        else None,
    )


@functools.lru_cache(maxsize=4)
def _app_for(settings: Settings) -> ViewerApp:
    # Clients are built once per execution environment.
    return build_app(settings)


def handler(event: dict[str, Any], context: object) -> dict[str, Any]:
    """Serve one Function URL request."""
    request = Request.from_function_url_event(event)
    try:
        response = _app_for(Settings.from_env()).handle(request)
    except Exception:
        # Log the details; never echo internals (table names, stack traces) to the browser.
        logger.exception("unhandled error for %s %s", request.method, request.path)
        response = error_response(500, "InternalError", "internal error")
    return response.to_function_url_result()
