"""Docker-free bundling of Python Lambda code, with the Lambda's bytecode compiled in.

``aws_lambda_python_alpha.PythonFunction`` needs a Docker engine even to
construct, and many CI runners have none. :func:`python_lambda_code` builds the
asset locally instead: ``pip install --platform manylinux2014_<arch>
--only-binary=:all:`` fetches wheels for the Lambda's CPU and Python version
(whatever the build machine runs), then the runtime packages are copied in.

Lambda's ``/var/task`` is read-only, so Python can write no ``.pyc`` there and
every cold start compiles every imported module from source. When a CPython of
the Lambda's version is on the machine (:func:`find_bytecode_python`: PATH,
pyenv, uv-managed Pythons), the asset ships hash-based *unchecked* ``.pyc``
compiled by it: the loader uses them without reading the source's mtime, which
a zip (2-second resolution) would not keep anyway. Without one, the asset is
built as before and synth says so in a warning.

Requirements are installed from their hash-pinned locks
(:mod:`constructs_lib.bundling.dependency_lock`): ``pip --require-hashes --no-deps``, exactly
the locked files, then the installed metadata is checked for the target. The asset
hash is computed from the inputs (package sources, the lock, architecture, Python
version, bytecode mode), and the same inputs build byte-identical trees, whatever
pip's cache holds. A custom handler's requirements file without a current lock is
resolved while the function is constructed (:mod:`constructs_lib.bundling.synth_resolution`), so
the hash covers what it resolved to, and synth warns that the file is not locked. Two
functions with the same inputs share one asset; an arm64 and an x86_64 build never do,
nor a build with and one without bytecode. The bundles of one process that install the same
lock for the same target and bytecode mode run pip and compile its bytecode once: the later
ones hard-link the first one's installed files (:mod:`constructs_lib.bundling.installed_locks`).
A synth that skips bundling (``cdk ls``, ``cdk bootstrap``, context
``aws:cdk:bundling-stacks = []``) stages the raw source folder: its hash is salted with that
mode, so it can never be published under a bundled asset's key, and it resolves nothing.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import jsii
from aws_cdk import Annotations, AssetHashType, BundlingOptions, DockerImage, ILocalBundling, Stack
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from .._paths import lambda_src_root
from ..defaults import LAMBDA_PYTHON_VERSION, LAMBDA_RUNTIME
from .bytecode import BytecodeCompiler, find_bytecode_python
from .dependency_lock import (
    LOCK_COMMAND,
    RUNTIME_PROVIDED,
    DependencyLock,
    LockTarget,
    UnlockedResolver,
    check_installed,
    display_path,
    resolve_locks,
)
from .errors import LocalBundlingError
from .installed_locks import INSTALLED_LOCKS, InstalledLocks, LockKey
from .pip_failure import explain_pip_failure
from .synth_resolution import resolution_cache_dir, resolve_at_synth, skip_resolution

#: Bumped when the bundle layout changes, so old staged assets are not reused.
BUNDLE_FORMAT = "4"

#: Hash salt of a synth that skipped bundling: its staged "asset" is the raw source.
BUNDLING_SKIPPED = "bundling-skipped"
#: Hash salt of a bundle built without .pyc (no matching interpreter found).
NO_BYTECODE = "no-bytecode"

#: Annotation id of the synth warning emitted when no interpreter can compile bytecode.
NO_BYTECODE_WARNING = "constructs-lib:bundling-no-bytecode"
#: Annotation id of the synth warning emitted when a custom requirements file has no
#: current lock, so synth resolves it (or would, when it bundles).
UNLOCKED_REQUIREMENTS_WARNING = "constructs-lib:bundling-unlocked-requirements"

#: Never shipped from a package directory: caches, tests, and the requirements and locks
#: (installed, not copied; the lock is hashed on its own).
_IGNORED_DIRS = frozenset({"__pycache__", "tests", ".pytest_cache", ".mypy_cache"})
_IGNORED_SUFFIXES = frozenset({".pyc", ".pyo", ".lock"})
_IGNORED_FILES = frozenset({"requirements.txt"})

__all__ = [
    "RUNTIME_PROVIDED",
    "BytecodeCompiler",
    "LocalBundlingError",
    "LocalPipBundling",
    "find_bytecode_python",
    "lambda_src_root",
    "python_lambda_code",
]


def pip_platform(architecture: lambda_.Architecture) -> str:
    """The manylinux platform tag pip needs for a Lambda architecture."""
    if architecture.name == lambda_.Architecture.ARM_64.name:
        return "manylinux2014_aarch64"
    return "manylinux2014_x86_64"


def _ignored(name: str, is_dir: bool) -> bool:
    if is_dir:
        return name in _IGNORED_DIRS
    return name in _IGNORED_FILES or Path(name).suffix in _IGNORED_SUFFIXES


def _iter_files(root: Path) -> Iterable[Path]:
    """The files of a package directory that ship in the asset, sorted."""
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if (
            path.is_file()
            and not any(_ignored(part, True) for part in relative.parts[:-1])
            and not _ignored(path.name, False)
        ):
            yield path


def _copy_ignore(directory: str, names: list[str]) -> set[str]:
    """``shutil.copytree``'s view of :func:`_ignored`, so the copy ships what is hashed."""
    return {n for n in names if _ignored(n, (Path(directory) / n).is_dir())}


def bundle_hash(
    packages: Sequence[Path],
    lock: DependencyLock | None,
    platform: str,
    python_version: str,
    mode: str = NO_BYTECODE,
) -> str:
    """A stable SHA-256 of everything that decides the bundle's content.

    :param lock: the packages installed (their versions and accepted file hashes); None
        for a copy-only asset. Comments and layout of the lock files do not count.
    :param mode: how the asset is built: :data:`NO_BYTECODE`, a compiler's
        :attr:`BytecodeCompiler.mode`, or :data:`BUNDLING_SKIPPED` (raw source staged).
    """
    digest = hashlib.sha256()
    digest.update(
        f"format={BUNDLE_FORMAT};platform={platform};python={python_version};mode={mode}".encode()
    )
    for package in packages:
        digest.update(f"\0package:{package.name}".encode())
        for path in _iter_files(package):
            digest.update(f"\0{path.relative_to(package).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    if lock is not None and lock.packages:
        digest.update(b"\0lock\0")
        digest.update(lock.canonical_text().encode())
    return digest.hexdigest()


def _drop_unshipped_records(output_dir: Path) -> None:
    """Remove RECORD rows of files the asset does not ship (console scripts in ``bin/``).

    Their hashes cover a shebang naming this machine's Python, so they would make the
    same lock build different bytes on another machine.
    """
    for record in sorted(output_dir.glob("*.dist-info/RECORD")):
        rows = record.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = [row for row in rows if not row.startswith(("../", "bin/"))]
        if kept != rows:
            record.write_text("".join(kept), encoding="utf-8")


@jsii.implements(ILocalBundling)
class LocalPipBundling:
    """Builds a Lambda asset with the local ``pip``; never falls back to Docker silently.

    :param packages: runtime package directories copied to the asset root.
    :param requirements: requirements files, each installed through its hash-pinned lock
        for ``platform`` (``requirements-<machine>.lock`` beside it), or itself a complete
        lock. Checked when constructed: see
        :func:`~constructs_lib.bundling.dependency_lock.resolve_locks`.
    :param platform: pip platform tag, e.g. ``manylinux2014_x86_64``.
    :param python_version: the Lambda interpreter, default the library's runtime (3.13).
    :param compiler: writes ``.pyc`` into the asset; default None (no bytecode).
    :param resolve_unlocked: how a custom file without a current lock is resolved, e.g.
        :func:`~constructs_lib.bundling.synth_resolution.resolve_at_synth` (pip, cached; what
        :func:`python_lambda_code` passes when the synth bundles). Default None: such a
        file raises ``RequirementsNotLockedError``, and construction stays offline.
    :param installed_locks: where this process's bundles find a lock another bundle already
        installed for the same target and bytecode mode, to hard-link it instead of running
        pip and compiling it again (:mod:`~constructs_lib.bundling.installed_locks`; what
        :func:`python_lambda_code` passes). Default None: every bundle installs its own.
    """

    def __init__(
        self,
        packages: Sequence[Path],
        requirements: Sequence[Path],
        platform: str,
        python_version: str = LAMBDA_PYTHON_VERSION,
        compiler: BytecodeCompiler | None = None,
        resolve_unlocked: UnlockedResolver | None = None,
        installed_locks: InstalledLocks | None = None,
    ) -> None:
        self.packages = list(packages)
        self.requirements = [Path(r) for r in requirements]
        self.platform = platform
        self.python_version = python_version
        self.compiler = compiler
        #: Where an installed lock is shared with this process's other bundles; None: not.
        self.installed_locks = installed_locks
        target = LockTarget(python_version, platform)
        #: What the asset installs: every requirements file's lock (or resolution), combined.
        self.lock: DependencyLock | None = (
            resolve_locks(self.requirements, target, resolve_unlocked)
            if self.requirements
            else None
        )

    def try_bundle(self, output_dir: str, *, image: DockerImage, **_: object) -> bool:
        """Bundle into ``output_dir``; raise :class:`LocalBundlingError` with the cause."""
        self.bundle(Path(output_dir))
        return True

    def bundle(self, output_dir: Path) -> None:
        """Install the lock, copy the packages, compile bytecode into ``output_dir``.

        With ``installed_locks``, a lock that another bundle of this process installed for
        the same target and bytecode mode is hard-linked from that bundle's asset, and only
        the packages are compiled here; the first bundle of a lock is remembered for the
        next.
        """
        output_dir.mkdir(parents=True, exist_ok=True)
        key = self._lock_key()
        shared = self.installed_locks
        linked = key is not None and shared is not None and shared.link(key, output_dir)
        installed: list[str] = []
        if not linked:
            was_empty = not any(output_dir.iterdir())
            self._install(output_dir)
            installed = sorted(os.listdir(output_dir)) if was_empty else []
        for package in self.packages:
            shutil.copytree(
                package, output_dir / package.name, ignore=_copy_ignore, dirs_exist_ok=True
            )
        if self.compiler is not None:
            root = output_dir.resolve()
            self.compiler.compile(root, [root / p.name for p in self.packages] if linked else None)
        names = {p.name for p in self.packages}
        if key is not None and shared is not None and installed and not names & set(installed):
            if (output_dir / "__pycache__").is_dir():
                # compileall's bytecode of the lock's top-level modules (packages are folders)
                installed.append("__pycache__")
            shared.remember(key, output_dir, installed)

    def _lock_key(self) -> LockKey | None:
        """What decides the installed lock's bytes, or None when nothing is installed."""
        if self.lock is None or not self.lock.packages:
            return None
        mode = self.compiler.mode if self.compiler is not None else NO_BYTECODE
        return (self.lock.canonical_text(), self.platform, self.python_version, mode)

    def _install(self, output_dir: Path) -> None:
        """Install the lock into ``output_dir``, keep only what ships, and check it."""
        if self.lock is not None and self.lock.packages:
            self._pip_install(self.lock, output_dir)
        shutil.rmtree(output_dir / "bin", ignore_errors=True)
        for name in RUNTIME_PROVIDED:
            shutil.rmtree(output_dir / name, ignore_errors=True)
            for dist_info in output_dir.glob(f"{name}-*.dist-info"):
                shutil.rmtree(dist_info)
        for cache in list(output_dir.rglob("__pycache__")):
            shutil.rmtree(cache, ignore_errors=True)
        _drop_unshipped_records(output_dir)
        if self.lock is not None and self.lock.packages:
            check_installed(output_dir, self.lock)

    def _pip_install(self, lock: DependencyLock, output_dir: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="pip-lock-") as work:
            requirements = Path(work) / "requirements.lock"
            requirements.write_text(lock.canonical_text(), encoding="utf-8")
            log = Path(work) / "pip.log"
            command = [
                sys.executable, "-m", "pip", "install",
                "--quiet", "--no-color", "--disable-pip-version-check", "--no-compile",
                "--no-warn-conflicts",
                "--log", str(log),
                "--target", str(output_dir),
                "--platform", self.platform,
                "--implementation", "cp",
                "--python-version", self.python_version,
                "--only-binary=:all:",
                "--require-hashes", "--no-deps",
                "-r", str(requirements),
            ]  # fmt: skip
            try:
                result = subprocess.run(command, capture_output=True, text=True, check=False)
            except OSError as error:
                raise LocalBundlingError(
                    f"local bundling could not start pip ({error}); install pip for "
                    f"{sys.executable}"
                ) from error
            if result.returncode != 0:
                pip_log = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
                raise explain_pip_failure(f"{result.stderr}\n{result.stdout}", pip_log, lock.target)


def python_lambda_code(
    scope: Construct,
    packages: Sequence[Path],
    architecture: lambda_.Architecture,
    requirements: Sequence[Path] = (),
) -> lambda_.Code:
    """Lambda code from runtime packages plus pinned wheels, bundled without Docker.

    :param scope: the construct the code is for. Its stack decides whether this synth
        bundles at all, and a warning lands on it when no bytecode can be compiled.
    :param packages: directories of Python packages to place at the asset root.
    :param architecture: the function's CPU; picks the wheels' platform tag.
    :param requirements: requirements files, each installed through its hash-pinned lock
        (may be empty: copy only). A custom file without a current lock is resolved here,
        with pip against the other files' locks, when this synth bundles (cached:
        :func:`~constructs_lib.bundling.synth_resolution.resolution_cache_dir`), and a warning lands
        on ``scope``. Raises :class:`LocalBundlingError` subclasses when they conflict
        (offline, when a pin is refused outright), or when resolving fails.
    """
    platform = pip_platform(architecture)
    compiler = None
    resolver: UnlockedResolver = resolve_at_synth
    if not Stack.of(scope).bundling_required:
        mode = BUNDLING_SKIPPED
        resolver = skip_resolution
    else:
        compiler = find_bytecode_python(LAMBDA_PYTHON_VERSION)
        mode = compiler.mode if compiler else NO_BYTECODE
        if compiler is None:
            Annotations.of(scope).add_warning_v2(
                NO_BYTECODE_WARNING,
                f"No CPython {LAMBDA_PYTHON_VERSION} found (python{LAMBDA_PYTHON_VERSION} on "
                f"PATH, $(pyenv root)/versions/{LAMBDA_PYTHON_VERSION}.*, uv-managed Pythons): "
                "this Lambda asset ships without .pyc, so every cold start compiles every "
                f"module it imports. Install one (`uv python install {LAMBDA_PYTHON_VERSION}` "
                f"or `pyenv install {LAMBDA_PYTHON_VERSION}`) and synthesize again.",
            )
    local = LocalPipBundling(
        packages,
        requirements,
        platform,
        compiler=compiler,
        resolve_unlocked=resolver,
        installed_locks=INSTALLED_LOCKS,
    )
    if local.lock is not None:
        _warn_unlocked(scope, local.lock)
    return lambda_.Code.from_asset(
        str(packages[0].parent),
        asset_hash_type=AssetHashType.CUSTOM,
        asset_hash=bundle_hash(packages, local.lock, platform, LAMBDA_PYTHON_VERSION, mode),
        bundling=BundlingOptions(
            # CDK requires an image; it is used only if local bundling returns
            # False, which LocalPipBundling never does: it raises with the cause.
            image=LAMBDA_RUNTIME.bundling_image,
            local=local,
        ),
    )


def _warn_unlocked(scope: Construct, lock: DependencyLock) -> None:
    """A synth warning for each custom file that synth resolves instead of a committed lock."""
    for unlocked in lock.unlocked:
        shown = display_path(unlocked.requirements)
        if unlocked.lock_file is None:
            what = "this synth skips bundling, so nothing was resolved; a synth that bundles "
            what += "resolves it with pip"
        else:
            what = f"synth resolved it with pip (cached in {display_path(unlocked.lock_file)})"
        Annotations.of(scope).add_warning_v2(
            UNLOCKED_REQUIREMENTS_WARNING,
            f"{shown} {unlocked.problem}: {what}, against this library's lock. The asset "
            "hash covers what was resolved, but another machine, or a day with newer "
            "releases, can resolve differently and ship other code. For a reproducible "
            f"asset, lock it and commit the locks: `{LOCK_COMMAND} {shown}` "
            f"(resolutions are cached in {resolution_cache_dir()}).",
        )
