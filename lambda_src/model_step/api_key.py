"""Where the Anthropic API key comes from. The key is never logged or put in an error."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from typing import Any

from .errors import ConfigurationError

API_KEY_ENV = "ANTHROPIC_API_KEY"
SECRET_JSON_FIELD = "api_key"


class ApiKeySource:
    """The API key, read through Powertools Parameters (``SecretsProvider``) and cached for
    ``max_age`` seconds, so a rotated key reaches warm containers within that age.

    ``ANTHROPIC_API_KEY`` wins when set (local runs): ``current()`` then returns None and the
    SDK reads the variable itself; ``refresh()`` can do nothing for it.
    """

    def __init__(
        self, secret_arn: str | None, max_age: int, secrets_client: Callable[[], Any]
    ) -> None:
        """``secrets_client()`` returns a boto3 Secrets Manager client; it is called on the
        first read only."""
        self._secret_arn = secret_arn
        self._max_age = max_age
        self._secrets_client = secrets_client
        self._provider: Any = None
        self._lock = threading.Lock()

    def current(self) -> str | None:
        """The key to pass to the SDK (cached up to ``max_age``), or None for the env key."""
        return self._read(force=False)

    def refresh(self) -> str | None:
        """Re-read the secret now (after a 401), bypassing the cache."""
        return self._read(force=True)

    def _read(self, *, force: bool) -> str | None:
        env_key = os.environ.get(API_KEY_ENV)
        if env_key:
            check_key(env_key, source=API_KEY_ENV)
            return None
        if not self._secret_arn:
            raise ConfigurationError(
                f"no API key: set ANTHROPIC_API_KEY_SECRET_ARN (or {API_KEY_ENV} for local runs)"
            )
        from aws_lambda_powertools.utilities.parameters import SecretsProvider

        with self._lock:
            if self._provider is None:
                self._provider = SecretsProvider(boto3_client=self._secrets_client())
            provider = self._provider
        raw = provider.get(self._secret_arn, max_age=self._max_age, force_fetch=force)
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8", "replace")
        return parse_secret_string(raw or "")


def parse_secret_string(secret_string: str) -> str:
    """Accept a raw key or JSON ``{"api_key": ...}``; raise ``ConfigurationError`` otherwise.

    Error messages never include the secret's content.
    """
    text = secret_string.strip()
    if text.startswith("{"):
        try:
            document = json.loads(text)
        except ValueError:
            raise ConfigurationError("API key secret looks like JSON but does not parse") from None
        key = document.get(SECRET_JSON_FIELD) if isinstance(document, dict) else None
        if not isinstance(key, str) or not key.strip():
            raise ConfigurationError(
                f"API key secret is JSON without a non-empty {SECRET_JSON_FIELD!r} field"
            ) from None
        return check_key(key.strip())
    if not text:
        raise ConfigurationError("API key secret is empty")
    return check_key(text)


def check_key(key: str, *, source: str = "the API key secret") -> str:
    """Refuse a key with control characters (a pasted newline or tab inside the value would
    otherwise surface as an opaque header error on every request). The key is never shown."""
    bad = sorted({f"0x{ord(c):02x}" for c in key if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F})
    if bad:
        raise ConfigurationError(
            f"{source} contains control characters ({', '.join(bad)}) at "
            f"{sum(1 for c in key if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F)} position(s); "
            "store the key without them (the key itself is not shown)"
        )
    return key
