"""Below the provider's minimum per batch: a due submission's rows go as single requests.

Bedrock fails a batch inference job with fewer records than its minimum (100 by default),
so a submission still that small once ``BATCH_MAX_WAIT_SECONDS`` has passed is not sent as
a job: each row is answered with one request on the attempt it claimed when it was staged
(``realtime`` answers, :func:`.batch_answer.answer`), at the realtime price. Waiting on for
more rows could strand a small upload for as long as no other arrives; sending the job
anyway would fail it and spend every row's budget.
"""

from __future__ import annotations

import json
from typing import Any

from . import batch_limits, clock
from .batch_answer import AnswerRow, BatchAnswer
from .batch_store import BatchStore
from .step_parts import StepParts


def send_singly(
    parts: StepParts,
    store: BatchStore,
    submission: str,
    events: dict[str, str],
    context: Any,
    answer_row: AnswerRow,
) -> None:
    """A due submission with fewer rows than the provider's batch takes (Bedrock's
    minimum records per job): each row is sent as one request (``realtime`` answers,
    :func:`.batch_answer.answer`) rather than waiting on for rows that may never come.
    ``pending -> realtime`` first, so one invocation sends them; a row that goes again
    claims its next attempt and waits in a new submission; a crash leaves the
    submission ``realtime``, and the tick rehomes the rows it still owns."""
    if not store.transition(submission, "pending", "realtime", started_at=clock.now()):
        return
    parts.logger.info(
        "batch below the provider's minimum: its rows go as single requests",
        extra={"submission": submission, "requests": len(events)},
    )
    again: list[str] = []
    settled = True
    for custom_id, event_json in events.items():
        if batch_limits.out_of_time(context):
            settled = False  # the rows left are rehomed by a later tick
            break
        event = json.loads(event_json)
        try:
            for kind in ("realtime", "resubmit"):
                if answer_row(event, BatchAnswer(kind=kind), context) is not None:
                    store.mark_answered(custom_id)
                    break
            else:
                again.append(custom_id)
        except Exception as exc:
            settled = False
            parts.logger.warning(
                "a row below the batch minimum is not answered yet",
                extra={"submission": submission, "error_type": type(exc).__name__},
            )
    if again:
        new = store.new_submission_id()
        store.put_submission(new, again, clock.now())
        for custom_id in again:
            store.move_row(custom_id, submission, new, claimed=True)
    if settled and store.transition(submission, "realtime", "done"):
        store.close_submission(submission)
