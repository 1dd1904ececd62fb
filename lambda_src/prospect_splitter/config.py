"""Runtime settings read from the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_EVENT_SOURCE = "prospect-uploader"
DEFAULT_MAX_UPLOAD_BYTES = 50 * 1024 * 1024
# S3 redelivers within minutes and Lambda's async queue keeps an event for at most
# 6 hours, so a day comfortably covers every redelivery of the same object version.
DEFAULT_IDEMPOTENCY_EXPIRES_AFTER_SECONDS = 24 * 60 * 60


class ConfigurationError(RuntimeError):
    """A required environment variable is missing or malformed."""


def _required(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise ConfigurationError(f"environment variable {name} is required")
    return value


def _positive_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigurationError(f"{name} must be an integer, got {raw!r}") from exc
    if value <= 0:
        raise ConfigurationError(f"{name} must be positive, got {value}")
    return value


@dataclass(frozen=True)
class Settings:
    """Splitter settings.

    Environment variables (defaults in brackets):
    - EVENT_BUS_NAME (required): custom bus that receives row and summary events.
    - FAILURES_TABLE_NAME (required): table for invalid rows, upload failures and summaries.
    - IDEMPOTENCY_TABLE_NAME (required): Powertools idempotency table (pk ``id``,
      TTL ``expiration``).
    - MAX_UPLOAD_BYTES [52428800 = 50 MiB]: larger objects are rejected unread.
    - EVENT_SOURCE ["prospect-uploader"]: Source of every published event.
    - IDEMPOTENCY_EXPIRES_AFTER_SECONDS [86400]: how long a processed upload is remembered.
    """

    event_bus_name: str
    failures_table_name: str
    idempotency_table_name: str
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    event_source: str = DEFAULT_EVENT_SOURCE
    idempotency_expires_after_seconds: int = DEFAULT_IDEMPOTENCY_EXPIRES_AFTER_SECONDS

    @classmethod
    def from_env(cls) -> Settings:
        """Read settings from ``os.environ``; raises ConfigurationError when incomplete."""
        return cls(
            event_bus_name=_required("EVENT_BUS_NAME"),
            failures_table_name=_required("FAILURES_TABLE_NAME"),
            idempotency_table_name=_required("IDEMPOTENCY_TABLE_NAME"),
            max_upload_bytes=_positive_int("MAX_UPLOAD_BYTES", DEFAULT_MAX_UPLOAD_BYTES),
            event_source=os.environ.get("EVENT_SOURCE", "").strip() or DEFAULT_EVENT_SOURCE,
            idempotency_expires_after_seconds=_positive_int(
                "IDEMPOTENCY_EXPIRES_AFTER_SECONDS", DEFAULT_IDEMPOTENCY_EXPIRES_AFTER_SECONDS
            ),
        )
