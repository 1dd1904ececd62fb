"""The model SDK client: created lazily, once per container, re-keyed when the key changes.

``import anthropic`` costs about a second, so it happens on the first real model call only;
a container that only serves duplicates never pays it (unless SnapStart primes it at init).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .api_key import ApiKeySource
from .config import Settings


class ModelClientProvider:
    """Builds ``anthropic.Anthropic`` (or ``anthropic.AnthropicBedrock``) on first ``get()``.

    The client always has ``max_retries=0``: retries belong to the key's attempt budget, and a
    hidden SDK retry would be a second billed request inside one attempt. Its HTTP client runs
    on :class:`~.deadline.DeadlineTransport`, so :func:`.deadline.total` bounds each request
    as a whole; the per-read timeout is passed on each call, not here.
    """

    def __init__(self, settings: Settings, boto3_client: Callable[[str], Any]) -> None:
        """``boto3_client(service_name)`` returns a boto3 client; it is only called when the
        API key has to be read from Secrets Manager."""
        self._settings = settings
        self._keys = ApiKeySource(
            settings.api_key_secret_arn,
            settings.api_key_max_age_seconds,
            lambda: boto3_client("secretsmanager"),
        )
        self._client: Any = None
        self._client_key: str | None = None
        self._lock = threading.Lock()

    @property
    def can_refresh(self) -> bool:
        """True when the key comes from a secret that a re-read could change."""
        return self._settings.model_provider != "bedrock"

    def get(self) -> Any:
        """The SDK client for the current key (creating it, and importing the SDK, on first
        use; a cheap ``copy`` when the cached key changed)."""
        if self._settings.model_provider == "bedrock":
            with self._lock:
                if self._client is None:
                    import anthropic

                    # IAM credentials from the Lambda role; no API key secret is involved.
                    self._client = anthropic.AnthropicBedrock(
                        aws_region=self._settings.aws_region,
                        max_retries=0,
                        http_client=_http_client(),
                    )
                return self._client
        return self._for_key(self._keys.current())

    def refresh(self, failed_client: Any) -> tuple[Any, bool]:
        """Force a re-read of the key after ``failed_client`` got a 401: ``(client, changed)``,
        where ``changed`` says whether the key now differs from the one that failed."""
        key = self._keys.refresh()
        client = self._for_key(key)
        return client, key is not None and key != getattr(failed_client, "api_key", None)

    def _for_key(self, key: str | None) -> Any:
        with self._lock:
            if self._client is None:
                import anthropic

                # api_key=None lets the SDK read ANTHROPIC_API_KEY; ANTHROPIC_BASE_URL is read
                # by the SDK too, which is how local runs point at a fake server.
                self._client = anthropic.Anthropic(
                    api_key=key, max_retries=0, http_client=_http_client()
                )
                self._client_key = key
            elif key is not None and key != self._client_key:
                self._client = self._client.copy(api_key=key)
                self._client_key = key
            return self._client


def _http_client() -> Any:
    """The SDK's own default HTTP client, on a transport that enforces the total deadline."""
    import anthropic
    import httpx2

    from .deadline import DeadlineTransport

    return anthropic.DefaultHttpxClient(transport=DeadlineTransport(httpx2.HTTPTransport()))
