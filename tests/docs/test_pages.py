"""The documentation's shape: a short README, pages under docs/, and no broken link."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
README_MAX_LINES = 250
#: Pages other branches add. A link to one is checked once the page exists; until then
#: it is the only kind of link allowed to point at a missing file. (docs/contract.md was
#: one until it landed.)
PENDING_PAGES: dict[str, str] = {}

LINK = re.compile(r"(!?)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")


def markdown_files() -> list[Path]:
    skip = {
        ".venv",
        ".venv-checkov",
        "node_modules",
        "cdk.out",
        ".mutate",
        ".pytest_cache",
        "build",
    }
    found = []
    # os.walk, pruned: Path.rglob walked the whole of .venv and node_modules before the
    # filter, about a second of every pytest process's collection.
    for folder, folders, files in os.walk(ROOT):
        folders[:] = [f for f in folders if f not in skip and f != "__snapshots__"]
        found.extend(Path(folder, name) for name in files if name.endswith(".md"))
    return sorted(found)


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a link in a code sample is not a link)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def github_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped,
    spaces to hyphens, and -1, -2, ... on repeats."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for line in prose_lines(text):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def relative_links(path: Path) -> list[tuple[str, str]]:
    """(kind, target) of every relative link or image in ``path``'s prose."""
    found = []
    for line in prose_lines(path.read_text(encoding="utf-8")):
        for bang, target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                continue
            found.append(("image" if bang else "link", target))
    return found


def test_readme_is_an_entry_point_not_the_manual():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_the_reference_lives_in_pages_under_docs():
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    expected = {
        "architecture.md",
        "construct.md",
        "runtime.md",
        "reference-app.md",
        "local-run.md",
        "operations.md",
        "testing.md",
    }
    assert expected <= pages, sorted(expected - pages)


def test_readme_keeps_the_sections_other_pages_and_tests_point_at():
    headings = set(re.findall(r"^## (.+)$", README.read_text(encoding="utf-8"), re.M))
    for heading in (
        "Quickstart",
        "Install",
        "Use it in your own CDK app",
        "Snapshot-test your stack",
        "Test your handler",
    ):
        assert heading in headings, heading


def test_the_readme_diagram_is_the_one_checked_into_docs():
    diagram = re.compile(r"```mermaid\n.*?\n```", re.S)
    readme = diagram.findall(README.read_text(encoding="utf-8"))
    architecture = diagram.findall((ROOT / "docs/architecture.md").read_text(encoding="utf-8"))
    assert len(readme) == 1 and readme[0] in architecture


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_image_resolves(page: Path):
    broken = []
    for kind, target in relative_links(page):
        file_part, _, anchor = target.partition("#")
        resolved = (page.parent / unquote(file_part)).resolve() if file_part else page
        relative = resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else ""
        if not resolved.exists():
            if relative not in PENDING_PAGES:
                broken.append(f"{kind} {target}: no such file")
            continue
        if anchor and resolved.suffix == ".md":
            if anchor not in github_anchors(resolved.read_text(encoding="utf-8")):
                broken.append(f"{kind} {target}: no heading with that anchor")
    assert not broken, broken


def test_anchors_follow_githubs_rules():
    text = "# Title\n## `on_outcome`\n## An operator's retry\n## A, b\n## A, b\n```\n# not\n```\n"
    assert github_anchors(text) == {"title", "on_outcome", "an-operators-retry", "a-b", "a-b-1"}


def alarm_ids() -> set[str]:
    """Construct ids of every alarm the library creates: the string constants ending in
    ``Alarm`` in constructs_lib (``"SentToDlqAlarm"``, ...)."""
    import ast

    found = set()
    for path in (ROOT / "constructs_lib").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if re.fullmatch(r"[A-Z][A-Za-z0-9]*Alarm", node.value):
                    found.add(node.value)
    return found


def test_operations_says_what_to_do_for_every_alarm():
    ids = alarm_ids()
    assert {"SentToDlqAlarm", "BufferAgeAlarm", "SweeperErrorsAlarm"} <= ids
    page = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    assert not sorted(i for i in ids if f"`{i}`" not in page)
