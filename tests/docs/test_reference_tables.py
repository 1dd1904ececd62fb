"""The props and environment tables in docs/ are the ones the code generates."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from scripts.reference_tables import (
    ENVIRONMENT_MODULE,
    NotYetAvailable,
    environment_table,
    markdown_from_rst,
    regenerate,
    regions,
    render,
    resolve_default,
)

REGIONS = list(regions())


def test_the_pages_have_generated_tables():
    specs = {region.spec for region in REGIONS}
    assert "props constructs_lib/idempotent_model_step.py IdempotentModelStep" in specs
    assert "environment" in specs


@pytest.mark.parametrize("region", REGIONS, ids=lambda r: f"{r.page.name}:{r.spec}")
def test_each_table_matches_the_code(region):
    try:
        expected = render(region.spec)
    except NotYetAvailable as reason:
        pytest.skip(str(reason))
    assert region.current == f"\n{expected}\n", (
        f"{region.page.name} is stale: run `python -m scripts.reference_tables` (make docs)"
    )


def test_regenerating_changes_no_page_but_the_skipped_ones():
    for page in {region.page for region in REGIONS}:
        text, skipped = regenerate(page)
        if not skipped:
            assert text == page.read_text(encoding="utf-8"), page.name


#: The shape lambda_src/model_step/environment.py declares its variables in.
ENVIRONMENT_SHAPE = """
from __future__ import annotations
from dataclasses import dataclass
from typing import Final, Literal

Origin = Literal["construct", "local", "caller", "lambda"]


@dataclass(frozen=True)
class EnvironmentVariable:
    name: str
    meaning: str
    default: str | None = None
    required: bool = False
    origin: Origin = "construct"


VARIABLES: Final = (
    EnvironmentVariable("IDEMPOTENCY_TABLE_NAME", "the table", required=True),
    EnvironmentVariable("MAX_ATTEMPTS", "attempts | per event", "3"),
    EnvironmentVariable("ANTHROPIC_API_KEY", "local key", origin="local"),
    EnvironmentVariable("ANTHROPIC_BASE_URL", "the API", origin="caller"),
    EnvironmentVariable("AWS_REGION", "the region", origin="lambda"),
)
"""


def test_the_environment_table_renders_every_declared_variable(tmp_path: Path):
    module = tmp_path / "environment.py"
    module.write_text(textwrap.dedent(ENVIRONMENT_SHAPE), encoding="utf-8")
    assert environment_table(module).splitlines() == [
        "| variable | default | set by | meaning |",
        "| --- | --- | --- | --- |",
        "| `IDEMPOTENCY_TABLE_NAME` | required | the construct | the table |",
        "| `MAX_ATTEMPTS` | `3` | the construct | attempts \\| per event |",
        "| `ANTHROPIC_API_KEY` | none | local runs only | local key |",
        "| `ANTHROPIC_BASE_URL` | none | you (`environment` prop) | the API |",
        "| `AWS_REGION` | none | Lambda | the region |",
    ]


def test_a_missing_environment_module_is_reported_not_guessed(tmp_path: Path):
    with pytest.raises(NotYetAvailable, match="does not exist yet"):
        environment_table(tmp_path / "environment.py")


def test_the_real_environment_module_is_standard_library_only():
    if not ENVIRONMENT_MODULE.is_file():
        pytest.skip(f"{ENVIRONMENT_MODULE.name} is not on this branch yet")
    assert "`IDEMPOTENCY_TABLE_NAME` | required" in environment_table()


def test_defaults_resolve_through_the_defaults_module():
    module = Path("constructs_lib/idempotent_model_step.py").resolve()
    assert resolve_default("defaults.DEFAULT_MAX_TOKENS", module) == "1024"
    assert resolve_default("defaults.DEFAULT_MAX_EVENT_AGE", module) == "Duration.hours(24)"
    assert resolve_default("False", module) == "False"


def test_docstring_markup_becomes_markdown():
    assert (
        markdown_from_rst("a ``x | y`` or :class:`~constructs_lib.EventBusV2`, see :data:`Z`")
        == "a `x \\| y` or `EventBusV2`, see `Z`"
    )
