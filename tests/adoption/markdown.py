"""Code blocks read out of the repository's Markdown, so tests run the docs' text verbatim."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$")
_FENCE = re.compile(r"^```(\w*)\s*$")


def section(document: str, heading: str) -> str:
    """The text under ``heading`` (any level) up to the next heading of that level or above.

    ``document`` is a path relative to the repository, e.g. ``"README.md"``.
    """
    lines = (REPO / document).read_text(encoding="utf-8").splitlines()
    found: list[str] | None = None
    level = 0
    in_code = False
    for line in lines:
        if _FENCE.match(line):
            in_code = not in_code
        match = None if in_code else _HEADING.match(line)
        if found is not None and match and len(match.group(1)) <= level:
            break
        if found is not None:
            found.append(line)
        elif match and match.group(2) == heading:
            found, level = [], len(match.group(1))
    if found is None:
        raise AssertionError(f"{document} has no heading {heading!r}")
    return "\n".join(found)


def code_blocks(text: str, language: str) -> list[str]:
    """The fenced code blocks of ``language`` in ``text``, in order."""
    blocks: list[str] = []
    current: list[str] | None = None
    for line in text.splitlines():
        fence = _FENCE.match(line)
        if current is None and fence and fence.group(1) == language:
            current = []
        elif current is not None and line.startswith("```"):
            blocks.append("\n".join(current) + "\n")
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def files(text: str) -> dict[str, str]:
    """The Python blocks that name their file on their first line (``# my_step/handler.py``)."""
    named: dict[str, str] = {}
    for block in code_blocks(text, "python"):
        first = block.splitlines()[0]
        if re.fullmatch(r"# [\w./-]+\.py", first):
            named[first[2:]] = block
    return named


def tree(text: str) -> list[str]:
    """The file paths of the first ``text`` block drawn as a tree (``├── `` / ``└── ``)."""
    for block in code_blocks(text, "text"):
        if "── " not in block:
            continue
        paths: list[str] = []
        stack: list[str] = []
        for line in block.splitlines():
            marker = max(line.find("├── "), line.find("└── "))
            if marker < 0:
                continue
            depth = marker // 4
            name = line[marker + 4 :].split()[0]
            del stack[depth:]
            stack.append(name.rstrip("/"))
            if not name.endswith("/"):
                paths.append("/".join(stack))
        return paths
    raise AssertionError("no file tree in the text")


def commands(text: str, program: str) -> list[list[str]]:
    """The shell commands in ``text``'s bash blocks that start with ``program``, as argv lists
    (comments dropped)."""
    found = []
    for block in code_blocks(text, "bash"):
        for line in block.splitlines():
            argv = shlex.split(line, comments=True)
            if argv[: len(program.split())] == program.split():
                found.append(argv)
    return found
