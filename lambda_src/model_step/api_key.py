"""Where the Anthropic API key comes from. The key is never logged or put in an error."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from .errors import ConfigurationError

API_KEY_ENV = "ANTHROPIC_API_KEY"
SECRET_JSON_FIELD = "api_key"


def resolve_api_key(secret_arn: str | None, secrets_client: Callable[[], Any]) -> str | None:
    """Return the API key to pass to the SDK, or None to let the SDK read ``ANTHROPIC_API_KEY``.

    ``ANTHROPIC_API_KEY`` wins when set (local runs). Otherwise the secret ``secret_arn`` is
    read with ``secrets_client()`` (a factory, so no boto3 client exists until needed). Its
    ``SecretString`` is either the raw key or JSON ``{"api_key": "..."}``.

    Raises ``ConfigurationError`` when neither source gives a key.
    """
    if os.environ.get(API_KEY_ENV):
        return None
    if not secret_arn:
        raise ConfigurationError(
            f"no API key: set ANTHROPIC_API_KEY_SECRET_ARN (or {API_KEY_ENV} for local runs)"
        )
    response = secrets_client().get_secret_value(SecretId=secret_arn)
    return parse_secret_string(response.get("SecretString") or "")


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
        return key.strip()
    if not text:
        raise ConfigurationError("API key secret is empty")
    return text
