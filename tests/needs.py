"""What each test needs beyond Python and the locked packages, found from its source.

``tests/conftest.py`` turns the result into markers (``pytest -m "not synth"``, ``make
test-unit``), so a test is never marked by hand for something its code already says:

- **imports**: a test module that imports, at its top level and through any repository
  module it imports (lazy ``constructs_lib`` exports included), ``aws_cdk``, ``jsii``,
  ``cdk_nag`` or ``constructs`` needs ``synth``; ``moto`` needs ``moto``; ``playwright``
  needs ``browser``. A ``conftest.py``'s imports count for every test beside or below it
  (collecting them needs them), except moto's (see :data:`NOT_INHERITED_FROM_CONFTEST`).
- **names**: a name from :data:`NEEDS_BY_NAME` used in the test function, in a fixture it
  requests (directly or through other fixtures), or in a function of the same module that
  either of them calls. ``mock_aws`` means moto, ``cdk_cli`` the Node CDK CLI, and so on.

A need the source cannot show is marked in the test file itself
(``@pytest.mark.bundling``).
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Where a top-level import name is looked up as a repository module.
SOURCE_ROOTS = (ROOT, ROOT / "lambda_src")

#: Every need, with what it takes; each is a registered marker (pyproject.toml).
NEEDS = {
    "synth": "aws-cdk-lib through jsii (a Node process); synthesizes apps in-process",
    "cdk_out": "the real cloud assembly in cdk.out/ (`make synth`: the CLI and pip bundling)",
    "cli": "the pinned Node CDK CLI (node_modules/.bin/cdk, `make setup`)",
    "moto": "AWS emulated by moto (in-process or a local moto server)",
    "browser": "headless Chromium (Debian's chromium, driven by Playwright)",
    "bundling": "the real pip bundling of a Lambda asset (wheels from PyPI)",
    "cpython313": "a CPython 3.13 interpreter (the Lambda's Python)",
    "long": "about a minute of CPU on its own (marked by hand; kept out of the fast tier)",
}

#: Top-level packages whose import is a need.
NEEDS_BY_IMPORT = {
    "aws_cdk": "synth",
    "jsii": "synth",
    "cdk_nag": "synth",
    "constructs": "synth",
    "moto": "moto",
    "playwright": "browser",
}

#: Names whose use in a test, its fixtures or its module's helpers is a need.
NEEDS_BY_NAME = {
    # moto, entered in the test or a fixture, or started as a server
    "mock_aws": "moto",
    "ThreadedMotoServer": "moto",
    "moto_server": "moto",  # bench.harness's server (its state reset), and fixtures named so
    # the local engine runs every handler against moto
    "run_pipeline": "moto",
    "LocalPipeline": "moto",
    "LocalEngine": "moto",
    # aws-cdk-lib imported inside a fixture (a synth made on demand)
    "aws_cdk": "synth",
    # moto's own CloudFormation models (scripts/deploy_local.py)
    "moto_cloudformation_types": "moto",
    # the real cloud assembly
    "cdk_out": "cdk_out",
    "CDK_OUT": "cdk_out",
    # pip run for real, without index or config (tests/infra/test_bundling.py)
    "isolated_pip": "bundling",
    # the CDK CLI (tests/infra/conftest.py)
    "cdk_cli": "cli",
    # an interpreter for the Lambda's Python (tests/infra)
    "find_python": "cpython313",
    "python313": "cpython313",
}


@functools.cache
def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None


def _top_level_imports(tree: ast.Module) -> Iterable[ast.Import | ast.ImportFrom]:
    """Imports that run when the module is imported: not those inside functions, classes or
    ``if TYPE_CHECKING:``."""
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.Assign | ast.Expr) and _importorskip(node.value):
            yield ast.Import(names=[ast.alias(name=_importorskip(node.value) or "")])
        elif isinstance(node, ast.If):
            if "TYPE_CHECKING" not in ast.unparse(node.test):
                pending[:0] = [*node.body, *node.orelse]
        elif isinstance(node, ast.Try):
            pending[:0] = [*node.body, *node.orelse, *node.finalbody]
            for handler in node.handlers:
                pending[:0] = handler.body


def _importorskip(value: ast.expr) -> str | None:
    """The module of a ``pytest.importorskip("x")`` call, an import by another name."""
    if (
        isinstance(value, ast.Call)
        and ast.unparse(value.func).endswith("importorskip")
        and value.args
        and isinstance(value.args[0], ast.Constant)
        and isinstance(value.args[0].value, str)
    ):
        return value.args[0].value
    return None


def _type_checking_imports(tree: ast.Module) -> Iterable[ast.ImportFrom]:
    """``from x import Name`` under ``if TYPE_CHECKING:``: where a lazy export lives."""
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                if isinstance(child, ast.ImportFrom):
                    yield child


@functools.cache
def _module_file(dotted: str) -> Path | None:
    parts = dotted.split(".")
    for root in SOURCE_ROOTS:
        base = root.joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def _absolute(node: ast.ImportFrom, path: Path) -> str:
    """The dotted module an ``ImportFrom`` in ``path`` names, relative imports resolved."""
    if not node.level:
        return node.module or ""
    package = path.parent
    for _ in range(node.level - 1):
        package = package.parent
    for root in SOURCE_ROOTS:
        if package.is_relative_to(root):
            prefix = ".".join(package.relative_to(root).parts)
            return ".".join(p for p in (prefix, node.module or "") if p)
    return node.module or ""


@functools.cache
def _exported_from(package_init: Path, name: str) -> str | None:
    """Where a package's lazily exported ``name`` is defined (``_EXPORTS`` or the
    ``TYPE_CHECKING`` imports beside a ``__getattr__``)."""
    tree = _parse(package_init)
    if tree is None:
        return None
    package = ".".join(package_init.parent.relative_to(_root_of(package_init)).parts)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets
        ):
            exports = ast.literal_eval(node.value)
            if name in exports:
                return package + exports[name] if exports[name].startswith(".") else exports[name]
    for node in _type_checking_imports(tree):
        if any((alias.asname or alias.name) == name for alias in node.names):
            return _absolute(node, package_init)
    return None


def _root_of(path: Path) -> Path:
    return next(root for root in reversed(SOURCE_ROOTS) if path.is_relative_to(root))


_IMPORT_NEEDS: dict[Path, frozenset[str]] = {}
_IN_PROGRESS: set[Path] = set()


def import_needs(path: Path) -> frozenset[str]:
    """The needs of importing the module at ``path``, through every repository module it
    imports at its top level (each module is read once; an import cycle adds nothing)."""
    if path in _IMPORT_NEEDS:
        return _IMPORT_NEEDS[path]
    tree = _parse(path)
    if tree is None or path in _IN_PROGRESS:
        return frozenset()
    _IN_PROGRESS.add(path)
    found: set[str] = set()

    def follow(dotted: str) -> None:
        need = NEEDS_BY_IMPORT.get(dotted.split(".")[0])
        if need:
            found.add(need)
            return
        module = _module_file(dotted)
        if module is not None:
            found.update(import_needs(module))

    try:
        for node in _top_level_imports(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    follow(alias.name)
                continue
            module = _absolute(node, path)
            follow(module)
            for alias in node.names:
                submodule = f"{module}.{alias.name}"
                if _module_file(submodule) is not None:
                    follow(submodule)
                    continue
                init = _module_file(module)
                if init is not None and init.name == "__init__.py":
                    exported = _exported_from(init, alias.name)
                    if exported:
                        follow(exported)
    finally:
        _IN_PROGRESS.discard(path)
    _IMPORT_NEEDS[path] = frozenset(found)
    return _IMPORT_NEEDS[path]


#: Needs a conftest's import does not pass on: moto is a pure-Python package, cheap to
#: import; what a test needs is the emulation, which its fixtures show (``mock_aws``).
NOT_INHERITED_FROM_CONFTEST = frozenset({"moto"})


@functools.cache
def conftest_needs(test_file: Path) -> frozenset[str]:
    """Import needs of every ``conftest.py`` from ``tests/`` down to ``test_file``'s folder,
    but :data:`NOT_INHERITED_FROM_CONFTEST`: collecting the file needs those."""
    found: set[str] = set()
    folder = test_file.parent
    while folder.is_relative_to(ROOT / "tests"):
        conftest = folder / "conftest.py"
        if conftest.is_file():
            found.update(import_needs(conftest))
        folder = folder.parent
    return frozenset(found - NOT_INHERITED_FROM_CONFTEST)


@functools.cache
def module_needs(test_file: Path) -> frozenset[str]:
    """What collecting ``test_file`` needs: its imports and its conftests' imports."""
    return import_needs(test_file) | conftest_needs(test_file)


@functools.cache
def _module_functions(path: Path) -> dict[str, ast.FunctionDef]:
    tree = _parse(path)
    if tree is None:
        return {}
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def _names(node: ast.AST) -> set[str]:
    names = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            names.add(child.id)
        elif isinstance(child, ast.Attribute):
            names.add(child.attr)
        elif isinstance(child, ast.arg):
            names.add(child.arg)
        elif isinstance(child, ast.alias):
            # `import aws_cdk as cdk` uses aws_cdk, and binds cdk
            names.update(child.name.split("."))
            if child.asname:
                names.add(child.asname)
    return names


@functools.cache
def _function_names(path: Path, name: str) -> frozenset[str]:
    """Names used by function ``name`` of ``path`` and by the module's functions it calls."""
    functions = _module_functions(path)
    seen: set[str] = set()
    names: set[str] = set()
    pending = [name]
    while pending:
        current = pending.pop()
        if current in seen or current not in functions:
            continue
        seen.add(current)
        used = _names(functions[current])
        names |= used
        pending.extend(used & functions.keys())
    return frozenset(names)


def callable_needs(function: Callable[..., object]) -> frozenset[str]:
    """Needs that the names used by ``function`` (a test or a fixture) show."""
    function = inspect.unwrap(function)
    try:
        path = Path(inspect.getsourcefile(function) or "")
    except TypeError:
        return frozenset()
    if not path.is_relative_to(ROOT) or ".venv" in path.parts:
        return frozenset()  # pytest's and plugins' own fixtures (tmp_path, snapshot, ...)
    names: frozenset[str]
    if function.__name__ in _module_functions(path):
        names = _function_names(path, function.__name__)
    else:  # a method of a test class, or a function made at run time
        try:
            names = frozenset(_names(ast.parse(textwrap.dedent(inspect.getsource(function)))))
        except (OSError, SyntaxError, TypeError):
            return frozenset()
    return frozenset(NEEDS_BY_NAME[n] for n in names if n in NEEDS_BY_NAME)


# ----------------------------------------------------------------------------- before import
# The same findings from the source alone, per test function, so that a run that deselects a
# need does not even import a module all of whose tests have it (importing the runtime's and
# the Prospect's test modules costs seconds). tests/conftest.py checks, on every full
# collection, that these never find a need the collected test does not have.


def _marks_of(decorators: list[ast.expr]) -> set[str]:
    marks = set()
    for decorator in decorators:
        text = ast.unparse(decorator.func if isinstance(decorator, ast.Call) else decorator)
        if text.startswith("pytest.mark."):
            marks.add(text.removeprefix("pytest.mark.").split(".")[0])
    return marks & NEEDS.keys()


def _module_marks(tree: ast.Module) -> set[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            values = node.value.elts if isinstance(node.value, ast.List) else [node.value]
            return _marks_of(list(values))
    return set()


@functools.cache
def _fixtures(path: Path) -> dict[str, tuple[Path, ast.FunctionDef]]:
    """Fixture functions visible from ``path``: its own, then its conftests' (nearest wins)."""
    found: dict[str, tuple[Path, ast.FunctionDef]] = {}
    sources = [path]
    folder = path.parent
    while folder.is_relative_to(ROOT / "tests"):
        if (folder / "conftest.py").is_file():
            sources.append(folder / "conftest.py")
        folder = folder.parent
    for source in sources:
        for name, function in _module_functions(source).items():
            if name not in found and _is_fixture(function):
                found[name] = (source, function)
        for name, defined in _fixtures_bound_elsewhere(source).items():
            found.setdefault(name, defined)
    return found


def _is_fixture(function: ast.FunctionDef) -> bool:
    return any("fixture" in ast.unparse(d) for d in function.decorator_list)


#: Modules whose bindings are being followed (an import cycle adds nothing).
_BINDING_IN_PROGRESS: set[Path] = set()


@functools.cache
def _fixtures_bound_elsewhere(path: Path) -> dict[str, tuple[Path, ast.FunctionDef]]:
    """Fixtures that ``path`` binds at its top level but defines in another repository
    module: ``from m import f [as g]``, or ``g = m.f`` after ``import m`` or
    ``from package import m``; each followed to the ``def`` (through further such bindings)."""
    tree = _parse(path)
    if tree is None:
        return {}
    modules: dict[str, str] = {}  # local name -> dotted module
    bound: dict[str, tuple[str, str]] = {}  # local name -> (dotted module, name there)
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    modules[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, path)
            for alias in node.names:
                local = alias.asname or alias.name
                if _module_file(f"{module}.{alias.name}") is not None:
                    modules[local] = f"{module}.{alias.name}"
                else:
                    bound[local] = (module, alias.name)
        elif (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Attribute)
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id in modules
        ):
            bound[node.targets[0].id] = (modules[node.value.value.id], node.value.attr)
    found: dict[str, tuple[Path, ast.FunctionDef]] = {}
    _BINDING_IN_PROGRESS.add(path)
    try:
        for local, (module, name) in bound.items():
            source = _module_file(module)
            if source is None or source in _BINDING_IN_PROGRESS:
                continue
            function = _module_functions(source).get(name)
            if function is not None and _is_fixture(function):
                found[local] = (source, function)
            elif name in _fixtures_bound_elsewhere(source):
                found[local] = _fixtures_bound_elsewhere(source)[name]
    finally:
        _BINDING_IN_PROGRESS.discard(path)
    return found


@functools.cache
def static_needs(path: Path, test_name: str) -> frozenset[str]:
    """What test ``test_name`` of ``path`` needs, read from the source without importing it:
    never more than the collected test is found to need."""
    tree = _parse(path)
    functions = _module_functions(path)
    if tree is None or test_name not in functions:
        return frozenset()
    fixtures = _fixtures(path)
    needs = set(module_needs(path)) | _module_marks(tree)
    needs |= _marks_of(functions[test_name].decorator_list)
    names = set(_function_names(path, test_name))
    pending = [a.arg for a in functions[test_name].args.args]
    seen: set[str] = set()
    while pending:
        fixture = pending.pop()
        if fixture in seen:
            continue
        seen.add(fixture)
        names.add(fixture)
        if fixture in fixtures:
            source, function = fixtures[fixture]
            names |= _function_names(source, function.name)
            pending.extend(a.arg for a in function.args.args)
    needs |= {NEEDS_BY_NAME[n] for n in names if n in NEEDS_BY_NAME}
    return frozenset(needs)


def static_tests(path: Path) -> list[str]:
    """The module-level test functions of ``path`` (this suite has no test classes)."""
    return [name for name in _module_functions(path) if name.startswith("test_")]
