"""What the provider-neutral batch core asks of a provider's batch API (one adapter each).

The core (stage, submit, reconcile, collect by id, delete) never calls an SDK itself. An
adapter turns the provider's batch API into these calls and its errors into the three
exceptions below:

- :meth:`BatchProvider.request`: one request record of a row (the Claude API's
  ``{"custom_id", "params"}``; Bedrock batch inference's ``{"recordId", "modelInput"}``);
- :meth:`BatchProvider.create`: send a submission's requests as one batch, with the
  submission id as the idempotency token (Bedrock's ``clientRequestToken`` makes a repeat
  harmless; the Claude API has no token, so :attr:`BatchProvider.idempotent_create` is
  False and an uncertain create is reconciled with :meth:`BatchProvider.created_between`);
- :meth:`BatchProvider.status`, :meth:`BatchProvider.results` (a stream of
  :class:`BatchLine`, applied by ``custom_id``, never by position), :meth:`BatchProvider.
  cancel` and :meth:`BatchProvider.delete` (once its results are stored: the prompts, row
  values, leave the provider).

Every call re-reads a rotated API key once after a 401 (the adapter's business). Standard
library only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from .batch_limits import ProviderQuotas

#: Where a batch is: still processing, canceling, or ended (results can be read).
BatchPhase = Literal["open", "canceling", "ended"]


@dataclass(frozen=True)
class BatchStatus:
    """A batch as the provider reports it."""

    batch_id: str
    phase: BatchPhase
    #: Epoch seconds of the batch's creation, on the provider's clock.
    created_at: float
    #: Requests the batch holds, whatever their state.
    requests: int


@dataclass(frozen=True)
class BatchLine:
    """One result of a batch, matched to its row by ``custom_id``.

    ``kind``: ``succeeded`` (``message`` holds the model's answer, billed), ``errored``
    (``error_type`` says which of the provider's error types), ``expired`` or ``canceled``
    (never billed)."""

    custom_id: str
    kind: str
    message: Any = None
    error_type: str | None = None
    request_id: str | None = None


class BatchCallFailed(Exception):
    """A call about one batch failed. ``gone``: the provider does not know the batch (404:
    deleted, or its key moved to another Workspace); ``retry_after``: seconds it asked to
    wait (429/529), else None. Anything else (5xx, a dropped connection, a broken stream,
    a 401 that a fresh key did not cure) is tried again on the batch's own schedule."""

    def __init__(self, code: str, *, gone: bool = False, retry_after: float | None = None) -> None:
        super().__init__(code)
        self.code = code
        self.gone = gone
        self.retry_after = retry_after


class CreateRefused(Exception):
    """The provider refused a create, so nothing was created. ``rows_at_fault``: the
    requests themselves are refused (400, 413, 422: split, down to the one row); else the
    submission waits ``retry_after`` seconds (429; a key or permission problem)."""

    def __init__(
        self,
        code: str,
        *,
        status: int | None,
        rows_at_fault: bool,
        retry_after: float,
        request_id: str | None = None,
    ) -> None:
        super().__init__(code)
        self.code = code
        self.status = status
        self.rows_at_fault = rows_at_fault
        self.retry_after = retry_after
        self.request_id = request_id


class CreateUncertain(Exception):
    """A create that may or may not have made a batch (a timeout, a dropped connection, a
    5xx): nothing is sent again before the submission is reconciled."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class BatchProvider(Protocol):
    """One provider's batch API, as the core uses it (see the module docstring)."""

    #: A repeated create with the same token makes no second batch.
    idempotent_create: bool
    #: What a batch may hold and how long the provider keeps one open.
    quotas: ProviderQuotas

    def request(self, custom_id: str, user_message: str) -> dict[str, Any]:
        """The request record of one row."""
        ...

    def create(self, requests: list[dict[str, Any]], token: str) -> tuple[str, float]:
        """Create one batch of ``requests``: ``(batch id, created_at)``. Raises
        :class:`CreateRefused` or :class:`CreateUncertain`."""
        ...

    def created_between(self, low: float, high: float, requests: int) -> list[tuple[str, float]]:
        """``(batch id, created_at)`` of every batch created between ``low`` and ``high``
        holding ``requests`` requests (an uncertain create's candidates)."""
        ...

    def status(self, batch_id: str) -> BatchStatus:
        """The batch now; raises :class:`BatchCallFailed`."""
        ...

    def results(self, batch_id: str) -> AbstractContextManager[Iterator[BatchLine]]:
        """The batch's results as a stream, in whatever order the provider sends them;
        opening or reading it raises :class:`BatchCallFailed`."""
        ...

    def cancel(self, batch_id: str) -> None:
        """Ask the provider to stop the batch; raises :class:`BatchCallFailed`."""
        ...

    def delete(self, batch_id: str) -> None:
        """Delete the batch and its results (gone already counts as deleted); raises
        :class:`BatchCallFailed`."""
        ...
