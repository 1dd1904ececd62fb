"""Progress of a run on stderr: a redrawn line on a terminal, a line every
``interval`` seconds elsewhere (CI logs, pipes), so a long run shows it is alive."""

from __future__ import annotations

import sys
import time
from typing import TextIO

BAR_WIDTH = 24
#: Seconds between two progress lines when stderr is not a terminal.
DEFAULT_LINE_INTERVAL_SECONDS = 30.0


class Progress:
    """``update(done, total, note)`` redraws the line (or prints one when due); ``close()``
    ends it.

    ``enabled`` defaults to True. On a TTY the line is redrawn in place. Elsewhere a full line
    is written every ``interval`` seconds (``interval=None``: never), so pipes and CI logs get
    a few lines and no control characters.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        enabled: bool | None = None,
        interval: float | None = DEFAULT_LINE_INTERVAL_SECONDS,
    ) -> None:
        self._stream = stream or sys.stderr
        isatty = getattr(self._stream, "isatty", None)
        self._tty = bool(isatty()) if callable(isatty) else False
        self._interval = interval
        self.enabled = (self._tty or interval is not None) if enabled is None else enabled
        self._drawn = False
        self._started = time.monotonic()
        self._next_line = self._started + (interval or 0.0)

    def update(self, done: int, total: int, note: str = "") -> None:
        """Draw ``[####....] done/total note`` (a TTY), or print ``done/total note`` when the
        interval has passed (anything else)."""
        if not self.enabled:
            return
        total = max(total, done, 1)
        if self._tty:
            filled = int(BAR_WIDTH * done / total)
            bar = "#" * filled + "." * (BAR_WIDTH - filled)
            self._stream.write(f"\r[{bar}] {done}/{total} {note}\033[K")
            self._stream.flush()
            self._drawn = True
            return
        now = time.monotonic()
        if self._interval is None or now < self._next_line:
            return
        self._next_line = now + self._interval
        elapsed = now - self._started
        self._stream.write(f"progress: {done}/{total} {note} ({elapsed:.0f} s)\n")
        self._stream.flush()

    def close(self) -> None:
        """Finish the line so later output starts on a fresh one."""
        if self.enabled and self._drawn:
            self._stream.write("\n")
            self._stream.flush()
            self._drawn = False
