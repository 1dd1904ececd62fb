"""What the lab sees of each key, per lifetime: the facts the invariants are checked against.

A **scope** is a record key as the lab knows it: the business key compared by value (the
lab parses bodies with exact decimals, so ``1e30`` and ``10**30``, or ``2**53 + 1`` written
as an integer and as ``9007199254740993.0``, are one scope), the replay generation and the
dead-letter id an operator's DLQ redrive carries.

A **life** is one lifetime of a scope's memory. It starts when a row is published while no
copy of its scope is held by the buffer or redrive queue and everything the step stored
about the scope has expired: the key was forgotten, so the producer's new copy may be billed
again. A copy the queues still held belongs to the life it was published in, however late
it comes back.

For each life the lab records (:class:`LifeRecord`): the requests the fake API billed,
which of them reported back (a DynamoDB write followed it in the same invocation) and which
were interrupted (the invocation was killed first), the metrics the runtime printed (EMF),
every ``on_outcome`` call, every result event the bus took, every invocation.
"""

from __future__ import annotations

import decimal
import json
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from model_step.key import redrive_marker

#: Where a delivery's metrics come from: one EMF document a line.
EMF_MARKER = '"_aws"'


@dataclass(frozen=True)
class Scope:
    """A record key as the lab attributes requests (see the module docstring)."""

    business_key: tuple[Any, ...]
    generation: int | None
    redrive_of: str | None


@dataclass(frozen=True)
class Life:
    """One lifetime of a scope's memory (0 for its first)."""

    scope: Scope
    index: int


@dataclass
class Send:
    """One model request the runtime sent."""

    life: Life
    behaviour: str
    read: bool = False  # the fake API read it
    billed: bool = False  # the fake read it and bills this answer
    #: A write recording what became of it followed it in its invocation, or the invocation
    #: ended (not killed) without trying one: it had the answer and owed its count.
    reported: bool = False
    interrupted: bool = False  # its invocation was killed before that write
    #: Its invocation ended without that write (the write failed): as unknown to the runtime
    #: as an interrupted one.
    unrecorded: bool = False
    #: The runtime's client read the whole answer (False: it gave up first, at a wall-clock
    #: deadline on a loaded machine, and cannot know whether it was billed).
    answered: bool = False
    tokens: bool = False  # a complete 200: it billed INPUT_TOKENS / OUTPUT_TOKENS


@dataclass
class LifeRecord:
    """What the lab saw of one life."""

    started_at: float
    #: When the step first wrote the scope's budget item in this life (its first-seen time).
    first_seen: float | None = None
    sends: list[Send] = field(default_factory=list)
    invocations: int = 0
    #: Message ids the redrive queue handed to the function (not throttled) for this life.
    redrive_messages: set[str] = field(default_factory=set)
    metrics: Counter[str] = field(default_factory=Counter)
    #: Every ``on_outcome`` call with its clock time; ``recorded`` says the hook took it.
    outcomes: list[tuple[float, dict[str, Any], bool]] = field(default_factory=list)
    #: Result events the bus took: (detail type, event id).
    events: list[tuple[str, str]] = field(default_factory=list)
    #: The life's result was stored at some point (a write the lab saw it in).
    stored_once: bool = False
    #: Notes of requests sent after the life's result was stored.
    requests_after_stored: list[str] = field(default_factory=list)
    #: Kills of an invocation after the life's result was stored (a publish may be lost).
    kills_after_result: int = 0
    #: Killed right after the write that counts the dead letter, before its metric.
    count_window_kill: bool = False
    #: Copies SQS dropped at the end of their retention.
    retention_drops: int = 0
    #: Per ``on_outcome`` call made in an invocation: the ``model_requests`` it reported,
    #: the invocation's billed requests whose answer the runtime read, and its requests.
    deliveries: list[tuple[int, int, int]] = field(default_factory=list)
    #: Invocations killed after a write of the budget item and before any request: an
    #: attempt claimed and never sent, which no one can tell from one sent and lost.
    unsent_claims: int = 0

    @property
    def billed(self) -> int:
        return sum(1 for send in self.sends if send.billed)

    @property
    def billed_reported(self) -> int:
        return sum(1 for send in self.sends if send.billed and send.reported)

    @property
    def interrupted(self) -> int:
        return sum(1 for send in self.sends if send.interrupted)

    @property
    def uncertain(self) -> int:
        """Attempts the runtime cannot know were billed, yet not billed (a rate limit, or never
        read): interrupted before they reported back, whose report failed, or whose answer
        the client gave up on. A count may include them."""
        lost = sum(
            1
            for send in self.sends
            if (send.interrupted or send.unrecorded or not send.answered) and not send.billed
        )
        return lost + self.unsent_claims

    def tokens(self, *, reported_only: bool) -> int:
        """Billed 200 answers (each bills the fakes' fixed usage); ``reported_only``: those
        the runtime read to the end and reported (one it gave up on, at its wall-clock
        deadline on a loaded machine, was billed with tokens it never saw)."""
        return sum(
            1
            for s in self.sends
            if s.billed and s.tokens and ((s.reported and s.answered) or not reported_only)
        )

    @property
    def terminal(self) -> list[dict[str, Any]]:
        """The terminal results ``on_outcome`` was called with."""
        return [
            outcome["result"]
            for _, outcome, _ in self.outcomes
            if outcome["status"] in ("completed", "dead_lettered") and outcome.get("result")
        ]

    @property
    def recorded(self) -> list[dict[str, Any]]:
        """The outcomes the hook took (a failing hook recorded nothing)."""
        return [outcome for _, outcome, taken in self.outcomes if taken]


def exact_json(text: str) -> Any:
    """``text`` parsed with every number exact: integers as ``int``, others as ``Decimal``."""
    return json.loads(text, parse_float=decimal.Decimal)


def by_value(value: Any) -> Any:
    """``value`` with every number compared by value (integral ones as ``int``, any other
    as the float a JSON parser reads, which may be integral) and every string in NFC: the
    lab's own reading of a key, independent of the runtime's."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, decimal.Decimal):
        if value.is_finite() and value == value.to_integral_value():
            return int(value)
        as_float = float(value)
        return by_value(as_float) if value.is_finite() and as_float.is_integer() else value
    if isinstance(value, float):
        return by_value(decimal.Decimal(value)) if value == value else value
    if isinstance(value, dict):
        return {by_value(name): by_value(item) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return [by_value(item) for item in value]
    return value


def scope_of(body: str) -> Scope:
    """The scope of a queue message's body (an EventBridge event)."""
    try:
        event = exact_json(body)
    except ValueError:
        return Scope(business_key=(None, None), generation=None, redrive_of=None)
    if not isinstance(event, dict):
        return Scope(business_key=(None, None), generation=None, redrive_of=None)
    detail = by_value(event.get("detail") or {})
    return Scope(
        business_key=(detail.get("upload_id"), detail.get("row_number")),
        generation=detail.get("replay_generation"),
        redrive_of=redrive_marker(event),
    )


def emf_metrics(printed: str) -> Counter[str]:
    """The sum of every metric in the EMF documents of ``printed``."""
    found: Counter[str] = Counter()
    for line in printed.splitlines():
        if EMF_MARKER not in line:
            continue
        try:
            document = json.loads(line)
        except ValueError:
            continue
        directives = document.get("_aws", {}).get("CloudWatchMetrics", [])
        for directive in directives:
            for metric in directive.get("Metrics", []):
                value = document.get(metric.get("Name"))
                values = value if isinstance(value, list) else [value]
                found[metric["Name"]] += sum(v for v in values if isinstance(v, int | float))
    return found
