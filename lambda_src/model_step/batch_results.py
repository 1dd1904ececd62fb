"""Apply a batch's results by ``custom_id``, never by position, one line at a time.

:meth:`ResultReader.read` streams a batch's results (never held whole: the rows of
:data:`~.batch_limits.ROWS_PAGE` lines are read with one ``BatchGetItem``) and applies each
line through the realtime path (``answer_row``):

- a line whose row is gone was applied already: a re-read, in any order, is a no-op;
- a line that does not end its key applies only to a row its batch's submission owns, and
  uses the row's claimed attempt once (:func:`.batch_answer.answer`);
- a billed answer (``succeeded``) is stored even for a row another submission owns now
  (the row is then done there too): a billed answer is never thrown away;
- a line that raises (``on_outcome``, a hand-off, a save) is isolated: its row counts the
  failure, the rest of the stream is applied, and the batch is read again next tick; a
  line that failed :data:`~.batch_limits.MAX_APPLY_FAILURES` times is dead-lettered
  ``BatchResultUnapplied`` (stored, or, when even that cannot be notified, the event sent
  to the DLQ as it is).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
)

from . import batch_limits
from .batch_answer import BATCH_RESULT_UNAPPLIED, AnswerRow, BatchAnswer
from .batch_provider import BatchLine, BatchProvider
from .batch_store import BatchStore, Item, text
from .model_call import error_code
from .step_parts import StepParts

T = TypeVar("T")


@dataclass
class Tally:
    """What one tick did, for its summary and its metrics."""

    results: int = 0
    collected: int = 0
    lost: int = 0
    deleted: int = 0
    failed_calls: int = 0


def pages(lines: Iterable[T], size: int) -> Iterator[list[T]]:
    """``lines`` in pages of ``size``; a stream that breaks hands on the lines it gave
    first, then its error is raised (the stream is never held whole)."""
    source = iter(lines)
    while True:
        page: list[T] = []
        try:
            for line in source:
                page.append(line)
                if len(page) >= size:
                    break
        except Exception:
            if page:
                yield page
            raise
        if page:
            yield page
        if len(page) < size:
            return


def claim_open(row: Item) -> bool:
    """The row's claimed attempt is not used by any result yet (absent: an older row)."""
    value = row.get("claimed")
    return value is None or bool(value.get("BOOL"))


class ResultReader:
    """Reads and applies batch results (see the module docstring)."""

    def __init__(self, parts: StepParts, store: BatchStore, provider: BatchProvider) -> None:
        self._parts = parts
        self._store = store
        self._provider = provider

    def read(
        self,
        batch_id: str,
        owners: set[str],
        members: set[str] | None,
        context: Any,
        answer_row: AnswerRow,
        tally: Tally,
        *,
        late: bool = False,
    ) -> tuple[bool, bool]:
        """Stream a batch's results and apply each line; ``(every line applied, a line of
        another workload seen)``. ``members``: the custom_ids this step sent (for an adopted
        batch), else None. ``late``: only billed answers are applied."""
        finished = True
        foreign = False
        with self._provider.results(batch_id) as lines:
            for page in pages(lines, batch_limits.ROWS_PAGE):
                rows = dict(self._store.rows(line.custom_id for line in page))
                for line in page:
                    if batch_limits.out_of_time(context):
                        return False, foreign
                    foreign = foreign or (members is not None and line.custom_id not in members)
                    row = rows.get(line.custom_id)
                    applied = self._apply(batch_id, line, row, owners, context, answer_row, late)
                    finished = finished and applied
                    tally.results += 1
        return finished, foreign

    def _apply(
        self,
        batch_id: str,
        line: BatchLine,
        row: Item | None,
        owners: set[str],
        context: Any,
        answer_row: AnswerRow,
        late: bool,
    ) -> bool:
        """One line; False when it must be tried again (a held record, or a failure)."""
        if row is None or text(row, "state") != "staged":
            return True  # applied before: the key's outcome is stored
        owned = not late and text(row, "submission") in owners
        if line.kind != "succeeded" and not (owned and claim_open(row)):
            return True  # another submission owns its retry, or this result was used
        answer = BatchAnswer(
            kind=line.kind,
            batch_id=batch_id,
            message=line.message,
            error_type=line.error_type,
            request_id=line.request_id,
            late=not owned,
        )
        event = json.loads(text(row, "event") or "{}")
        try:
            if answer_row(event, answer, context) is not None:
                self._store.mark_answered(line.custom_id)
        except IdempotencyAlreadyInProgressError:
            return False  # a killed invocation holds the record until its deadline
        except Exception as exc:
            return self._apply_failed(line.custom_id, event, batch_id, exc, context, answer_row)
        return True

    def _apply_failed(
        self,
        custom_id: str,
        event: Any,
        batch_id: str,
        exc: Exception,
        context: Any,
        answer_row: AnswerRow,
    ) -> bool:
        """A line that raised: counted on its row; dead-lettered once it failed too often."""
        code = error_code(exc)
        failures = self._store.note_apply_failure(custom_id, code)
        self._parts.logger.warning(
            "batch result failed to apply; the rest of the stream goes on",
            extra={"batch_id": batch_id, "error_type": code, "failures": failures},
        )
        if failures < batch_limits.MAX_APPLY_FAILURES:
            return False
        try:
            self._give_up(custom_id, event, batch_id, code, context, answer_row)
        except Exception:
            self._parts.logger.exception("batch result not dead-lettered; tried again later")
            return False
        return True

    def _give_up(
        self,
        custom_id: str,
        event: Any,
        batch_id: str,
        code: str,
        context: Any,
        answer_row: AnswerRow,
    ) -> None:
        """A key whose result line keeps failing: its dead letter is stored (if nothing is),
        and if even that cannot be notified, the event goes to the DLQ as it is."""
        unapplied = BatchAnswer(kind="unapplied", batch_id=batch_id, error_type=code)
        try:
            answer_row(event, unapplied, context)
        except Exception:
            self._parts.dead_letters.send(
                event,
                error_code=BATCH_RESULT_UNAPPLIED,
                error_message=f"the batch result of this row failed to apply: {code}",
            )
        self._store.mark_answered(custom_id)

    # -- lost batches ----------------------------------------------------------------------
