"""The day schedules (``make fault-days``): the fault lab weighted toward days and exhaustion.

``python -m tests.faults.days`` runs :class:`~.schedules.DaySchedule` (100 derandomized
schedules, the ``fast`` profile) against the real handler, collecting every violation
instead of stopping at the first, and prints the schedule statistics and the violations by
invariant. It exits 1 when any schedule broke an invariant.

``make test`` runs the same schedules (``test_fault_schedules_days.py``, failing on any
violation not in ``known_violations.json``); this entry point runs them alone, strict, and
prints what they reached.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "cdk.out" / "ProspectUploader.template.json"
# Beside the statistics, not among them: `make fault-stats` reads every *.jsonl there.
VIOLATIONS = ROOT / "build" / "fault-lab" / "violations" / "DaySchedules.jsonl"


def main() -> int:
    if not TEMPLATE.is_file():
        print(f"{TEMPLATE.relative_to(ROOT)} is missing: run `make synth` first")
        return 2
    VIOLATIONS.parent.mkdir(parents=True, exist_ok=True)
    VIOLATIONS.unlink(missing_ok=True)
    os.environ["FAULT_LAB_COLLECT"] = str(VIOLATIONS)  # read when schedules is imported
    sys.path[:0] = [str(ROOT), str(ROOT / "lambda_src")]  # as pytest's pythonpath has them
    from . import stats
    from .lab_settings import QueueSettings
    from .schedules import DaySchedule, fault_world, run_schedules

    settings = QueueSettings.from_template(json.loads(TEMPLATE.read_text()))
    with fault_world(settings):
        lines = run_schedules("DaySchedules", DaySchedule)
    print(stats.report(lines))
    found = (
        [json.loads(line) for line in VIOLATIONS.read_text().splitlines()]
        if (VIOLATIONS.is_file())
        else []
    )
    schedules = {v["schedule"] for v in found}
    by_invariant = Counter(v["invariant"] for v in found)
    print(f"schedules with a violation: {len(schedules)} of {len(lines)}")
    for invariant, count in by_invariant.most_common():
        print(f"  {invariant}: {count}")
    print(f"every violation: {VIOLATIONS.relative_to(ROOT)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
