"""mypy follows exactly the aws-cdk-lib modules that constructs_lib imports.

pyproject.toml skips every ``aws_cdk.*`` module (``follow_imports = "skip"``) except a
list that is followed as usual: aws-cdk-lib's top package names all of its 300-odd service
modules under ``TYPE_CHECKING``, and following them all made a cold ``make typecheck`` cost
107 CPU-s instead of 23. A module missing from the list would be ``Any`` to mypy, and calls
into it unchecked; a module listed but no longer imported costs time for nothing. Both fail
here, without importing aws-cdk-lib.

The anthropic SDK's modules the runtime never calls (Vertex, Bedrock, beta...) are skipped
the same way; the runtime must import none of them.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _followed_and_skipped() -> tuple[set[str], set[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    followed: set[str] = set()
    skipped: set[str] = set()
    for override in config.get("overrides", []):
        modules = override["module"]
        modules = [modules] if isinstance(modules, str) else modules
        if override.get("follow_imports") == "normal":
            followed.update(modules)
        elif override.get("follow_imports") == "skip":
            skipped.update(modules)
    return followed, skipped


def _imported_modules(folder: Path, package: str) -> set[str]:
    """Every ``package`` module a file under ``folder`` imports, at any depth (inside
    functions and ``TYPE_CHECKING`` too). A lower-case name imported from a module is taken
    for a submodule (in aws-cdk-lib it is; classes and constants are capitalized)."""
    found: set[str] = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.split(".")[0] == package)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                if node.module.split(".")[0] != package:
                    continue
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names if a.name.islower())
    return found


def _imported_cdk_modules(folder: Path) -> set[str]:
    """Every ``aws_cdk`` module a file under ``folder`` imports."""
    return _imported_modules(folder, "aws_cdk")


def _with_parents(modules: set[str]) -> set[str]:
    parents = {".".join(m.split(".")[:i]) for m in modules for i in range(1, m.count(".") + 1)}
    return modules | parents


def test_every_aws_cdk_module_the_library_imports_is_followed():
    followed, skipped = _followed_and_skipped()
    assert "aws_cdk.*" in skipped
    missing = _imported_cdk_modules(ROOT / "constructs_lib") - followed
    assert not missing, (
        f"add {sorted(missing)} to the follow_imports = 'normal' override in pyproject.toml"
    )


def test_no_aws_cdk_module_is_followed_for_nothing():
    followed, _ = _followed_and_skipped()
    # aws_cdk._jsii: every aws-cdk-lib module star-imports it for its base types.
    needed = _with_parents(_imported_cdk_modules(ROOT / "constructs_lib")) | {"aws_cdk._jsii"}
    stale = {m for m in followed if m.split(".")[0] == "aws_cdk"} - needed
    assert not stale, f"{sorted(stale)} are followed by mypy but no longer imported"


def _skipped_by(pattern: str, module: str) -> bool:
    """mypy's reading of an override's module pattern: ``a.b.*`` is ``a.b`` and below."""
    if pattern.endswith(".*"):
        base = pattern[:-2]
        return module == base or module.startswith(f"{base}.")
    return module == pattern


def test_the_runtime_calls_no_anthropic_module_mypy_skips():
    # The SDK's Vertex, Bedrock, tools, beta and organization modules are skipped (Any): the
    # runtime must import none of them, so every SDK call it makes is checked.
    _, skipped = _followed_and_skipped()
    patterns = {p for p in skipped if p.split(".")[0] == "anthropic"}
    assert patterns, "pyproject.toml no longer skips part of the anthropic SDK"
    imported = _imported_modules(ROOT / "lambda_src", "anthropic")
    assert "anthropic" in imported
    unchecked = {m for m in imported for p in patterns if _skipped_by(p, m)}
    assert not unchecked, f"mypy skips {sorted(unchecked)}, which lambda_src imports"
