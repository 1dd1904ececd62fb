"""Named mutants of the runtime, and the runner that measures which the schedules kill.

``make mutate PROFILE=schedules`` (``python -m tests.faults.mutants``) applies each mutant
below, one at a time, to a staged copy of the repository, runs the fast schedules of
``make test`` against it (``tests/faults/test_fault_schedules*.py``: 300 generated and
derandomized, so every run meets the same ones, and the found schedules kept as
regressions) and prints a kill table.

A mutant is data: the runtime module, the exact snippet it replaces, the replacement, and
the bug it stands for. Adding one is one entry. A snippet that no longer appears exactly
once in its module fails loudly, here and in ``make test`` (``test_mutants.py``), so a
refactor cannot retire a mutant silently: update the snippet with the refactor.

The runner collects every violation of every schedule (``FAULT_LAB_COLLECT``) instead of
stopping at the first, first for the unmutated runtime (the baseline), then for each mutant,
whose run stops at its first violation the baseline did not have (``--full`` runs all the
schedules anyway; a survivor always runs them all). A mutant is **killed** when some schedule
breaks an invariant it kept in the baseline (or the run crashes); otherwise it **survived**. On
a runtime that keeps every invariant the baseline is empty and "killed" means any violation at
all; on one with known bugs the table still says which mutants the schedules tell apart from
them.

Usage::

    python -m tests.faults.mutants                      # every mutant
    python -m tests.faults.mutants --only unconditional-lock-release --jobs 1
    python -m tests.faults.mutants --baselines 2       # on a runtime with known bugs
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = Path("lambda_src") / "model_step"
#: What the runner stages: everything the schedules import or read.
STAGED = ("lambda_src", "constructs_lib", "tests", "pyproject.toml")
TEMPLATE = Path("cdk.out") / "ProspectUploader.template.json"
#: Seconds between two reads of a running mutant's violations (see ``run_schedules``).
POLL_SECONDS = 2.0
SCHEDULE_TESTS = (
    "tests/faults/test_fault_schedules.py",
    "tests/faults/test_fault_schedules_more.py",
    "tests/faults/test_fault_schedules_days.py",
    "tests/faults/test_fault_schedules_found.py",
)


@dataclass(frozen=True)
class Mutant:
    """One bug, injected by replacing ``original`` (exactly once) in ``module``."""

    name: str
    #: The runtime module, relative to ``lambda_src/model_step``.
    module: str
    original: str
    replacement: str
    #: The bug, and the finding or fix it stands for.
    stands_for: str


class SnippetMissing(Exception):
    """A mutant's snippet is not in its module exactly once."""


MUTANTS: tuple[Mutant, ...] = (
    # -- issue 31's four -------------------------------------------------------------------------
    Mutant(
        "refund-killed-attempt",
        "work.py",
        "        if claim.granted and claim.state.interrupted:\n"
        "            delivery.log.interrupted()\n",
        "        if claim.granted and claim.state.interrupted:\n"
        "            budget.give_back()  # mutant: the killed attempt is refunded\n"
        "            delivery.log.interrupted()\n",
        "an attempt killed after its request was sent is given back",
    ),
    Mutant(
        "unconditional-lock-release",
        "persistence.py",
        "                    ConditionExpression=condition,\n"
        "                    ExpressionAttributeNames=names,\n"
        "                    ExpressionAttributeValues=values,\n",
        "",
        "a release deletes the record whatever its status or holder",
    ),
    Mutant(
        "count-every-dead-letter-send",
        "work.py",
        "        if parts.hand_off_counter(request).count_dead_letter_once():",
        "        if parts.hand_off_counter(request).count_dead_letter_once() or True:",
        "NonRetryableFailures counted on every DLQ send, not once per key",
    ),
    Mutant(
        "budget-per-event-copy",
        "work.py",
        "        budget = parts.budget(request, delivery.first_seen)\n",
        "        budget = parts._budget(  # mutant: each event copy has its own budget\n"
        "            parts.persistence.record_id(request) + str(delivery.event.get('id')),\n"
        "            parts.settings.max_attempts,\n"
        "        )\n",
        "each copy of an event gets a budget of its own",
    ),
    # -- one per fix of issue 31, as far as main's code can express its absence -------------------
    Mutant(
        "F1-first-seen-reset-on-claim",
        "budget.py",
        '"SET #pending = :token, #first = if_not_exists(#first, :first), "',
        '"SET #pending = :token, #first = :first, "',
        "F1: the key's first-seen time moves to every claim a copy without a stamp makes",
    ),
    Mutant(
        "F1-budget-forgotten-in-flight",
        "budget.py",
        '        return {"N": str(int(now) + self._lifetime)}\n',
        '        return {"N": str(int(now) + 300)}  # mutant\n',
        "F1: the attempt budget expires 5 minutes after its last write, long before the key",
    ),
    Mutant(
        "F2-result-published-by-every-delivery",
        "delivery_flow.py",
        "    parts.publish_result(\n",
        "    parts.work.publish_result(  # mutant: no hand-off record\n",
        "F2: every delivery, replays included, publishes the key's result event again",
    ),
    Mutant(
        "F3-refused-publish-dropped",
        "result_hand_off.py",
        '            event_id = publisher.publish(request["result"], request["record_id"])\n',
        "            try:\n"
        '                event_id = publisher.publish(request["result"], request["record_id"])\n'
        "            except Exception:  # mutant: a refused publish is dropped, silently\n"
        '                event_id = ""\n',
        "F3: a publish the bus refused ends the key with no event and no dead letter",
    ),
    Mutant(
        "F5-interrupted-attempt-not-counted",
        "delivery_log.py",
        '        self._count("AttemptsInterrupted", 1, now)\n',
        "",
        "F5: AttemptsInterrupted never counts an attempt killed after its request",
    ),
    Mutant(
        "F5-failed-request-not-in-on-outcome",
        "delivery.py",
        "        billed = self.spend.requests > 0\n",
        "        billed = self.spend.requests > 0 and result is not None\n",
        "F5: on_outcome reports no request for a delivery whose billed request failed",
    ),
    Mutant(
        "F6-redrive-put-back-counted-twice",
        "budget.py",
        '                    ":message": {"S": message_id},\n'
        '                    ":one": {"N": "1"},\n',
        '                    ":message": {"S": message_id},\n'
        '                    ":one": {"N": "2"},\n',
        "F6: one message from the redrive queue counts as two put-backs (ReceivesExhausted early)",
    ),
    Mutant(
        "F5-lost-settle-not-recognised",
        "budget.py",
        '            "#pending = :token OR #by = :mine",\n',
        '            "#pending = :token",\n',
        "F5: a settle of the last interrupted attempt whose answer was lost is counted nowhere",
    ),
    Mutant(
        "F5-unsaved-answer-spend-dropped",
        "delivery.py",
        "        if report is None or cause is None or not self.spend.requests:\n",
        "        if True:  # mutant: an unsaved answer's spend is dropped\n",
        "F5: a billed answer whose save failed leaves the key's tokens short",
    ),
    Mutant(
        "F1-dead-letter-id-shared-by-lives",
        "key.py",
        '    return {**key, "life": f"{first_seen:.3f}"}\n',
        "    return dict(key)  # mutant: every life of a key has one dead-letter id\n",
        "F1: a key's later life dead-letters under its first life's id, and its redrive is "
        "that life's redrive key",
    ),
    Mutant(
        "F2-redrive-lineage-dropped",
        "dead_letter.py",
        '    if previous is not None and previous["id"] != dead_letter_id:\n',
        "    if False:  # mutant: a redriven dead letter does not name the one it came from\n",
        "F2: a redrive's own dead letters (a refused result event) cannot be told from the "
        "row's first ones",
    ),
    Mutant(
        "F7-integral-float-keeps-its-form",
        "key.py",
        "        integral = _integral(decimal.Decimal(repr(value)))\n",
        "        integral = None  # mutant: a float keeps its form\n",
        "F7: 1.0 and 1 (1e30 and 10**30) are two keys",
    ),
    Mutant(
        "F2-holder-wait-on-another-lock",
        "persistence.py",
        "            raise LockHeld(str(exc), expiry) from exc\n",
        "            raise LockHeld(str(exc), 0) from exc  # mutant: another record's deadline\n",
        "F2: a duplicate that met a held hand-off waits on its key's long-expired lock: back "
        "every second until the holder's deadline",
    ),
    Mutant(
        "F5-failed-hand-off-drops-key-totals",
        "delivery.py",
        "else (self.key_result or {})",
        "else {}",
        "F5: a key whose DLQ keeps refusing reports only its deliveries' own requests, and one "
        "whose hook failed is lost",
    ),
    Mutant(
        "F1-claim-revives-expired-count",
        "budget.py",
        '                    "(attribute_not_exists(#exp) OR #exp >= :now))"\n',
        '                    "(attribute_not_exists(#exp) OR #exp >= :now OR :now > #exp))"\n',
        "F1: a claim on an expired budget item whose answer is lost revives the old life's "
        "attempts",
    ),
    Mutant(
        "F5-ended-row-leaves-killed-attempt-uncounted",
        "work.py",
        "        self._settle_interrupted(budget, state, delivery)\n",
        "",
        "F5: a row that ends on the redrive queue never counts the attempt killed after its "
        "answer (no claim replaced it): 1 billed, 0 in ModelRequests or AttemptsInterrupted",
    ),
)


def check_snippets(root: Path = ROOT) -> list[str]:
    """Every mutant whose snippet is not in its module exactly once, described."""
    problems = []
    names = [mutant.name for mutant in MUTANTS]
    problems += [f"{name}: the name is used twice" for name in set(names) if names.count(name) > 1]
    for mutant in MUTANTS:
        path = root / RUNTIME / mutant.module
        text = path.read_text() if path.is_file() else ""
        found = text.count(mutant.original)
        if found != 1:
            problems.append(
                f"{mutant.name}: its snippet appears {found} times in {RUNTIME / mutant.module}"
                " (update the mutant with the refactor that moved it)"
            )
    return problems


def apply(mutant: Mutant, root: Path) -> None:
    """Apply ``mutant`` to the runtime under ``root``."""
    path = root / RUNTIME / mutant.module
    text = path.read_text()
    if text.count(mutant.original) != 1:
        raise SnippetMissing(f"{mutant.name}: snippet not found exactly once in {path}")
    path.write_text(text.replace(mutant.original, mutant.replacement))


def stage(into: Path) -> Path:
    """A copy of what the schedules need, with the synthesized template beside it."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for name in STAGED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, into / name, ignore=ignore)
        else:
            shutil.copy2(source, into / name)
    (into / TEMPLATE.parent).mkdir(parents=True, exist_ok=True)
    shutil.copy2(ROOT / TEMPLATE, into / TEMPLATE)
    return into


@dataclass
class Run:
    """The violations one run of the schedules found."""

    #: By (machine, schedule, invariant, where): the first violation's detail.
    violations: dict[tuple[str, int, str, str], str]
    returncode: int
    seconds: float
    output: str


def run_schedules(
    root: Path, jobs: int, *, stop_unless: set[tuple[str, int, str, str]] | None = None
) -> Run:
    """Run the schedules in ``root``, collecting every violation. ``stop_unless``: stop the
    run at the first violation not in this set (a mutant's kill is then known; the rest
    of the schedules could only add to it). None (default): run every schedule."""
    collect = root / "violations.jsonl"
    collect.unlink(missing_ok=True)
    workers = ["-n", str(jobs), "--dist", "loadfile"] if jobs > 1 else ["-p", "no:xdist"]
    env = {**os.environ, "FAULT_LAB_COLLECT": str(collect), "HYPOTHESIS_PROFILE": "fast"}
    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *workers,
             *SCHEDULE_TESTS],
            cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        while process.poll() is None:
            time.sleep(POLL_SECONDS)
            if stop_unless is not None and set(_collected(collect)) - stop_unless:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait()
                break
        log.seek(0)
        output = log.read()[-2000:]
    stopped = stop_unless is not None and bool(set(_collected(collect)) - stop_unless)
    returncode = 0 if stopped else process.returncode
    return Run(_collected(collect), returncode, time.monotonic() - started, output)


def _collected(collect: Path) -> dict[tuple[str, int, str, str], str]:
    """The violations written to ``collect`` so far, by (machine, schedule, invariant,
    where); a line still being written is left for the next read."""
    found: dict[tuple[str, int, str, str], str] = {}
    if not collect.is_file():
        return found
    for line in collect.read_text().splitlines():
        try:
            v = json.loads(line)
        except json.JSONDecodeError:
            continue
        found.setdefault((v["machine"], v["schedule"], v["invariant"], v["where"]), v["detail"])
    return found


def verdict(baselines: list[Run], run: Run) -> tuple[str, str]:
    """(killed / survived, why): killed when some schedule breaks an invariant, for some
    key, that no baseline run broke there (so a baseline's own noise never kills)."""
    known = {key for baseline in baselines for key in baseline.violations}
    new = sorted(set(run.violations) - known)
    if new:
        machine, schedule, invariant, where = new[0]
        invariants = sorted({key[2] for key in new})
        why = f"{len(new)} new: {', '.join(invariants)}; first {machine} #{schedule}, {where}: "
        return "killed", why + run.violations[new[0]][:160]
    if run.returncode != 0 and all(baseline.returncode == 0 for baseline in baselines):
        return "killed", "the run crashed: " + run.output.strip().splitlines()[-1][:160]
    return "survived", "no schedule broke an invariant the baseline kept"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated mutant names")
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("MUTATE_JOBS", "2")))
    parser.add_argument(
        "--baselines",
        type=int,
        default=1,
        help="unmutated runs whose violations are all known (2 on a runtime with known bugs: "
        "a violation that depends on real-time timing is then not taken for a kill)",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="run every schedule against each mutant (default: stop at its first new "
        "violation, which already kills it)",
    )
    args = parser.parse_args(argv)
    problems = check_snippets()
    if problems:
        print("mutants whose snippet no longer matches:\n  " + "\n  ".join(problems))
        return 2
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only.split(",")]
    if not (ROOT / TEMPLATE).is_file():
        print(f"{TEMPLATE} is missing: run `make synth` first")
        return 2
    with tempfile.TemporaryDirectory(prefix="fault-lab-mutants-") as scratch:
        # Staged once, before any run: edits made meanwhile reach neither side.
        base = stage(Path(scratch) / "baseline")
        baselines = []
        for _ in range(max(1, args.baselines)):
            baselines.append(run_schedules(base, args.jobs))
            print(
                f"baseline: {len(baselines[-1].violations)} violations in "
                f"{baselines[-1].seconds:.0f} s",
                flush=True,
            )
        rows = []
        for mutant in chosen:
            root = Path(scratch) / mutant.name
            shutil.copytree(base, root)
            apply(mutant, root)
            known = {key for baseline in baselines for key in baseline.violations}
            run = run_schedules(root, args.jobs, stop_unless=None if args.full else known)
            result, why = verdict(baselines, run)
            rows.append((mutant, result, why, run.seconds))
            print(f"{mutant.name}: {result} ({run.seconds:.0f} s) {why}", flush=True)
            shutil.rmtree(root, ignore_errors=True)
    print()
    print(table(rows))
    return 0


def table(rows: list[tuple[Mutant, str, str, float]]) -> str:
    """The kill table, as Markdown."""
    lines = ["| mutant | module | stands for | result | how |", "|---|---|---|---|---|"]
    for mutant, result, why, _ in rows:
        lines.append(
            f"| {mutant.name} | {mutant.module} | {mutant.stands_for} | {result} | {why} |"
        )
    killed = sum(1 for _, result, _, _ in rows if result == "killed")
    lines.append(f"\n{killed} of {len(rows)} killed")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
