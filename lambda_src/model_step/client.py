"""The model SDK client: created lazily, once per container.

``import anthropic`` costs about a second, so it happens on the first real model call only;
a container that only serves duplicates never pays it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .api_key import resolve_api_key
from .config import Settings


class ModelClientProvider:
    """Builds ``anthropic.Anthropic`` (or ``anthropic.AnthropicBedrock``) on first ``get()``.

    The client always has ``max_retries=0``: retries belong to Lambda and the idempotency
    record, and a hidden SDK retry would be a second billed request inside one invocation.
    The per-request timeout is passed on each call, not here.
    """

    def __init__(self, settings: Settings, boto3_client: Callable[[str], Any]) -> None:
        """``boto3_client(service_name)`` returns a boto3 client; it is only called when the
        API key has to be read from Secrets Manager."""
        self._settings = settings
        self._boto3_client = boto3_client
        self._client: Any = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        """Return the SDK client, creating it (and importing the SDK) on first use."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._create()
        return self._client

    def _create(self) -> Any:
        import anthropic

        if self._settings.model_provider == "bedrock":
            # IAM credentials from the Lambda role; no API key secret is involved.
            return anthropic.AnthropicBedrock(aws_region=self._settings.aws_region, max_retries=0)
        api_key = resolve_api_key(
            self._settings.api_key_secret_arn,
            lambda: self._boto3_client("secretsmanager"),
        )
        # api_key=None lets the SDK read ANTHROPIC_API_KEY; ANTHROPIC_BASE_URL is read by the
        # SDK too, which is how local runs point at a fake server.
        return anthropic.Anthropic(api_key=api_key, max_retries=0)
