"""The exception every Prospect function raises for its own settings."""

from __future__ import annotations


class ConfigurationError(RuntimeError):
    """A required environment variable is missing or malformed.

    Raised rather than handled: the invocation fails, Lambda retries it, and once the
    setting is fixed a retry succeeds. (``model_step`` keeps its own ``ConfigurationError``
    for the runtime's settings.)

    Example::

        from prospect_contract.errors import ConfigurationError

        if not os.environ.get("FAILURES_TABLE_NAME"):
            raise ConfigurationError("environment variable FAILURES_TABLE_NAME is required")
    """
