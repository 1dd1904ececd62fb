"""The invariants checked after every schedule, per key and per lifetime of its memory.

Each check returns :class:`Violation` s naming the invariant, so a run can stop at the first
(``make test``) or collect them all (the mutant runner, :mod:`.mutants`). Per life
(:mod:`.observed`):

``budget``
    at most ``MAX_ATTEMPTS`` billed requests (one for a key an operator redrove from the DLQ);
``billed-after-stored``
    no request once the life's result is stored;
``terminal-outcome`` / ``one-outcome``
    a life that reached the runtime has a terminal outcome, and every terminal outcome
    reported for it (and the stored result, while remembered) is the same;
``dead-letter-on-dlq``
    a dead-lettered life's dead letter is on the DLQ (``DEAD_LETTER_ID``, ``ERROR_CODE``),
    so the DLQ alarm (``ApproximateNumberOfMessagesVisible``) sees it;
``counted-once``
    ``NonRetryableFailures`` counts a dead-lettered life once (0 allowed only when the
    invocation was killed between the counting write and its metric), an answer never; a
    ``ResultEventUndeliverable`` dead letter of the life counts once more;
``result-event-once`` / ``result-event-missing``
    at most one result event per life; none only when a kill may have lost the publish
    after the result was stored, or a dead letter tells the operator;
``metric-model-requests`` / ``metric-attempts-interrupted`` / ``metric-tokens``
    the metrics count what the fake API billed: every billed request that reported back (a
    DynamoDB write followed it in its invocation) is in ``ModelRequests``, none that was not
    billed is (but an attempt killed before it reported back and not billed, which no one
    can tell from a billed one, may be), and each billed request is in ``ModelRequests`` or
    ``AttemptsInterrupted``; ``AttemptsInterrupted`` is at least the attempts killed after
    their request was sent and before they reported back; the token metrics lie between
    the tokens of the reported answers and all billed tokens;
``outcome-totals``
    the ``model_requests`` and tokens ``on_outcome`` recorded for the life (the ledger sums
    them; a call the hook failed recorded nothing) lie within the same bounds;
``outcome-per-delivery``
    each ``on_outcome`` call's ``model_requests`` is at least the billed requests its
    delivery read the answer of, and at most the requests it sent;
``window``
    no rate-limit wait and no put-back past ``max_event_age`` from the key's first-seen time
    (the first write of its budget item in this life);
``receives-exhausted``
    a ``ReceivesExhausted`` dead letter only after the redrive queue handed the life more
    than :data:`REDRIVE_PUT_BACKS` distinct messages or past ``max_event_age``, and it
    reports at least the attempts billed;
``never-lost``
    every life published ends in a terminal outcome or on the DLQ;
``queues-drained`` / ``bounded``
    the buffer and redrive queues drain, and no life takes more than
    :data:`~.harness.MAX_INVOCATIONS_PER_LIFE` invocations;
``uncoded-dead-letter`` / ``dead-letter-identity`` / ``dead-letter-visible``
    a DLQ message without a code only after every receive the redrive queue gave it
    failed; a coded one names its row (its business key is in the body); every message on
    the DLQ is visible to its alarm (the queue's ``ApproximateNumberOfMessages``, CloudWatch's
    ``ApproximateNumberOfMessagesVisible``);
``result-bus``
    (classic) moto delivered every event the bus said it took.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from . import backends, model_api
from .lab import FaultLab
from .observed import Life, LifeRecord, Scope, scope_of

#: Times the runtime puts back a row the buffer queue gave up on (docs/runtime.md).
REDRIVE_PUT_BACKS = 2
#: Seconds of slack on clock comparisons (the publisher's pauses run on the lab's clock).
SLACK_SECONDS = 2.0
_ATTEMPTS_SPENT = re.compile(r"(\d+) of (\d+) attempts were spent")


@dataclass(frozen=True)
class Violation:
    """One invariant that did not hold."""

    invariant: str
    where: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.invariant}] {self.where}: {self.detail}"


@dataclass
class DeadLetters:
    """Every DLQ message a schedule produced: on the DLQ now, or moved back by an operator."""

    messages: list[dict[str, Any]]
    #: Scopes whose rows ended uncoded on the DLQ with no receive left to answer them.
    unanswerable: set[Scope]

    @classmethod
    def of(cls, lab: FaultLab) -> DeadLetters:
        messages = lab.dead_letters() + lab.redriven_dlq_messages
        for message in messages:
            message["sent_by_step"] = message["message_id"] in lab.step_dead_letters
        unanswerable = {_scope(m) for m in messages if not _coded(m) and _no_run_left(lab, m)}
        return cls(messages, unanswerable)

    def carrying(self, dead_letter_id: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if _dead_letter_id(m) == dead_letter_id]

    def of_scope(self, scope: Scope) -> list[dict[str, Any]]:
        """The DLQ messages of ``scope``'s rows. A DLQ body carries its own marker
        (``"dead_letter": {"id"}``), which makes it a redrive only once an operator moves it
        back: read on the DLQ, that marker is the message's own id, not the row's scope."""
        return [m for m in self.messages if _row_scope(m) == scope]


def check(lab: FaultLab) -> list[Violation]:
    """Every violation of the schedule that just drained (see the module docstring)."""
    lab.wait_for_reads()
    found: list[Violation] = []
    if lab.unbounded is not None:
        found.append(Violation("bounded", "schedule", lab.unbounded))
    else:
        found += _queues(lab)
    dead = DeadLetters.of(lab)
    for life, record in lab.lives.items():
        where = _where(lab, life)
        found += [Violation(name, where, detail) for name, detail in _life(lab, life, record, dead)]
    found += _dead_letter_messages(lab, dead)
    found += _result_bus(lab)
    return found


def _life(
    lab: FaultLab, life: Life, record: LifeRecord, dead: DeadLetters
) -> Iterator[tuple[str, str]]:
    yield from _budget(lab, life, record)
    yield from _outcomes(lab, life, record, dead)
    yield from _result_events(lab, life, record, dead)
    yield from _metrics(record)
    yield from _totals(record)
    yield from _per_delivery(record)
    yield from _window(lab, record)
    yield from _receives_exhausted(lab, life, record)
    yield from _never_lost(lab, life, record, dead)


def _budget(lab: FaultLab, life: Life, record: LifeRecord) -> Iterator[tuple[str, str]]:
    # An operator's retry (a DLQ redrive or a new replay generation) buys one request.
    retry = life.scope.redrive_of is not None or life.scope.generation is not None
    limit = 1 if retry else lab.settings.max_attempts
    if record.billed > limit:
        yield "budget", f"{record.billed} billed requests, budget {limit}"
    for note in record.requests_after_stored:
        yield "billed-after-stored", note


def _outcomes(
    lab: FaultLab, life: Life, record: LifeRecord, dead: DeadLetters
) -> Iterator[tuple[str, str]]:
    terminal = record.terminal
    unanswerable = life.scope in dead.unanswerable
    if record.invocations and not terminal and not unanswerable:
        yield "terminal-outcome", f"no terminal outcome after {record.invocations} invocations"
    stored = lab.stored(life.scope) if lab.life_of(life.scope) == life else None
    results = terminal + ([stored] if stored is not None else [])
    if results and not all(_same(result, results[0]) for result in results):
        statuses = [(r.get("status"), r.get("error_code"), r.get("request_id")) for r in results]
        yield "one-outcome", f"different terminal results: {statuses}"
    if not results:
        return
    result = results[0]
    counted = record.metrics["NonRetryableFailures"]
    if result["status"] != "dead_lettered":
        allowed = {0, 1} if dead.of_scope(life.scope) else {0}
        if counted not in allowed:
            yield "counted-once", f"an answer counted {counted} times as a failure"
        return
    code, dead_letter_id = result.get("error_code"), result.get("dead_letter_id")
    # A dead-letter id is the record key's in one life (its first-seen time): a message
    # with another code is a dead letter of the key's hand-offs (a refused result event).
    carrying = [
        m
        for m in dead.carrying(str(dead_letter_id))
        if m["attributes"].get("ERROR_CODE", code) == code
    ]
    if not code:
        yield "dead-letter-on-dlq", "a dead letter without a code"
    if not carrying and not unanswerable:
        yield "dead-letter-on-dlq", f"dead-lettered as {code} but no DLQ message carries it"
    once = {0, 1} if record.count_window_kill or unanswerable else {1}
    if any(
        m["attributes"].get("ERROR_CODE") == "ResultEventUndeliverable"
        for m in dead.of_scope(life.scope)
    ):
        # The dead letter's result event was refused to the end: a second, coded dead letter
        # of its own, counted once more.
        once |= {n + 1 for n in once}
    if counted not in once:
        yield "counted-once", f"counted {counted} times as a non-retryable failure"


def _result_events(
    lab: FaultLab, life: Life, record: LifeRecord, dead: DeadLetters
) -> Iterator[tuple[str, str]]:
    if lab.bus is None:
        return
    if len(record.events) > 1:
        yield "result-event-once", f"{len(record.events)} result events: {record.events}"
    if record.terminal and not record.events:
        # The key's own coded dead letter tells nothing of its result event: only one that
        # says the event was refused, or the row's copy moved to the DLQ uncoded, does. An
        # operator's redrive keeps the looser rule (any dead letter of its scope): a refused
        # cut payload publishes nothing by design, and a republish's refusal is attributed
        # to the row it republishes.
        telling = [
            m
            for m in dead.of_scope(life.scope)
            if life.scope.redrive_of is not None
            or not _coded(m)
            or m["attributes"].get("ERROR_CODE") == "ResultEventUndeliverable"
        ]
        if record.kills_after_result == 0 and not telling:
            yield (
                "result-event-missing",
                (
                    "a terminal outcome, no result event, no kill that could have lost it and "
                    "no dead letter telling the operator (a refused event's, or the row's "
                    "uncoded copy)"
                ),
            )


def _metrics(record: LifeRecord) -> Iterator[tuple[str, str]]:
    metrics = record.metrics
    requests, interrupted = metrics["ModelRequests"], metrics["AttemptsInterrupted"]
    billed, reported = record.billed, record.billed_reported
    if not reported <= requests <= billed + record.uncertain:
        yield (
            "metric-model-requests",
            f"ModelRequests {requests:g}; billed {billed}, of which {reported} reported back "
            f"({record.uncertain} more attempts uncertain)",
        )
    if requests + interrupted < billed:
        yield (
            "metric-model-requests",
            (
                f"{billed} billed, {requests:g} in ModelRequests, {interrupted:g} in "
                "AttemptsInterrupted: a billed request nobody counted"
            ),
        )
    if interrupted < record.interrupted:
        yield (
            "metric-attempts-interrupted",
            (
                f"AttemptsInterrupted {interrupted:g}, {record.interrupted} attempts interrupted "
                "after their request was sent"
            ),
        )
    for name, per_answer in (
        ("InputTokens", model_api.INPUT_TOKENS),
        ("OutputTokens", model_api.OUTPUT_TOKENS),
    ):
        low = record.tokens(reported_only=True) * per_answer
        high = record.tokens(reported_only=False) * per_answer
        if not low <= metrics[name] <= high:
            yield "metric-tokens", f"{name} {metrics[name]:g}, billed {low}-{high}"


def _per_delivery(record: LifeRecord) -> Iterator[tuple[str, str]]:
    for reported, read, sent in record.deliveries:
        if not read <= reported <= sent:
            yield (
                "outcome-per-delivery",
                (
                    f"on_outcome reported {reported} model requests for a delivery that sent "
                    f"{sent}, {read} of them billed and read"
                ),
            )


def _totals(record: LifeRecord) -> Iterator[tuple[str, str]]:
    recorded = record.recorded
    # A key is counted from its totals (issue 31): ``key_model_requests`` and ``key_usage``
    # on its terminal outcomes cover every delivery, killed ones too. Outcomes without them
    # (no terminal result yet) count their own delivery's.
    keyed = [o for o in recorded if o.get("key_model_requests") is not None]
    if keyed:
        requests = max(int(o["key_model_requests"]) for o in keyed)
    else:
        requests = sum(int(o.get("model_requests") or 0) for o in recorded)
    if not record.billed_reported <= requests <= record.billed + record.uncertain:
        yield (
            "outcome-totals",
            f"on_outcome recorded {requests} model requests; billed {record.billed}, of which "
            f"{record.billed_reported} reported back ({record.uncertain} more uncertain)",
        )
    if keyed:
        tokens = max(int((o.get("key_usage") or {}).get("input_tokens") or 0) for o in keyed)
    else:
        tokens = sum(int((o.get("usage") or {}).get("input_tokens") or 0) for o in recorded)
    low = record.tokens(reported_only=True) * model_api.INPUT_TOKENS
    high = record.tokens(reported_only=False) * model_api.INPUT_TOKENS
    if not low <= tokens <= high:
        yield "outcome-totals", f"on_outcome recorded {tokens} input tokens; billed {low}-{high}"


def _window(lab: FaultLab, record: LifeRecord) -> Iterator[tuple[str, str]]:
    if record.first_seen is None:
        return
    limit = lab.settings.max_event_age + SLACK_SECONDS
    for moment, outcome, _ in record.outcomes:
        waiting = outcome["status"] == "rate_limited" or outcome.get("error_code") == "Requeued"
        age = moment - record.first_seen
        if waiting and age > limit:
            yield (
                "window",
                (
                    f"{outcome['status']} ({outcome.get('error_code')}) {age:.0f} s after the key "
                    f"was first seen; max_event_age {lab.settings.max_event_age}"
                ),
            )


def _receives_exhausted(lab: FaultLab, life: Life, record: LifeRecord) -> Iterator[tuple[str, str]]:
    for moment, outcome, _ in record.outcomes:
        result = outcome.get("result") or {}
        if result.get("error_code") != "ReceivesExhausted":
            continue
        age = moment - record.first_seen if record.first_seen is not None else 0.0
        given_up = len(record.redrive_messages)
        if given_up <= REDRIVE_PUT_BACKS and age < lab.settings.max_event_age - SLACK_SECONDS:
            yield (
                "receives-exhausted",
                (
                    f"ReceivesExhausted after {given_up} messages from the redrive queue, "
                    f"{age:.0f} s after first seen"
                ),
            )
        spent = _ATTEMPTS_SPENT.search(str(result.get("error_message") or ""))
        if spent and int(spent.group(1)) < record.billed:
            yield (
                "receives-exhausted",
                (f"reports {spent.group(1)} attempts spent; {record.billed} were billed"),
            )
        return


def _never_lost(
    lab: FaultLab, life: Life, record: LifeRecord, dead: DeadLetters
) -> Iterator[tuple[str, str]]:
    if life not in lab.published and not record.invocations:
        return
    if record.terminal or dead.of_scope(life.scope):
        return
    dropped = f" ({record.retention_drops} copies dropped at the end of retention)"
    yield (
        "never-lost",
        "published, never answered and not on the DLQ"
        + (dropped if record.retention_drops else ""),
    )


def _queues(lab: FaultLab) -> Iterator[Violation]:
    for name, url in (("buffer", lab.buffer_url), ("redrive", lab.redrive_url)):
        depth = lab.queue_depth(url)
        if depth:
            yield Violation("queues-drained", name, f"{depth} messages left")


def _dead_letter_messages(lab: FaultLab, dead: DeadLetters) -> Iterator[Violation]:
    least = lab.settings.redrive_max_receive_count - lab.settings.buffer_max_receive_count
    # SQS's ApproximateNumberOfMessages is what CloudWatch graphs as the alarm's metric,
    # ApproximateNumberOfMessagesVisible.
    visible, _ = backends.queue_counts(lab.dlq_url)
    if visible != len(lab.dead_letters()):
        yield Violation("dead-letter-visible", "DLQ", f"{visible} visible to the alarm")
    lives_by_id: dict[str, list[Life]] = {}
    for message in dead.messages:
        life = lab.step_dead_letters.get(message["message_id"])
        dead_letter_id = _dead_letter_id(message)
        if life is not None and dead_letter_id is not None:
            lives = lives_by_id.setdefault(dead_letter_id, [])
            if life not in lives:
                lives.append(life)
    for lives in lives_by_id.values():
        if len(lives) > 1:
            # An operator's redrive of either would be the other's redrive key.
            yield Violation(
                "dead-letter-id-per-life",
                _where(lab, lives[0]),
                f"one dead-letter id for {len(lives)} lives: "
                + "; ".join(_where(lab, life) for life in lives),
            )
    for number, message in enumerate(dead.messages, start=1):
        where = f"DLQ message #{number}"
        if not _coded(message):
            failed = lab.failed_redrive_receives[message["message_id"]]
            if failed < least and message["message_id"] not in lab.spent_on_arrival:
                yield Violation(
                    "uncoded-dead-letter", where, f"no code after {failed} failed receives"
                )
            continue
        if any(part is None for part in _scope(message).business_key):
            yield Violation("dead-letter-identity", where, "the body does not name its row")


def _result_bus(lab: FaultLab) -> Iterator[Violation]:
    if lab.bus is None or lab.bus.kind != "classic":
        return
    accepted = sum(len(record.events) for record in lab.lives.values())
    delivered = lab.bus.delivered()
    if delivered != accepted:
        yield Violation("result-bus", "classic bus", f"took {accepted}, delivered {delivered}")


def _where(lab: FaultLab, life: Life) -> str:
    """The life, named the same in every run of a schedule: a redrive by its order among
    the schedule's redrives (a dead-letter id hashes the key's first-seen time, which
    follows the wall clock)."""
    scope = life.scope
    parts = [f"key {list(scope.business_key)}"]
    if scope.generation is not None:
        parts.append(f"generation {scope.generation}")
    if scope.redrive_of is not None:
        redrives = list(dict.fromkeys(o.scope.redrive_of for o in lab.lives if o.scope.redrive_of))
        parts.append(f"redrive #{redrives.index(scope.redrive_of) + 1}")
    parts.append(f"life {life.index}")
    return ", ".join(parts)


def _coded(message: dict[str, Any]) -> bool:
    """The step sent it with a code. A copy a redrive policy moved is uncoded, even when it
    carries an earlier dead letter's marker and attributes (an operator's redrive of it)."""
    if not message.get("sent_by_step", True):
        return False
    return "ERROR_CODE" in message["attributes"] or bool((message["body"] or {}).get("dead_letter"))


def _dead_letter_id(message: dict[str, Any]) -> str | None:
    marker = (message["body"] or {}).get("dead_letter") or {}
    return message["attributes"].get("DEAD_LETTER_ID") or marker.get("id")


def _scope(message: dict[str, Any]) -> Scope:
    return scope_of(message["text"])


def _row_scope(message: dict[str, Any]) -> Scope:
    """The scope of the row a DLQ message dead-letters. A message the step sent carries its
    own marker: left out, with the dead letter it was redriven from (``redriven_from``) in
    its place. A message a redrive policy moved is the row's copy: its marker (an operator's
    redrive of an earlier dead letter) is the row's scope."""
    scope = _scope(message)
    if not message.get("sent_by_step", True):
        return scope
    if scope.redrive_of is not None and scope.redrive_of == _dead_letter_id(message):
        marker = (message["body"] or {}).get("dead_letter") or {}
        return dataclasses.replace(scope, redrive_of=marker.get("redriven_from"))
    return scope


def _no_run_left(lab: FaultLab, message: dict[str, Any]) -> bool:
    """Every receive the redrive queue gave this message failed before the function could
    answer it. moto keeps the receive count a message brings from the buffer queue (SQS may
    too), so the redrive queue gives it at least the difference of the two counts."""
    if message["message_id"] in lab.spent_on_arrival:
        return True  # moved back with its receives spent: it never reached the function
    least = lab.settings.redrive_max_receive_count - lab.settings.buffer_max_receive_count
    return lab.failed_redrive_receives[message["message_id"]] >= least


def _same(result: dict[str, Any], stored: dict[str, Any]) -> bool:
    keys = set(result) | set(stored)
    keys -= {"dead_letter_message_id"}  # a re-send after a kill has a new message id
    return all(result.get(k) == stored.get(k) for k in keys)
