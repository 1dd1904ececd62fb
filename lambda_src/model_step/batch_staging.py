"""Stage: a row of the batch path is written instead of sent, inside the key's record lock.

A row's key is handled exactly as in realtime up to the model call: same record key, same
idempotency record (a stored answer replays, a held record waits), same attempt budget.
Then :meth:`BatchStaging.stage` writes the row (:mod:`.batch_store`) owned by this
invocation's *submission*, claims an attempt of the key's budget, and raises
:class:`Staged`, which releases the lock without storing anything. A duplicate finds the
live row and makes no request and no claim; one with a different payload is an
``IdempotencyValidationError``, which the runtime dead-letters ``IdempotencyPayloadMismatch``
as in realtime. A key whose record is stored (answered in realtime or by an earlier batch)
never gets here: it replays.

An invocation stages into one submission until the next row would take it past
``BATCH_MAX_REQUESTS`` or the create body the function's memory can send
(:func:`.batch_limits.create_bytes_limit`); it then closes that one (full: sent at once)
and stages on into a new one.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any, NoReturn

from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyValidationError

from . import batch_limits
from .batch_provider import BatchProvider
from .batch_signals import Staged, StagedDeadLetter, exhausted
from .batch_store import BatchStore, custom_id_of, text
from .delivery import Delivery
from .step_parts import StepParts


@dataclass
class Staging:
    """What one invocation staged: its submissions, oldest first (all but the last are
    full), and the rows each owns."""

    filled: list[str]
    current: str
    owned: dict[str, list[str]]


def payload_of(detail: Any) -> str:
    """The sha256 of a canonical detail, as a row keeps it."""
    return hashlib.sha256(json.dumps(detail, sort_keys=True, default=str).encode()).hexdigest()


class _Invocation(threading.local):
    """What the invocation in progress has staged. One invocation runs per thread (a
    container runs one at a time; a local run or a test may run several on one step at
    once), so each thread keeps its own: one invocation's flush never takes another's rows."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Start afresh (this thread's values only)."""
        #: The submission the invocation stages its rows into now (None: not made yet).
        self.submission_id: str | None = None
        #: The invocation's full submissions before ``submission_id``, oldest first.
        self.filled: list[str] = []
        #: Rows, and create bytes (estimated), of ``submission_id`` so far.
        self.count = 0
        self.bytes = 0
        #: By submission id, the rows written as its own (staged or adopted), whether or
        #: not their staging then completed: a row whose staging failed after the write (the
        #: claim, or the release of the key's record, answered an error) is still owned by
        #: the submission, and its redelivery finds it owned, so the submission must list it.
        self.owned: dict[str, list[str]] = {}


class BatchStaging:
    """The rows one container stages (see the module docstring)."""

    def __init__(self, parts: StepParts, store: BatchStore, provider: BatchProvider) -> None:
        self._parts = parts
        self._store = store
        self._provider = provider
        #: Create bytes of a request besides its user message (the system prompt, ...).
        self._request_bytes: int | None = None
        self._now = _Invocation()

    @property
    def submission_id(self) -> str:
        """The submission the invocation in progress stages its rows into now."""
        if self._now.submission_id is None:
            self._now.submission_id = self._store.new_submission_id()
        return self._now.submission_id

    def take(self) -> Staging:
        """What this invocation staged; its next invocation starts afresh."""
        now = self._now
        current = self.submission_id
        staging = Staging(
            now.filled, current, {s: now.owned.get(s, []) for s in [*now.filled, current]}
        )
        now.reset()
        return staging

    def custom_id(self, request: dict[str, Any]) -> str:
        """The custom_id of a request's record."""
        return custom_id_of(self._parts.persistence.record_id(request))

    def stage(self, request: dict[str, Any], delivery: Delivery, user_message: str) -> NoReturn:
        """Stage the row of ``request`` and claim an attempt of its budget (see the module
        docstring); raises :class:`Staged`, :class:`StagedDeadLetter` when the budget is
        spent, or ``IdempotencyValidationError`` for another payload under a waiting key.
        A live row owned by a submission that does not exist (an invocation killed before
        writing it) is adopted; its attempt was claimed when it was first staged."""
        store = self._store
        custom_id = self.custom_id(request)
        event_json = json.dumps(dict(delivery.event), sort_keys=True, default=str)
        payload = payload_of(request["detail"])
        size = self._bytes_of(user_message)
        submission = self._submission_for(size, delivery.context)
        found = store.stage_row(custom_id, event_json, user_message, submission, payload)
        if found is not None:
            waiting = text(found, "payload")
            if waiting is not None and waiting != payload:
                raise IdempotencyValidationError(
                    "a row with another payload waits in a batch under this key"
                )
            owner = text(found, "submission") or ""
            mine = owner == submission or owner in self._now.filled
            orphan = not mine and store.submission(owner) is None
            if not (orphan and store.adopt_orphan(custom_id, owner, submission)):
                raise Staged(custom_id, new=False)
            self._own(submission, custom_id, size)
            raise Staged(custom_id, new=True)
        self._own(submission, custom_id, size)
        claim = self._parts.budget(request).claim()
        delivery.attempts_spent = claim.state.attempts
        if not claim.granted:
            store.mark_answered(custom_id)
            raise StagedDeadLetter(exhausted(claim))
        raise Staged(custom_id, new=True)

    def _bytes_of(self, user_message: str) -> int:
        """The create bytes of a request with ``user_message`` (as the provider builds it,
        serialised as the SDK sends it)."""
        if self._request_bytes is None:
            self._request_bytes = len(json.dumps(self._provider.request(custom_id_of(""), "")))
        return self._request_bytes + len(json.dumps(user_message)) + 2  # ", " between two

    def _submission_for(self, size: int, context: Any) -> str:
        """The submission a row of ``size`` create bytes joins: the current one, or a new
        one when the row would take the current one past ``BATCH_MAX_REQUESTS`` (at most
        :data:`.batch_limits.SUBMISSION_ROWS`) or the create bytes limit."""
        quotas = self._provider.quotas
        cap = min(
            self._parts.settings.batch_max_requests,
            batch_limits.SUBMISSION_ROWS,
            quotas.max_requests,
        )
        limit = min(batch_limits.create_bytes_limit(context), quotas.max_bytes)
        now = self._now
        if now.count and (now.count >= cap or now.bytes + size > limit):
            now.filled.append(self.submission_id)
            now.submission_id = self._store.new_submission_id()
            now.count = now.bytes = 0
        return self.submission_id

    def _own(self, submission: str, custom_id: str, size: int) -> None:
        now = self._now
        now.owned.setdefault(submission, []).append(custom_id)
        now.count += 1
        now.bytes += size
