"""``make docs``: the HTML API reference of the library and the runtime, rendered by pdoc.

pdoc reads a variable's docs from a string literal right after its assignment. This
repository documents constants and attributes the Sphinx way, with ``#:`` comments on the
lines above (``defaults.py``, ``ModelProvider``, the constructs' attributes), so before
rendering, the ``#:`` comments of each module and class are added where pdoc found no
docstring. Docstrings are reStructuredText (``:param name:``).

Usage: ``python -m scripts.api_reference [OUTPUT_DIR]`` (default ``build/docs``).
"""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path
from typing import Any

import pdoc
import pdoc.doc_ast
import pdoc.render

from scripts.public_api import ROOT

#: What the reference covers: the library a CDK app imports, and the runtime a custom
#: handler imports. The local engine is the CLI's, and ``local_run`` its Prospect driver.
MODULES = (
    "constructs_lib",
    "constructs_lib.defaults",
    "constructs_lib.idempotent_model_step",
    "constructs_lib.event_bus_v2",
    "constructs_lib.retry_budget",
    "constructs_lib.model_step_handler",
    "constructs_lib.bundling",
    "constructs_lib.alarms",
    "constructs_lib.prospect_uploader.stack",
    "model_step",
)
DEFAULT_OUTPUT = ROOT / "build" / "docs"


def comment_docs(source: str) -> dict[str, str]:
    """``name -> text`` of each ``#:`` comment block right above an assignment in ``source``
    (a module's, or a class's with its ``__init__``): ``NAME = ...``, ``NAME: T = ...`` and
    ``self.name = ...``."""
    source = textwrap.dedent(source)
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    lines = source.splitlines()
    docs: dict[str, str] = {}
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Name):
                name = target.id
            elif (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                name = target.attr
            else:
                continue
            block: list[str] = []
            index = node.lineno - 2
            while index >= 0 and lines[index].strip().startswith("#:"):
                block.insert(0, lines[index].strip()[2:].strip())
                index -= 1
            if block and name not in docs:
                docs[name] = "\n".join(block)
    return docs


def _with_comment_docs(walk_tree: Any) -> Any:
    def walk(obj: Any) -> pdoc.doc_ast.AstInfo:
        info = walk_tree(obj)
        extra = comment_docs(pdoc.doc_ast.get_source(obj))
        if not extra:
            return info
        docstrings = {**extra, **info.var_docstrings}
        return pdoc.doc_ast.AstInfo(docstrings, info.func_docstrings, info.annotations)

    walk.reads_comment_docs = True  # type: ignore[attr-defined]
    return walk


def build(output: Path = DEFAULT_OUTPUT, modules: tuple[str, ...] = MODULES) -> Path:
    """Render ``modules`` into ``output`` and return the index page."""
    for path in (str(ROOT), str(ROOT / "lambda_src")):
        if path not in sys.path:
            sys.path.insert(0, path)
    if not getattr(pdoc.doc_ast.walk_tree, "reads_comment_docs", False):
        pdoc.doc_ast.walk_tree = _with_comment_docs(pdoc.doc_ast.walk_tree)
    pdoc.render.configure(docformat="restructuredtext", show_source=True, search=True)
    output.mkdir(parents=True, exist_ok=True)
    pdoc.pdoc(*modules, output_directory=output)
    return output / "index.html"


if __name__ == "__main__":
    index = build(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUTPUT)
    print(f"API reference: {index.relative_to(ROOT) if index.is_relative_to(ROOT) else index}")
