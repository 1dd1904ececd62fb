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

import hashlib
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import jsii
from aws_cdk import Annotations, AssetHashType, BundlingOptions, DockerImage, ILocalBundling, Stack
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from ._paths import lambda_src_root
from .bytecode import BytecodeCompiler, find_bytecode_python
from .defaults import LAMBDA_PYTHON_VERSION, LAMBDA_RUNTIME

#: Bumped when the bundle layout changes, so old staged assets are not reused.
BUNDLE_FORMAT = "3"

#: The Lambda Python runtime ships these (about 25 MB); bundling them only adds
#: size. Their small dependencies (jmespath, urllib3, ...) stay: Powertools and
#: the SDK pin their own ranges of those.
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer")

#: Hash salt of a synth that skipped bundling: its staged "asset" is the raw source.
BUNDLING_SKIPPED = "bundling-skipped"
#: Hash salt of a bundle built without .pyc (no matching interpreter found).
NO_BYTECODE = "no-bytecode"

#: Annotation id of the synth warning emitted when no interpreter can compile bytecode.
NO_BYTECODE_WARNING = "constructs-lib:bundling-no-bytecode"

_IGNORED_NAMES = ("__pycache__", "*.pyc", "*.pyo", "tests", ".pytest_cache", ".mypy_cache")

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


def pip_platform(architecture: lambda_.Architecture) -> str:
    """The manylinux platform tag pip needs for a Lambda architecture."""
    if architecture.name == lambda_.Architecture.ARM_64.name:
        return "manylinux2014_aarch64"
    return "manylinux2014_x86_64"


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
