"""The Claude API's Message Batches as a :class:`~.batch_provider.BatchProvider`.

``messages.batches.create / list / retrieve / results / cancel / delete`` through the SDK
client of :class:`~.client.ModelClientProvider` (``max_retries=0``: the core owns every
retry). A create takes no idempotency token, so an uncertain one is reconciled with
``list``. Each call that answers 401 re-reads the API key secret once and is tried again
with the new key, as the realtime path does; a second 401 is the batch's failure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from . import batch_limits, deadline
from .batch_provider import (
    BatchCallFailed,
    BatchLine,
    BatchStatus,
    CreateRefused,
    CreateUncertain,
)
from .client import ModelClientProvider
from .config import Settings
from .model_call import system_blocks
from .model_request import model_fields

T = TypeVar("T")
#: Statuses of a refused create that are no fault of its requests: a rate limit, a key or
#: permission problem. Any other 4xx (400, 413, 422, ...) refuses the requests themselves,
#: which are split down to the one row.
NOT_THE_ROWS = (401, 403, 404, 429)
#: Seconds a create refused for a key or permission problem (401, 403, 404) waits.
KEY_PROBLEM_WAIT_SECONDS = 60.0
_PHASES = {"in_progress": "open", "canceling": "canceling", "ended": "ended"}


class AnthropicBatches:
    """The Claude API's batch calls (see the module docstring)."""

    idempotent_create = False
    quotas = batch_limits.ANTHROPIC_QUOTAS

    def __init__(self, settings: Settings, clients: ModelClientProvider) -> None:
        self._settings = settings
        self._clients = clients

    def request(self, custom_id: str, user_message: str) -> dict[str, Any]:
        """One create request: the realtime request's fields exactly
        (``model_call.ModelCall._send_once``)."""
        settings = self._settings
        return {
            "custom_id": custom_id,
            "params": {
                "model": settings.model_id,
                "max_tokens": settings.max_tokens,
                "system": system_blocks(settings),
                "messages": [{"role": "user", "content": user_message}],
                # Issue 32: thinking and effort, as the realtime request sends them.
                **model_fields(settings),
            },
        }

    def create(self, requests: list[dict[str, Any]], token: str) -> tuple[str, float]:
        """``messages.batches.create`` once, under its total deadline (``token`` is not
        sent: the API takes none)."""
        timeout = batch_limits.CREATE_TIMEOUT_SECONDS
        try:
            with deadline.total(timeout):
                batch = self._authed(
                    lambda client: client.messages.batches.create(
                        requests=requests, timeout=timeout
                    )
                )
        except Exception as exc:
            raise _create_failure(exc) from exc
        return str(batch.id), batch.created_at.timestamp()

    def created_between(self, low: float, high: float, requests: int) -> list[tuple[str, float]]:
        """Page ``list`` (newest first) back to ``low``."""
        found: list[tuple[str, float]] = []
        try:
            page = self._authed(lambda client: client.messages.batches.list(limit=100))
            for batch in page:
                created = batch.created_at.timestamp()
                if created < low:
                    break  # newest first: everything after is older
                counts = batch.request_counts
                total = (
                    counts.processing
                    + counts.succeeded
                    + counts.errored
                    + counts.canceled
                    + counts.expired
                )
                if created <= high and total == requests:
                    found.append((str(batch.id), created))
        except Exception as exc:
            raise _call_failure(exc) from exc
        return found

    def status(self, batch_id: str) -> BatchStatus:
        try:
            batch = self._authed(lambda client: client.messages.batches.retrieve(batch_id))
        except Exception as exc:
            raise _call_failure(exc) from exc
        counts = batch.request_counts
        return BatchStatus(
            batch_id=batch_id,
            phase=_PHASES.get(str(batch.processing_status), "open"),  # type: ignore[arg-type]
            created_at=batch.created_at.timestamp(),
            requests=counts.processing
            + counts.succeeded
            + counts.errored
            + counts.canceled
            + counts.expired,
        )

    @contextmanager
    def results(self, batch_id: str) -> Iterator[Iterator[BatchLine]]:
        try:
            stream = self._authed(lambda client: client.messages.batches.results(batch_id))
        except Exception as exc:
            raise _call_failure(exc) from exc
        try:
            yield _lines(stream)
        finally:
            stream.close()

    def cancel(self, batch_id: str) -> None:
        try:
            self._authed(lambda client: client.messages.batches.cancel(batch_id))
        except Exception as exc:
            raise _call_failure(exc) from exc

    def delete(self, batch_id: str) -> None:
        try:
            self._authed(lambda client: client.messages.batches.delete(batch_id))
        except Exception as exc:
            failure = _call_failure(exc)
            if failure.gone:
                return  # deleted already (a delete whose answer was lost)
            raise failure from exc

    def _authed(self, call: Callable[[Any], T]) -> T:
        """``call(client)``; after a 401, once more with the key re-read from its secret."""
        client = self._clients.get()
        try:
            return call(client)
        except Exception as exc:
            if getattr(exc, "status_code", None) != 401 or not self._clients.can_refresh:
                raise
            fresh, _changed = self._clients.refresh(client)
            return call(fresh)


def _lines(stream: Any) -> Iterator[BatchLine]:
    """The SDK's result lines as :class:`BatchLine`; a broken stream raises
    :class:`BatchCallFailed`."""
    lines = iter(stream)
    while True:
        try:
            line = next(lines)
        except StopIteration:
            return
        except Exception as exc:  # the SDK's stream error, whatever its class
            raise _call_failure(exc) from exc
        yield _line(line)


def _line(line: Any) -> BatchLine:
    result = line.result
    kind = str(result.type)
    if kind != "errored":
        return BatchLine(str(line.custom_id), kind, message=getattr(result, "message", None))
    error = getattr(result, "error", None)
    inner = getattr(error, "error", None)
    return BatchLine(
        str(line.custom_id),
        kind,
        error_type=str(getattr(inner, "type", None) or "api_error"),
        request_id=getattr(error, "request_id", None),
    )


def _retry_after(exc: Any) -> float | None:
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    try:
        value = headers.get("retry-after")
        return None if value is None else max(1.0, float(value))
    except ValueError:
        return None


def _call_failure(exc: Exception) -> BatchCallFailed:
    """The neutral failure of an SDK error (404: gone)."""
    status = getattr(exc, "status_code", None)
    return BatchCallFailed(
        type(exc).__name__ if status is None else f"{type(exc).__name__}:{status}",
        gone=status == 404,
        retry_after=_retry_after(exc),
    )


def _create_failure(exc: Exception) -> Exception:
    """A refused create (nothing was created) or an uncertain one."""
    import anthropic

    status = getattr(exc, "status_code", None)
    if (
        not isinstance(exc, anthropic.APIStatusError)
        or status in (408, 409)
        or (status is not None and status >= 500)
    ):
        return CreateUncertain(type(exc).__name__)
    if status == 429:
        wait = _retry_after(exc) or batch_limits.BACKOFF_SECONDS
    else:
        wait = KEY_PROBLEM_WAIT_SECONDS
    return CreateRefused(
        type(exc).__name__,
        status=status,
        rows_at_fault=status not in NOT_THE_ROWS,
        retry_after=wait,
        request_id=getattr(exc, "request_id", None),
    )
