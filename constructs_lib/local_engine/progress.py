"""A one-line progress display on a terminal's stderr (nothing when stderr is not a TTY)."""

from __future__ import annotations

import sys
from typing import TextIO

BAR_WIDTH = 24


class Progress:
    """``update(done, total, note)`` redraws the line; ``close()`` ends it.

    ``enabled`` defaults to ``stream.isatty()``, so pipes and CI logs stay clean.
    """

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self._stream = stream or sys.stderr
        self.enabled = self._stream.isatty() if enabled is None else enabled
        self._drawn = False

    def update(self, done: int, total: int, note: str = "") -> None:
        """Draw ``[####....] done/total note``."""
        if not self.enabled:
            return
        total = max(total, done, 1)
        filled = int(BAR_WIDTH * done / total)
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        self._stream.write(f"\r[{bar}] {done}/{total} {note}\033[K")
        self._stream.flush()
        self._drawn = True

    def close(self) -> None:
        """Finish the line so later output starts on a fresh one."""
        if self.enabled and self._drawn:
            self._stream.write("\n")
            self._stream.flush()
            self._drawn = False
