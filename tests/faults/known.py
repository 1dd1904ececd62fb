"""Write ``known_violations.json`` from a collected run of ``make test``'s schedules.

``FAULT_LAB_COLLECT=<file> pytest tests/faults/test_fault_schedules*.py`` records every
violation; ``python -m tests.faults.known <file>`` lists them as the known ones, with their
detail, so the schedules fail on any other. Review the diff: every entry is an open bug.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

KNOWN = Path(__file__).with_name("known_violations.json")


def main(argv: list[str]) -> int:
    lines = [json.loads(line) for line in Path(argv[0]).read_text().splitlines() if line]
    entries = sorted(
        ({k: v[k] for k in ("machine", "schedule", "invariant", "where", "detail")} for v in lines),
        key=lambda v: (v["machine"], v["schedule"], v["invariant"], v["where"]),
    )
    KNOWN.write_text(
        json.dumps(
            {
                "about": "Open violations of issue 31 that make test's derandomized schedules "
                "meet (tests/faults/schedules.py, KNOWN); see docs/testing.md.",
                "violations": entries,
            },
            indent=1,
        )
        + "\n"
    )
    schedules = {(v["machine"], v["schedule"]) for v in entries}
    print(f"{len(entries)} known violations in {len(schedules)} schedules")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
