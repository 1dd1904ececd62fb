"""The model SDK client: created lazily, once per container, re-keyed when the key changes.

``import anthropic`` costs about a second, so it happens on the first real model call only;
a container that only serves duplicates never pays it (unless SnapStart primes it at init).
Even then only the SDK modules the call uses are loaded (``sdk_import``).
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
                    anthropic = _sdk()
                    # IAM credentials from the Lambda role; no API key secret is involved.
                    # ANTHROPIC_BEDROCK_BASE_URL, read by the SDK, points a test or a local
                    # run at a fake bedrock-runtime.
                    self._client = anthropic.AnthropicBedrock(
                        aws_region=self._settings.aws_region,
                        max_retries=0,
                        http_client=_http_client(bedrock=True),
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
                anthropic = _sdk()
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


def _sdk() -> Any:
    """The ``anthropic`` module, loaded lazily (:func:`.sdk_import.sdk`). Imported here, not
    at module level: a duplicate never needs it."""
    from .sdk_import import sdk

    return sdk()


def _http_client(*, bedrock: bool = False) -> Any:
    """The SDK's own default HTTP client, on a transport that enforces the total deadline
    (and, for Bedrock, names Bedrock's request id the way the SDK reads it)."""
    import httpx2

    from .deadline import DeadlineTransport

    anthropic = _sdk()

    transport: httpx2.BaseTransport = DeadlineTransport(httpx2.HTTPTransport())
    if bedrock:
        transport = _bedrock_request_ids(transport)
    return anthropic.DefaultHttpxClient(transport=transport)


# -- Bedrock (issue 22) ----------------------------------------------------------------------
#: The ``anthropic_version`` Bedrock's InvokeModel requires in the body of a Claude request.
#: The SDK fills the field with the Messages API's own version when it is absent, which
#: Bedrock refuses (ValidationException), so the runtime sends this one itself.
BEDROCK_ANTHROPIC_VERSION = "bedrock-2023-05-31"
#: Bedrock's request id header; the SDK reads only the Claude API's ``request-id``.
BEDROCK_REQUEST_ID_HEADER = "x-amzn-requestid"


def request_options(settings: Settings) -> dict[str, Any]:
    """Extra keyword arguments of ``messages.create`` for the provider: for Bedrock, the
    body's ``anthropic_version``; none for the Claude API."""
    if settings.model_provider == "bedrock":
        return {"extra_body": {"anthropic_version": BEDROCK_ANTHROPIC_VERSION}}
    return {}


def _bedrock_request_ids(inner: Any) -> Any:
    """A transport that copies Bedrock's ``x-amzn-requestid`` into ``request-id`` when the
    answer has none, so ``message._request_id`` and ``error.request_id`` (read by the SDK
    from ``request-id``) carry Bedrock's id into the stored result and the DLQ message."""
    import httpx2

    class BedrockRequestIdTransport(httpx2.BaseTransport):
        def handle_request(self, request: httpx2.Request) -> httpx2.Response:
            response: httpx2.Response = inner.handle_request(request)
            request_id = response.headers.get(BEDROCK_REQUEST_ID_HEADER)
            if request_id and "request-id" not in response.headers:
                response.headers["request-id"] = request_id
            return response

        def close(self) -> None:
            inner.close()

    return BedrockRequestIdTransport()
