"""The reference tables in docs/, generated from the code so they cannot drift from it.

- **Props**: a construct's constructor parameters, their defaults (resolved through
  ``constructs_lib/defaults.py``) and their ``:param:`` docstrings, read with ``ast``
  (:mod:`scripts.public_api`), so no jsii starts.
- **Environment**: the variables the model-step runtime reads, from
  ``lambda_src/model_step/environment.py`` (standard library only, loaded by its path:
  importing the ``model_step`` package would import boto3 and Powertools). Until that
  module exists, its table is left as it is and the run says so.
- **The model catalogue** (``lambda_src/model_step/model_catalogue.py``): its prices
  (``prices``), what each model accepts and its ids (``catalogue``), and the regions granted
  per Bedrock inference-profile prefix (``bedrock-regions``).

Each table sits in a Markdown page between two markers::

    <!-- generated: props constructs_lib/idempotent_model_step.py IdempotentModelStep -->
    ...
    <!-- end generated -->

``python -m scripts.reference_tables`` rewrites every marked region (``make docs`` runs
it); ``--check`` only reports stale ones and exits 1. ``tests/docs`` fails when a checked-in
table differs from what the code says.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from scripts.public_api import ROOT, public_api

ENVIRONMENT_MODULE = ROOT / "lambda_src" / "model_step" / "environment.py"
DEFAULTS_MODULE = ROOT / "constructs_lib" / "defaults.py"
PAGES = sorted((ROOT / "docs").glob("*.md"))

_REGION = re.compile(
    r"(?P<start><!-- generated: (?P<spec>[^>]*?) -->\n)"
    r"(?P<body>.*?)"
    r"(?P<end><!-- end generated -->)",
    re.S,
)


class NotYetAvailable(Exception):
    """A table's source does not exist on this branch yet; its region is left alone."""


def _module_constants(path: Path) -> dict[str, str]:
    """Module-level ``NAME = value`` of ``path``, each value as source text."""
    constants = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                constants[target.id] = ast.unparse(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            constants[node.target.id] = ast.unparse(node.value)
    return constants


def resolve_default(source: str, module: Path) -> str:
    """``defaults.DEFAULT_MAX_TOKENS`` -> ``1024``; a module constant -> its value."""
    match = re.fullmatch(r"defaults\.(\w+)", source)
    if match:
        return _module_constants(DEFAULTS_MODULE).get(match.group(1), source)
    if re.fullmatch(r"[A-Z][A-Z0-9_]*", source):
        return _module_constants(module).get(source, source)
    return source


def markdown_from_rst(text: str) -> str:
    """The reStructuredText the docstrings use, as Markdown inside a table cell."""
    text = re.sub(r":\w+:`~?(?:[\w.]+\.)?(\w+)`", r"`\1`", text)  # :class:`~a.B` -> `B`
    text = re.sub(r"``(.+?)``", r"`\1`", text)
    return text.replace("|", "\\|").strip()


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def props_table(module: str, class_name: str) -> str:
    """| prop | default | what it does | for ``class_name``'s constructor in ``module``."""
    path = ROOT / module
    classes, _ = public_api()
    cls = next((c for c in classes if c.name == class_name and c.module == path), None)
    if cls is None or cls.constructor() is None:
        raise LookupError(f"{class_name} with an __init__ is not public in {module}")
    constructor = cls.constructor()
    assert constructor is not None
    rows = ["| prop | default | what it does |", "| --- | --- | --- |"]
    for parameter in constructor.parameters:
        default = (
            "required"
            if parameter.default is None
            else f"`{_cell(resolve_default(parameter.default, path))}`"
        )
        doc = markdown_from_rst(parameter.doc or "")
        rows.append(f"| `{parameter.name}` | {default} | {doc} |")
    return "\n".join(rows) + "\n"


def _display(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def load_environment_module(path: Path = ENVIRONMENT_MODULE) -> ModuleType:
    """``model_step/environment.py`` by its path (it is standard library only)."""
    if not path.is_file():
        raise NotYetAvailable(
            f"{_display(path)} does not exist yet (issue 16: one module declares "
            "every variable); the environment table is left as it is"
        )
    spec = importlib.util.spec_from_file_location("_model_step_environment", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while decorating
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


#: ``EnvironmentVariable.origin`` -> who sets it, as the table says it.
ORIGINS = {
    "construct": "the construct",
    "caller": "you (`environment` prop)",
    "local": "local runs only",
    "lambda": "Lambda",
}


def environment_table(path: Path = ENVIRONMENT_MODULE) -> str:
    """| variable | default | set by | meaning | for every declared variable, in order."""
    module = load_environment_module(path)
    rows = ["| variable | default | set by | meaning |", "| --- | --- | --- | --- |"]
    for variable in module.VARIABLES:
        if variable.required:
            default = "required"
        elif variable.default is None:
            default = "none"
        else:
            default = f"`{_cell(variable.default)}`"
        origin = ORIGINS.get(variable.origin, variable.origin)
        rows.append(f"| `{variable.name}` | {default} | {origin} | {_cell(variable.meaning)} |")
    return "\n".join(rows) + "\n"


def prices_table() -> str:
    """The model catalogue's prices (``constructs_lib.model_prices.PRICE_TABLE``)."""
    from constructs_lib.model_prices import PRICE_TABLE

    rows = [
        "| model id | input | output | cache write 5 min | cache write 1 h | cache read | "
        "over the long-context threshold | batch discount | minimum cacheable tokens |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for model_id, p in sorted(PRICE_TABLE.items()):
        long_context = "one tier"
        if p.long_context_threshold_tokens is not None:
            long_context = (
                f"over {p.long_context_threshold_tokens:,} tokens: ${p.long_context_input:g} / "
                f"${p.long_context_output:g} / ${p.long_context_cache_write_5m:g} / "
                f"${p.long_context_cache_write_1h:g} / ${p.long_context_cache_read:g}"
            )
        rows.append(
            f"| `{model_id}` | ${p.input:g} | ${p.output:g} | ${p.cache_write_5m:g} | "
            f"${p.cache_write_1h:g} | ${p.cache_read:g} | {long_context} | "
            f"{p.batch_discount:.0%} | {p.min_cacheable_tokens:,} |"
        )
    return "\n".join(rows) + "\n"


def catalogue_table() -> str:
    """What each model of the catalogue accepts, its ids and its source."""
    from constructs_lib._runtime_modules import model_catalogue

    rows = [
        "| model id | thinking (default) | effort (default; with thinking off) | rejects | "
        "max output | Bedrock ids | source, as of |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for model_id, spec in sorted(model_catalogue.CATALOGUE.items()):
        effort = "none"
        if spec.effort_levels:
            effort = (
                f"{', '.join(spec.effort_levels)} ({spec.default_effort}; "
                f"{', '.join(spec.effort_levels_without_thinking)})"
            )
        rejected = [
            *spec.rejected_sampling_parameters,
            *(["prefill"] if spec.rejects_prefill else []),
        ]
        profiles = ", ".join(f"`{p}.`" for p in spec.bedrock_profile_prefixes)
        rows.append(
            f"| `{model_id}` | {', '.join(spec.thinking_modes)} ({spec.default_thinking}) | "
            f"{effort} | {', '.join(rejected) or 'none'} | {spec.max_output_tokens:,} | "
            f"`{spec.bedrock_model_id}`; profiles {profiles} | "
            f"[{_page(spec.source)}]({spec.source}), [{_page(spec.bedrock_source)}]"
            f"({spec.bedrock_source}), {spec.as_of} |"
        )
    return "\n".join(rows) + "\n"


def _page(url: str) -> str:
    return url.split("://", 1)[-1].split("/", 1)[0]


def bedrock_regions_table() -> str:
    """The destination regions granted for each inference-profile prefix."""
    from constructs_lib.bedrock_models import GEOGRAPHY_REGIONS, GLOBAL_PREFIX, PROFILE_PREFIXES

    rows = ["| prefix | foundation-model regions granted |", "| --- | --- |"]
    for prefix in PROFILE_PREFIXES:
        if prefix == GLOBAL_PREFIX:
            regions = (
                "every region: `arn:aws:bedrock:*::foundation-model/<model>` (one action, one "
                "model, only through the profile; acknowledged to cdk-nag as "
                "`AwsSolutions-IAM5`)"
            )
        else:
            regions = ", ".join(GEOGRAPHY_REGIONS[prefix])
        rows.append(f"| `{prefix}.` | {regions} |")
    return "\n".join(rows) + "\n"


def render(spec: str) -> str:
    """The table a region's spec names: ``props <module> <Class>``, ``environment``,
    ``prices``, ``catalogue`` or ``bedrock-regions``."""
    kind, *args = spec.split()
    tables = {
        "prices": prices_table,
        "catalogue": catalogue_table,
        "bedrock-regions": bedrock_regions_table,
        "environment": environment_table,
    }
    if kind in tables and not args:
        return tables[kind]()
    if kind == "props" and len(args) == 2:
        return props_table(*args)
    raise ValueError(f"unknown generated region {spec!r}")


@dataclass(frozen=True)
class Region:
    """One marked table in a page."""

    page: Path
    spec: str
    current: str


def regions(pages: list[Path] = PAGES) -> Iterator[Region]:
    """Every marked region of ``pages``."""
    for page in pages:
        for match in _REGION.finditer(page.read_text(encoding="utf-8")):
            yield Region(page, match.group("spec").strip(), match.group("body"))


def regenerate(page: Path) -> tuple[str, list[str]]:
    """``page``'s text with every region it can render rewritten, and what it skipped."""
    skipped: list[str] = []

    def replace(match: re.Match[str]) -> str:
        try:
            body = render(match.group("spec").strip())
        except NotYetAvailable as reason:
            skipped.append(f"{_display(page)}: {reason}")
            return match.group(0)
        # Blank lines around the table: GitHub's Markdown would read a comment line right
        # after a table as one more row.
        return f"{match.group('start')}\n{body}\n{match.group('end')}"

    return _REGION.sub(replace, page.read_text(encoding="utf-8")), skipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report stale tables, write none")
    args = parser.parse_args(argv)
    stale = []
    for page in PAGES:
        text, skipped = regenerate(page)
        for line in skipped:
            print(f"skipped: {line}")
        if text != page.read_text(encoding="utf-8"):
            stale.append(page)
            if not args.check:
                page.write_text(text, encoding="utf-8")
    for page in stale:
        print(f"{'stale' if args.check else 'rewrote'}: {page.relative_to(ROOT)}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
