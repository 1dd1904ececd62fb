"""Write the hash-pinned locks that local bundling installs.

For each requirements file, and each Lambda architecture, this resolves the complete
dependency set for CPython 3.13 on manylinux2014 and writes it, every file's sha256
included, to ``requirements-<machine>.lock`` beside the file::

    python -m constructs_lib.lock_requirements lambda_src/my_step/requirements.txt
    python -m constructs_lib.lock_requirements --library     # this repo: `make lock`

A custom handler's file is resolved with the model-step runtime's lock as constraints,
so its lock can only hold versions the runtime pins; a requirement the runtime's pins
exclude fails first, naming both sides. Commit the locks beside the file.

It runs ``uv pip compile`` (``pip install uv``; the index comes from ``UV_INDEX_URL``),
because uv resolves for a platform and Python that are not this machine's and evaluates
markers for that target, where pip's resolver evaluates them for the Python running it;
and it writes the hash of every file of each pinned release, so the lock also works
from a mirror that serves another compatible wheel.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .._paths import lambda_src_root
from .dependency_lock import (
    LOCK_COMMAND,
    LOCK_MACHINES,
    RUNTIME_PROVIDED,
    LockTarget,
    check_conflicts,
    display_path,
    lock_header,
    lock_path,
    read_requirements,
)
from .errors import LocalBundlingError

#: The library's own bundled functions with requirements (each ``lambda_src/<name>``).
#: prospect_classifier has none of its own: it runs on the model step runtime's lock.
LIBRARY_REQUIREMENTS = ("model_step", "prospect_splitter")

#: The runtime every custom handler is bundled with; its lock constrains theirs.
RUNTIME_REQUIREMENTS = "model_step"
#: Extras of the library's functions, locked against the runtime's lock once it is written
#: (``tracing=True`` adds the X-Ray SDK from the first).
LIBRARY_EXTRA_REQUIREMENTS = ("model_step/requirements-tracing.txt",)

__all__ = ["LIBRARY_REQUIREMENTS", "LockCommandError", "find_uv", "main", "write_lock"]


class LockCommandError(LocalBundlingError):
    """The lock could not be written: uv is missing, or it could not resolve."""


def find_uv() -> list[str]:
    """The command that runs uv: on PATH, beside this Python, or as its module."""
    beside = Path(sys.executable).with_name("uv")
    for candidate in (shutil.which("uv"), str(beside) if beside.is_file() else None):
        if candidate:
            return [candidate]
    if importlib.util.find_spec("uv") is not None:
        return [sys.executable, "-m", "uv"]
    raise LockCommandError("locking needs uv: `pip install uv`, then run this again")


def runtime_requirements() -> Path:
    return lambda_src_root() / RUNTIME_REQUIREMENTS / "requirements.txt"


def write_lock(
    requirements: Path,
    target: LockTarget,
    *,
    constraints: Path | None,
    command: str,
    uv: Sequence[str],
) -> Path:
    """Resolve ``requirements`` for ``target`` and write its lock beside it; return its path.

    :param constraints: a lock whose pins the result must keep (the runtime's), or None.
    :param command: how to refresh the lock, written into its header.
    """
    read_requirements(requirements)  # refuse index options and URLs before uv sees them
    args = [
        *uv, "pip", "compile", requirements.name,
        "--python-platform", target.uv_platform,
        "--python-version", target.python_version,
        "--only-binary", ":all:",
        "--generate-hashes", "--no-header", "--quiet",
        *(arg for name in RUNTIME_PROVIDED for arg in ("--no-emit-package", name)),
    ]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="lock-") as work:
        label = ""
        if constraints is not None:
            # A path of its own in the annotations would differ on every machine.
            label = f"{RUNTIME_REQUIREMENTS}/{constraints.name}"
            copy = Path(work) / constraints.name
            shutil.copyfile(constraints, copy)
            args += ["--constraints", str(copy)]
        result = subprocess.run(
            args, cwd=requirements.parent, capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise LockCommandError(
                f"uv could not lock {display_path(requirements)} for {target.describe()}:\n"
                + result.stderr.strip()
            )
        body = result.stdout
        if constraints is not None:
            body = body.replace(str(Path(work) / constraints.name), label)
    output = lock_path(requirements, target)
    staged = output.with_name(f".{output.name}.tmp")
    staged.write_text(lock_header(requirements, target, command) + body, encoding="utf-8")
    loose = [line for line in read_requirements(staged) if not line.is_locked()]
    if loose:
        staged.unlink()
        raise LockCommandError(f"uv wrote unhashed requirements: {loose[0].requirement}")
    os.replace(staged, output)
    return output


def _lock_all(
    files: Sequence[Path], *, library: bool, python_version: str, uv: Sequence[str]
) -> list[Path]:
    written = []
    for requirements in files:
        for machine in LOCK_MACHINES:
            target = LockTarget.for_machine(python_version, machine)
            constraints = None
            command = "make lock"
            if not library:
                check_conflicts([runtime_requirements(), requirements], target)
                constraints = lock_path(runtime_requirements(), target)
                command = f"{LOCK_COMMAND} {display_path(requirements)}"
            written.append(
                write_lock(requirements, target, constraints=constraints, command=command, uv=uv)
            )
    return written


def library_requirement_files() -> tuple[list[Path], list[Path]]:
    """What ``make lock`` re-locks: the library's functions' requirements (from scratch), and
    their extras (within the runtime's lock), in that order."""
    root = lambda_src_root()
    return (
        [root / name / "requirements.txt" for name in LIBRARY_REQUIREMENTS],
        [root / extra for extra in LIBRARY_EXTRA_REQUIREMENTS],
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=LOCK_COMMAND,
        description="Write requirements-<machine>.lock beside each requirements file, for "
        "Lambda x86_64 and arm64, resolved against the model-step runtime's lock.",
    )
    parser.add_argument("requirements", nargs="*", type=Path, help="requirements files")
    parser.add_argument(
        "--library",
        action="store_true",
        help="re-lock this library's own functions from scratch (what `make lock` runs)",
    )
    args = parser.parse_args(argv)
    if bool(args.requirements) == args.library:
        parser.error("give requirements files, or --library")
    from ..defaults import LAMBDA_PYTHON_VERSION  # imports aws-cdk-lib: only when locking

    files, extras = (
        library_requirement_files()
        if args.library
        else ([p.resolve() for p in args.requirements], [])
    )
    try:
        for path in [*files, *extras]:
            if not path.is_file():
                raise LockCommandError(f"no such requirements file: {display_path(path)}")
        uv = find_uv()
        written = _lock_all(
            files, library=args.library, python_version=LAMBDA_PYTHON_VERSION, uv=uv
        )
        # Extras after the runtime's lock: they are resolved within it.
        written += _lock_all(extras, library=False, python_version=LAMBDA_PYTHON_VERSION, uv=uv)
    except LocalBundlingError as error:
        print(error, file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {display_path(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
