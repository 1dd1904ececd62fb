"""Exceptions a caller of the ledger must tell apart.

A missing or malformed setting raises ``prospect_contract.errors.ConfigurationError``, as in
every Prospect function.
"""

from __future__ import annotations

from prospect_contract.put_events import PutEventsError


class SummaryPublishError(PutEventsError):
    """EventBridge did not accept the completion event; the caller's retry (or the
    sweeper, once the publish lease lapses) publishes it again."""
