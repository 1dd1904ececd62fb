"""Keeping handler output (Powertools JSON logs, EMF metrics, stdlib logging) off stdout.

In Lambda that output goes to CloudWatch Logs; locally it goes to a log file, and stdout is
left to the summary (and the ``--json`` line, which must be the last line). Three routes
are redirected for the run and restored afterwards:

- ``sys.stdout``: EMF metrics are ``print``-ed, and a Powertools Logger created during the
  run binds its handler to the ``sys.stdout`` of that moment;
- logging handlers that already write to stdout (a Powertools Logger created earlier);
- the root logger, which stdlib loggers (the recorder, the viewer) propagate to.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


class _CurrentStdout:
    """Writes to whatever ``sys.stdout`` is at the time of the write.

    Loggers created during a run keep their handler after it; pointing that handler here
    (rather than at the stdout of the moment) lets a later run, or a test's capture, find
    and redirect it again.
    """

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()


CURRENT_STDOUT = _CurrentStdout()


def _stream_handlers() -> list[logging.StreamHandler[Any]]:
    loggers: list[Any] = [logging.getLogger()]
    loggers += [
        lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]
    return [
        handler
        for lg in loggers
        for handler in lg.handlers
        if isinstance(handler, logging.StreamHandler)
        and not isinstance(handler, logging.FileHandler)
    ]


def _not_handled_below_root(record: logging.LogRecord) -> bool:
    """False when a logger between the record's and root has handlers: a Powertools Logger
    writes its own JSON line and also propagates, and one line per record is enough."""
    name = record.name
    while name:
        if logging.getLogger(name).handlers:
            return False
        name = name.rpartition(".")[0]
    return True


@contextmanager
def handler_output_to(path: Path) -> Iterator[IO[str]]:
    """Send handler output to ``path`` (appended) while the context is open."""
    log = path.open("a", encoding="utf-8", buffering=1)
    original_stdout = sys.stdout
    redirected = [
        (handler, handler.stream)
        for handler in _stream_handlers()
        if handler.stream in (original_stdout, sys.__stdout__, CURRENT_STDOUT)
    ]
    root = logging.getLogger()
    root_handler = logging.StreamHandler(log)
    root_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root_handler.addFilter(_not_handled_below_root)
    previous_level = root.level
    try:
        for handler, _ in redirected:
            handler.setStream(log)
        sys.stdout = log
        root.addHandler(root_handler)
        root.setLevel(logging.INFO)
        # Library warnings (botocore, moto) would otherwise print on stderr mid-progress.
        logging.captureWarnings(True)
        yield log
    finally:
        logging.captureWarnings(False)
        root.removeHandler(root_handler)
        root.setLevel(previous_level)
        sys.stdout = original_stdout
        for handler, stream in redirected:
            handler.setStream(stream)
        # Loggers created during the run bound the log file; point them at stdout again
        # rather than at a closed file.
        for handler in _stream_handlers():
            if handler.stream is log:
                handler.setStream(CURRENT_STDOUT)
        log.close()


def count_emf_metric(path: Path, metric: str) -> int:
    """Sum of ``metric`` over the EMF lines in the log file at ``path`` (0 if none)."""
    total = 0.0
    with path.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if '"_aws"' not in line or metric not in line:
                continue
            try:
                document = json.loads(line)
            except ValueError:
                continue
            value = document.get(metric) if isinstance(document, dict) else None
            if isinstance(value, int | float):
                total += value
            elif isinstance(value, list):
                total += sum(v for v in value if isinstance(v, int | float))
    return int(total)
