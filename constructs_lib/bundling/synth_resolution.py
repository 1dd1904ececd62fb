"""Resolve a custom handler's unlocked requirements at synth, with pip, and cache the result.

A custom ``requirements.txt`` without a current lock for the target is resolved while the
function is constructed, before the asset hash is computed: pip resolves it for the
Lambda (``--platform manylinux2014_<arch> --implementation cp --python-version 3.13
--only-binary=:all:``) with the locked requirements it is bundled with (the runtime's
lock) as constraints, and reports every wheel it chose with its sha256 (``--dry-run
--report``). The result is written as a lock, and bundling installs and hashes it like a
committed one, so the asset hash covers exactly what ships::

    lock = resolve_locks([runtime_requirements, my_requirements], target,
                         resolve_unlocked=resolve_at_synth)

pip, not uv: the synth's own interpreter always has pip (bundling needs it anyway), and
the wheel does not depend on uv. pip evaluates environment markers for the Python running
it, not for the Lambda, so the report is walked again with the target's markers: what
the target does not need is dropped, and a dependency that only the target needs fails
with the lock command (uv resolves for the target) as the way out.

The result is cached, keyed by the file's requirement lines, the constraints and the
target (:func:`resolution_cache_dir`), so a warm synth runs no pip and needs no index.
Another machine, or the same one on another day, can resolve differently (newer
releases): a committed lock (``python -m constructs_lib.lock_requirements``) is the
reproducible way.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .dependency_lock import (
    LOCK_COMMAND,
    RUNTIME_PROVIDED,
    DependencyLock,
    RequirementLine,
    display_path,
    input_digest,
    lock_problem,
    lock_stamp,
    read_requirements,
)
from .errors import LocalBundlingError, RequirementsNotLockedError
from .pip_failure import explain_resolution_failure

#: Bumped when what a resolution produces changes, so old cached results are not reused.
RESOLUTION_FORMAT = "1"

#: Where resolutions are cached, if set; default :func:`resolution_cache_dir`.
CACHE_DIR_ENV = "IDEMPOTENT_MODEL_STEP_CACHE_DIR"

__all__ = [
    "CACHE_DIR_ENV",
    "RESOLUTION_FORMAT",
    "resolution_cache_dir",
    "resolve_at_synth",
    "skip_resolution",
]


def resolution_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where synth keeps its resolutions: ``$IDEMPOTENT_MODEL_STEP_CACHE_DIR`` if set, else
    the user's cache directory (``$XDG_CACHE_HOME`` or ``~/.cache`` on Linux,
    ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows) under
    ``idempotent-model-step/resolved-requirements``. Not in ``cdk.out``, so a clean
    ``cdk.out`` does not resolve again."""
    env = os.environ if environ is None else environ
    if env.get(CACHE_DIR_ENV):
        return Path(env[CACHE_DIR_ENV])
    if sys.platform == "win32":
        base = Path(env.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "idempotent-model-step" / "resolved-requirements"


def skip_resolution(requirements: Path, constraints: DependencyLock) -> None:
    """The resolver of a synth that skips bundling: nothing is installed, so nothing is
    resolved, and ``cdk ls`` or a unit test needs no index."""
    return None


def resolve_at_synth(
    requirements: Path, constraints: DependencyLock, *, cache_dir: Path | None = None
) -> Path:
    """A lock of ``requirements`` for ``constraints.target``, resolved with pip against
    ``constraints``, from the cache when it holds one; returns the lock's path.

    :param requirements: the custom requirements file (ranges are fine).
    :param constraints: the lock of what it is bundled with; the result keeps its pins.
    :param cache_dir: default :func:`resolution_cache_dir`.
    :raises RequirementsConflictError: the file cannot be resolved with the constraints;
        the message names each package and the versions on each side.
    :raises PackageIndexUnreachableError: pip could not connect to the index.
    """
    lines = read_requirements(requirements)
    target = constraints.target
    digest = input_digest(lines)
    key = hashlib.sha256(
        f"format={RESOLUTION_FORMAT}\0target={target.label}\0input={digest}\0"
        f"constraints=\n{constraints.canonical_text()}".encode()
    ).hexdigest()
    cached = (cache_dir or resolution_cache_dir()) / f"{key[:32]}-{target.machine}.lock"
    if lock_problem(cached, lines, target) is None:
        return cached
    packages = _resolve_with_pip(requirements, lines, constraints)
    header = (
        f"# Resolved at synth by pip for {target.describe()}, against the locked\n"
        "# requirements it is bundled with. A cache, not a lock: another machine or day can\n"
        "# resolve differently. For a reproducible asset, lock the file and commit the locks:\n"
        f"#    {LOCK_COMMAND} <requirements.txt>\n" + lock_stamp(target, digest)
    )
    body = "".join(f"{p.name}=={p.version} --hash=sha256:{p.sha256}\n" for p in packages)
    cached.parent.mkdir(parents=True, exist_ok=True)
    # Parallel synths may resolve the same file: each writes its own file, then renames.
    handle, staged = tempfile.mkstemp(dir=cached.parent, prefix=f".{cached.name}.")
    with os.fdopen(handle, "w", encoding="utf-8") as stream:
        stream.write(header + body)
    os.replace(staged, cached)
    return cached


@dataclass(frozen=True)
class _Chosen:
    """One distribution pip chose: its wheel's sha256 and its declared dependencies."""

    name: str
    version: str
    sha256: str
    requires: tuple[str, ...]


def _pip_line(line: RequirementLine) -> str:
    """The requirement for pip, without its marker (already evaluated for the target)."""
    requirement = line.requirement
    extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
    return f"{requirement.name}{extras}{requirement.specifier}"


def _extras(requirement: Requirement) -> list[str]:
    """ "" (the package itself) and each extra it is asked with, as markers spell them."""
    return ["", *sorted(canonicalize_name(extra) for extra in requirement.extras)]


def _applies(requirement: Requirement, env: Mapping[str, str], extra: str = "") -> bool:
    marker = requirement.marker
    return marker is None or marker.evaluate({**env, "extra": extra})


def _resolve_with_pip(
    requirements: Path, lines: Sequence[RequirementLine], constraints: DependencyLock
) -> list[_Chosen]:
    """What pip installs for ``lines`` on the target, checked with the target's markers."""
    target = constraints.target
    env = target.marker_environment()
    # pip would evaluate markers for this machine's Python: give it only what the target needs.
    roots = [
        line
        for line in lines
        if line.name not in RUNTIME_PROVIDED and _applies(line.requirement, env)
    ]
    if not roots:
        return []
    if importlib.util.find_spec("pip") is None:
        raise LocalBundlingError(
            f"local bundling: {display_path(requirements)} has no current lock, and resolving "
            f"it at synth needs pip in {sys.executable} (`{sys.executable} -m ensurepip`). "
            f"Or lock it: `{LOCK_COMMAND} {display_path(requirements)}`."
        )
    with tempfile.TemporaryDirectory(prefix="pip-resolve-") as directory:
        work = Path(directory)
        wanted = work / "requirements.txt"
        wanted.write_text("".join(f"{_pip_line(line)}\n" for line in roots), encoding="utf-8")
        pinned = work / "constraints.txt"
        pinned.write_text(
            "".join(f"{p.name}=={p.version}\n" for p in constraints.packages), encoding="utf-8"
        )
        report, log = work / "report.json", work / "pip.log"
        command = [
            sys.executable, "-m", "pip", "install",
            "--dry-run", "--ignore-installed",
            "--quiet", "--no-color", "--progress-bar", "off", "--disable-pip-version-check",
            "--log", str(log),
            "--report", str(report),
            # pip 23 takes platform options only with --target; --dry-run writes nothing there.
            "--target", str(work / "unused-target"),
            "--platform", target.platform,
            "--implementation", "cp",
            "--python-version", target.python_version,
            "--only-binary=:all:",
            "-c", str(pinned),
            "-r", str(wanted),
        ]  # fmt: skip
        try:
            result = subprocess.run(command, capture_output=True, text=True, check=False)
        except OSError as error:
            raise LocalBundlingError(
                f"local bundling could not start pip ({error}) to resolve "
                f"{display_path(requirements)}; install pip for {sys.executable}"
            ) from error
        if result.returncode != 0 or not report.is_file():
            pip_log = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
            raise explain_resolution_failure(
                f"{result.stderr}\n{result.stdout}", pip_log, requirements, constraints
            )
        chosen = _read_report(json.loads(report.read_text(encoding="utf-8")), requirements)
    return _needed_on_target(roots, chosen, constraints, requirements)


def _read_report(report: Mapping[str, Any], requirements: Path) -> dict[str, _Chosen]:
    """pip's installation report (format 1) as the distributions it chose, by name."""
    chosen: dict[str, _Chosen] = {}
    for item in report.get("install", []):
        metadata = item["metadata"]
        name = canonicalize_name(metadata["name"])
        info = item.get("download_info", {})
        archive = info.get("archive_info")
        if archive is None:
            raise LocalBundlingError(
                f"local bundling: pip resolved {name} for {display_path(requirements)} from "
                f"{info.get('url', 'a directory or VCS')}, which cannot be hash-pinned; "
                "publish it to an index"
            )
        sha256 = archive.get("hashes", {}).get("sha256")
        if sha256 is None and str(archive.get("hash", "")).startswith("sha256="):
            sha256 = archive["hash"].removeprefix("sha256=")
        if sha256 is None and str(info.get("url", "")).startswith("file:"):
            # pip before 23 leaves local files unhashed (a --find-links directory).
            local = Path(unquote(urlparse(info["url"]).path))
            sha256 = hashlib.sha256(local.read_bytes()).hexdigest()
        if sha256 is None:
            raise LocalBundlingError(
                f"local bundling: pip reported no sha256 for {name} ({info.get('url')}), so "
                f"{display_path(requirements)} cannot be hash-pinned at synth; lock it: "
                f"`{LOCK_COMMAND} {display_path(requirements)}`"
            )
        requires = tuple(metadata.get("requires_dist") or ())
        chosen[name] = _Chosen(name, str(metadata["version"]), sha256, requires)
    return chosen


def _needed_on_target(
    roots: Sequence[RequirementLine],
    chosen: Mapping[str, _Chosen],
    constraints: DependencyLock,
    requirements: Path,
) -> list[_Chosen]:
    """The distributions the roots need on the target, its markers evaluated.

    What only this machine's Python needed is dropped. A dependency only the target needs,
    which pip therefore did not resolve and no constraint provides, is an error.
    """
    env = constraints.target.marker_environment()
    locked = constraints.by_name()
    needed: dict[str, _Chosen] = {}
    missing: list[str] = []
    pending = [(line.name, extra) for line in roots for extra in _extras(line.requirement)]
    seen: set[tuple[str, str]] = set()
    while pending:
        name, extra = pending.pop()
        if (name, extra) in seen or name in RUNTIME_PROVIDED:
            continue
        seen.add((name, extra))
        if name not in chosen:
            if name not in locked:
                missing.append(name)
            continue
        dist = needed.setdefault(name, chosen[name])
        for text in dist.requires:
            requirement = Requirement(text)
            if _applies(requirement, env, extra):
                dependency = canonicalize_name(requirement.name)
                pending += [(dependency, extra) for extra in _extras(requirement)]
    if missing:
        raise RequirementsNotLockedError(
            f"local bundling: pip resolved {display_path(requirements)} for this machine's "
            f"Python ({sys.version_info.major}.{sys.version_info.minor}), whose markers left "
            f"out what {constraints.target.describe()} needs: {', '.join(sorted(set(missing)))}. "
            f"Lock the file, which resolves for the target: "
            f"`{LOCK_COMMAND} {display_path(requirements)}`."
        )
    return [needed[name] for name in sorted(needed)]
