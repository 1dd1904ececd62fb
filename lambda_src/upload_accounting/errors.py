"""Exceptions a caller of the ledger must tell apart."""

from __future__ import annotations


class LedgerConfigurationError(RuntimeError):
    """A required environment variable is missing or malformed."""


class SummaryPublishError(RuntimeError):
    """EventBridge did not accept the completion event; the caller's retry (or the
    sweeper, once the publish lease lapses) publishes it again."""
