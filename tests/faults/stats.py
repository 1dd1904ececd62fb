"""Schedule statistics: what the generated schedules reached, written per run and quotable.

Every schedule the fault lab runs (``make test``, ``make soak``, the mutant runner) writes one
JSON line to ``build/fault-lab/<machine>.jsonl``: its variant (settings, provider, result
bus, second row), the virtual time it spanned, the faults it injected, the lives its keys
went through, whether a key reached budget exhaustion, and the violations found.

``python -m tests.faults.stats`` (or ``make fault-stats``) prints the figures over every file
there: the share of schedules in which a key reached budget exhaustion, the distribution of
clock spans, faults per schedule, and how often a key's memory expired and a later copy
started a new life.

A key reaches **budget exhaustion** when its life ends dead-lettered as
``RateLimitExhausted`` or ``ReceivesExhausted``, or after at least ``MAX_ATTEMPTS`` requests
that each kept their attempt (a rate-limit answer gives its attempt back).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import model_api

if TYPE_CHECKING:  # the report needs no runtime: `make fault-stats` reads JSON only
    from .lab import FaultLab
    from .observed import Life, LifeRecord

STATS_DIR = Path(__file__).resolve().parents[2] / "build" / "fault-lab"
#: Dead-letter codes that are budget exhaustion whatever the attempts.
EXHAUSTION_CODES = frozenset({"RateLimitExhausted", "ReceivesExhausted"})


def exhausted(lab: FaultLab, life: Life, record: LifeRecord) -> bool:
    """Whether ``life`` reached budget exhaustion (see the module docstring)."""
    terminal = record.terminal
    if not terminal or terminal[0]["status"] != "dead_lettered":
        return False
    if terminal[0].get("error_code") in EXHAUSTION_CODES:
        return True
    budget = 1 if life.scope.redrive_of else lab.settings.max_attempts
    spent = sum(
        1
        for send in record.sends
        if send.interrupted or model_api.spends_attempt(lab.provider, send.behaviour)
    )
    return spent >= budget


def summary(lab: FaultLab, variant: dict[str, Any], violations: list[str]) -> dict[str, Any]:
    """One schedule's line."""
    records = lab.lives.items()
    codes = Counter(
        str(record.terminal[0].get("error_code") or record.terminal[0]["status"])
        for _, record in records
        if record.terminal
    )
    return {
        **variant,
        "span_s": round(lab.clock.now() - lab.started_at),
        "real_s": round(time.monotonic() - lab.real_started_at, 2),
        "lifetime_s": lab.settings.expires_after,
        "faults": lab.faults + sum(lab.actions.values()),
        "poll_faults": lab.faults,
        "actions": dict(lab.actions),
        "lives": len(lab.lives),
        "new_lives": sum(1 for life in lab.lives if life.index > 0),
        "exhausted": any(exhausted(lab, life, record) for life, record in records),
        "outcomes": dict(codes),
        "billed": sum(record.billed for _, record in records),
        "result_events": sum(len(record.events) for _, record in records),
        "violations": violations,
    }


def write(machine: str, lines: list[dict[str, Any]]) -> Path:
    """Write a run's lines to ``build/fault-lab/<machine>.jsonl`` (replacing the last run's)."""
    STATS_DIR.mkdir(parents=True, exist_ok=True)
    path = STATS_DIR / f"{machine}.jsonl"
    path.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
    return path


def load(directory: Path = STATS_DIR) -> list[dict[str, Any]]:
    lines = []
    for path in sorted(directory.glob("*.jsonl")):
        lines += [json.loads(line) for line in path.read_text().splitlines() if line]
    return lines


def report(lines: list[dict[str, Any]]) -> str:
    """The figures over ``lines`` (see the module docstring), as text."""
    if not lines:
        return "no schedule statistics (run `make test` or the fault lab first)"
    count = len(lines)
    spans = sorted(line["span_s"] for line in lines)
    faults = sorted(line["faults"] for line in lines)
    exhausted_share = sum(1 for line in lines if line["exhausted"]) / count
    crossed = sum(1 for line in lines if line["span_s"] > line["lifetime_s"]) / count
    renewed = sum(1 for line in lines if line["new_lives"]) / count
    variants = Counter(
        f"{line['settings']}/{line['provider']}/{line['bus'] or 'no bus'}" for line in lines
    )
    outcomes: Counter[str] = Counter()
    actions: Counter[str] = Counter()
    for line in lines:
        outcomes.update(line["outcomes"])
        actions.update(line["actions"])
    violated = Counter(name for line in lines for name in line["violations"])
    rows = [
        f"schedules: {count}",
        f"reaching budget exhaustion: {exhausted_share:.0%}",
        "clock span (virtual): " + _quantiles(spans, _hours),
        f"  longer than a day: {sum(1 for s in spans if s > 86_400) / count:.0%}; "
        f"past the key's lifetime: {crossed:.0%}; a key's memory expired and a later copy "
        f"started a new life: {renewed:.0%}",
        "faults per schedule: "
        + _quantiles(faults, str)
        + f" (mean {statistics.fmean(faults):.1f})",
        "schedule actions: " + ", ".join(f"{k} {v}" for k, v in sorted(actions.items())),
        "variants: " + ", ".join(f"{k} {v}" for k, v in sorted(variants.items())),
        "terminal outcomes: " + ", ".join(f"{k} {v}" for k, v in outcomes.most_common()),
        "violations: "
        + (", ".join(f"{k} {v}" for k, v in violated.most_common()) if violated else "none"),
    ]
    return "\n".join(rows)


def _quantiles(values: list[int], show: Any) -> str:
    def at(share: float) -> Any:
        return values[min(len(values) - 1, int(share * len(values)))]

    return (
        f"min {show(values[0])}, p25 {show(at(0.25))}, median {show(at(0.5))}, "
        f"p75 {show(at(0.75))}, p90 {show(at(0.9))}, max {show(values[-1])}"
    )


def _hours(seconds: int) -> str:
    return f"{seconds / 3600:.1f} h"


if __name__ == "__main__":
    directory = Path(sys.argv[1]) if len(sys.argv) > 1 else STATS_DIR
    print(report(load(directory)))
