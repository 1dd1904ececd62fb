"""The mutants of ``make mutate PROFILE=schedules`` still match the runtime they mutate.

A refactor that moves a mutant's snippet must update the mutant (tests/faults/mutants.py),
never retire it silently. Running the mutants is ``make mutate PROFILE=schedules``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .mutants import MUTANTS, RUNTIME, Mutant, SnippetMissing, apply, check_snippets


def test_every_mutant_snippet_appears_exactly_once_in_its_module() -> None:
    assert check_snippets() == []


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda mutant: mutant.name)
def test_each_mutant_changes_its_module_and_still_compiles(mutant: Mutant, tmp_path: Path) -> None:
    source = Path(__file__).resolve().parents[2] / RUNTIME / mutant.module
    (tmp_path / RUNTIME).mkdir(parents=True)
    target = tmp_path / RUNTIME / mutant.module
    target.write_text(source.read_text())
    apply(mutant, tmp_path)
    mutated = target.read_text()
    assert mutated != source.read_text()
    compile(mutated, str(target), "exec")


def test_a_snippet_that_moved_fails_loudly(tmp_path: Path) -> None:
    mutant = MUTANTS[0]
    (tmp_path / RUNTIME).mkdir(parents=True)
    (tmp_path / RUNTIME / mutant.module).write_text("# refactored away\n")
    with pytest.raises(SnippetMissing, match=mutant.name):
        apply(mutant, tmp_path)
    assert check_snippets(tmp_path)
