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

The asset hash is computed from the inputs (package sources, pinned
requirements, architecture, Python version, bytecode mode), not from pip's
output, which is not byte-for-byte reproducible. Two functions with the same
inputs share one asset; an arm64 and an x86_64 build never do, nor a build with
and one without bytecode. A synth that skips bundling (``cdk ls``, ``cdk
bootstrap``, context ``aws:cdk:bundling-stacks = []``) stages the raw source
folder: its hash is salted with that mode, so it can never be published under
a bundled asset's key.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import jsii
from aws_cdk import Annotations, AssetHashType, BundlingOptions, DockerImage, ILocalBundling, Stack
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from ._paths import lambda_src_root
from .defaults import LAMBDA_PYTHON_VERSION, LAMBDA_RUNTIME

#: Bumped when the bundle layout changes, so old staged assets are not reused.
BUNDLE_FORMAT = "3"

#: The Lambda Python runtime ships these (about 25 MB); bundling them only adds
#: size. Their small dependencies (jmespath, urllib3, ...) stay: Powertools and
#: the SDK pin their own ranges of those.
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer")

#: Where Lambda unpacks the asset; compiled code objects name their files under it,
#: so tracebacks on Lambda show the real paths.
LAMBDA_TASK_ROOT = "/var/task"

#: Hash salt of a synth that skipped bundling: its staged "asset" is the raw source.
BUNDLING_SKIPPED = "bundling-skipped"
#: Hash salt of a bundle built without .pyc (no matching interpreter found).
NO_BYTECODE = "no-bytecode"

#: Annotation id of the synth warning emitted when no interpreter can compile bytecode.
NO_BYTECODE_WARNING = "constructs-lib:bundling-no-bytecode"

_IGNORED_NAMES = ("__pycache__", "*.pyc", "*.pyo", "tests", ".pytest_cache", ".mypy_cache")

_PROBE = (
    "import importlib.util, json, sys, sysconfig; print(json.dumps({"
    "'implementation': sys.implementation.name, 'version': '%d.%d.%d' % sys.version_info[:3],"
    "'releaselevel': sys.version_info.releaselevel,"
    "'free_threaded': bool(sysconfig.get_config_var('Py_GIL_DISABLED')),"
    "'cache_tag': sys.implementation.cache_tag,"
    "'magic': importlib.util.MAGIC_NUMBER.hex()}))"
)


__all__ = [
    "BytecodeCompiler",
    "LocalBundlingError",
    "LocalPipBundling",
    "find_bytecode_python",
    "lambda_src_root",
    "python_lambda_code",
]


class LocalBundlingError(RuntimeError):
    """Local bundling could not build the asset; the message says why and what to do."""


@dataclass(frozen=True)
class BytecodeCompiler:
    """A CPython interpreter that writes the Lambda runtime's bytecode.

    :param executable: path of the interpreter.
    :param version: its full version, e.g. ``"3.13.0"``.
    :param cache_tag: e.g. ``"cpython-313"``; names the ``.pyc`` files.
    :param magic: the bytecode magic number, hex.
    """

    executable: str
    version: str
    cache_tag: str
    magic: str

    @property
    def mode(self) -> str:
        """What goes into the asset hash: bytecode flavour and the compiler that wrote it."""
        return f"pyc-unchecked-hash:CPython-{self.version}:magic-{self.magic}"

    def compile(self, root: Path) -> None:
        """Write unchecked hash-based ``.pyc`` for every ``.py`` under ``root``.

        ``-I`` ignores ``PYTHONPYCACHEPREFIX`` and friends, which would send the
        ``.pyc`` elsewhere. A file that does not compile under this Python could not
        be imported on Lambda either; it is left without bytecode and named on stderr.
        """
        command = [
            self.executable, "-I", "-m", "compileall", "-q", "-j", "0",
            "--invalidation-mode", "unchecked-hash",
            "-s", str(root), "-p", LAMBDA_TASK_ROOT,
            str(root),
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-10:])
            print(
                f"local bundling: CPython {self.version} could not compile some files "
                f"(left without .pyc; Lambda could not import them either):\n{tail}",
                file=sys.stderr,
            )


def pip_platform(architecture: lambda_.Architecture) -> str:
    """The manylinux platform tag pip needs for a Lambda architecture."""
    if architecture.name == lambda_.Architecture.ARM_64.name:
        return "manylinux2014_aarch64"
    return "manylinux2014_x86_64"


def _version_key(path: Path) -> tuple[int, ...]:
    """Sort key for ``.../3.13.2/bin/python3.13``-like paths: newest patch first."""
    for part in reversed(path.parts):
        head = part.split("-")[1] if part.startswith("cpython-") else part
        numbers = head.split(".")
        if len(numbers) >= 3 and all(n.isdigit() for n in numbers[:3]):
            return tuple(int(n) for n in numbers[:3])
    return (0,)


def _candidates(version: str, environ: Mapping[str, str]) -> list[str]:
    """Interpreters that may be CPython ``version``: PATH, then pyenv, then uv-managed."""
    name = f"python{version}"
    found: list[str] = []
    on_path = shutil.which(name, path=environ.get("PATH", ""))
    if on_path:
        found.append(on_path)
    home = Path(environ.get("HOME") or Path.home())
    pyenv_roots = [environ.get("PYENV_ROOT") or str(home / ".pyenv")]
    pyenv = shutil.which("pyenv", path=environ.get("PATH", ""))
    if pyenv:
        try:
            root = subprocess.run(
                [pyenv, "root"], capture_output=True, text=True, timeout=10, check=False
            ).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            root = ""
        if root:
            pyenv_roots.insert(0, root)
    uv_dirs = [
        environ.get("UV_PYTHON_INSTALL_DIR", ""),
        str(Path(environ.get("XDG_DATA_HOME") or home / ".local/share") / "uv" / "python"),
    ]
    patterns = [(Path(r) / "versions", f"{version}.*/bin/{name}") for r in pyenv_roots]
    patterns += [(Path(d), f"cpython-{version}.*/bin/{name}") for d in uv_dirs if d]
    for base, pattern in patterns:
        if base.is_dir():
            found += [str(p) for p in sorted(base.glob(pattern), key=_version_key, reverse=True)]
    return list(dict.fromkeys(found))


def _probe(executable: str, version: str) -> BytecodeCompiler | None:
    try:
        result = subprocess.run(
            [executable, "-I", "-c", _PROBE], capture_output=True, text=True, timeout=30
        )
        info = json.loads(result.stdout) if result.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    if (
        not info
        or info["implementation"] != "cpython"
        or info["releaselevel"] != "final"
        or info["free_threaded"]
        or not info["version"].startswith(f"{version}.")
    ):
        return None
    return BytecodeCompiler(executable, info["version"], info["cache_tag"], info["magic"])


@functools.lru_cache(maxsize=8)
def _find_cached(
    version: str, environ_items: tuple[tuple[str, str], ...]
) -> BytecodeCompiler | None:
    for candidate in _candidates(version, dict(environ_items)):
        compiler = _probe(candidate, version)
        if compiler is not None:
            return compiler
    return None


def find_bytecode_python(
    version: str = LAMBDA_PYTHON_VERSION, environ: Mapping[str, str] | None = None
) -> BytecodeCompiler | None:
    """The first final, GIL-enabled CPython ``version`` on this machine, or None.

    Looks for ``python3.13`` on ``PATH`` (a pyenv shim for a version that is not
    selected fails the probe and is skipped), then ``$(pyenv root)/versions/3.13.*``,
    then uv-managed Pythons (``$UV_PYTHON_INSTALL_DIR`` or ``~/.local/share/uv/python``),
    newest patch release first. Each candidate is run once to confirm what it is.

    :param environ: the environment to search (default ``os.environ``).
    """
    env = os.environ if environ is None else environ
    keys = ("PATH", "HOME", "PYENV_ROOT", "UV_PYTHON_INSTALL_DIR", "XDG_DATA_HOME")
    return _find_cached(version, tuple((k, env[k]) for k in keys if k in env))


def _iter_files(root: Path) -> Iterable[Path]:
    for path in sorted(root.rglob("*")):
        parts = set(path.relative_to(root).parts)
        if (
            path.is_file()
            and not parts & {"__pycache__", "tests", ".pytest_cache"}
            and (path.suffix not in {".pyc", ".pyo"})
        ):
            yield path


def bundle_hash(
    packages: Sequence[Path],
    requirements: Sequence[Path],
    platform: str,
    python_version: str,
    mode: str = NO_BYTECODE,
) -> str:
    """A stable SHA-256 of everything that decides the bundle's content.

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
    for req in requirements:
        digest.update(b"\0requirements\0")
        digest.update(req.read_bytes())
    return digest.hexdigest()


def _requirement_lines(requirements: Sequence[Path]) -> list[str]:
    lines: list[str] = []
    for req in requirements:
        for line in req.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line and line not in lines:
                lines.append(line)
    return lines


@jsii.implements(ILocalBundling)
class LocalPipBundling:
    """Builds a Lambda asset with the local ``pip``; never falls back to Docker silently.

    :param packages: runtime package directories copied to the asset root.
    :param requirements: pinned requirements files installed into the asset root.
    :param platform: pip platform tag, e.g. ``manylinux2014_x86_64``.
    :param python_version: the Lambda interpreter, default the library's runtime (3.13).
    :param compiler: writes ``.pyc`` into the asset; default None (no bytecode).
    """

    def __init__(
        self,
        packages: Sequence[Path],
        requirements: Sequence[Path],
        platform: str,
        python_version: str = LAMBDA_PYTHON_VERSION,
        compiler: BytecodeCompiler | None = None,
    ) -> None:
        self.packages = list(packages)
        self.requirements = list(requirements)
        self.platform = platform
        self.python_version = python_version
        self.compiler = compiler

    def try_bundle(self, output_dir: str, *, image: DockerImage, **_: object) -> bool:
        """Bundle into ``output_dir``; raise :class:`LocalBundlingError` with the cause."""
        self.bundle(Path(output_dir))
        return True

    def bundle(self, output_dir: Path) -> None:
        """Install the requirements, copy the packages, compile bytecode into ``output_dir``."""
        output_dir.mkdir(parents=True, exist_ok=True)
        lines = _requirement_lines(self.requirements)
        if lines:
            self._pip_install(lines, output_dir)
        shutil.rmtree(output_dir / "bin", ignore_errors=True)
        for name in RUNTIME_PROVIDED:
            shutil.rmtree(output_dir / name, ignore_errors=True)
            for dist_info in output_dir.glob(f"{name}-*.dist-info"):
                shutil.rmtree(dist_info)
        for cache in list(output_dir.rglob("__pycache__")):
            shutil.rmtree(cache, ignore_errors=True)
        for package in self.packages:
            shutil.copytree(
                package,
                output_dir / package.name,
                ignore=shutil.ignore_patterns(*_IGNORED_NAMES, "requirements.txt"),
                dirs_exist_ok=True,
            )
        if self.compiler is not None:
            self.compiler.compile(output_dir.resolve())

    def _pip_install(self, lines: list[str], output_dir: Path) -> None:
        command = [
            sys.executable, "-m", "pip", "install",
            "--quiet", "--disable-pip-version-check", "--no-compile", "--no-warn-conflicts",
            "--target", str(output_dir),
            "--platform", self.platform,
            "--implementation", "cp",
            "--python-version", self.python_version,
            "--only-binary=:all:",
            *lines,
        ]  # fmt: skip
        try:
            result = subprocess.run(command, capture_output=True, text=True, check=False)
        except OSError as error:
            raise LocalBundlingError(
                f"local bundling could not start pip ({error}); install pip for {sys.executable}"
            ) from error
        if result.returncode != 0:
            tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
            raise LocalBundlingError(
                f"local bundling failed: pip could not install {', '.join(lines)} as "
                f"{self.platform} wheels for CPython {self.python_version}. Local bundling "
                f"needs network access to a package index with binary wheels for that "
                f"platform (no source builds are possible for another CPU). pip said:\n{tail}"
            )


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
    :param requirements: pinned requirements files (may be empty: copy only).
    """
    platform = pip_platform(architecture)
    compiler = None
    if not Stack.of(scope).bundling_required:
        mode = BUNDLING_SKIPPED
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
    return lambda_.Code.from_asset(
        str(packages[0].parent),
        asset_hash_type=AssetHashType.CUSTOM,
        asset_hash=bundle_hash(packages, requirements, platform, LAMBDA_PYTHON_VERSION, mode),
        bundling=BundlingOptions(
            # CDK requires an image; it is used only if local bundling returns
            # False, which LocalPipBundling never does: it raises with the cause.
            image=LAMBDA_RUNTIME.bundling_image,
            local=LocalPipBundling(packages, requirements, platform, compiler=compiler),
        ),
    )
