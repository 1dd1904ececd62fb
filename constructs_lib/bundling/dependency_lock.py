"""Hash-pinned dependency locks of the Lambda assets: read them, check them, combine them.

A function's ``requirements.txt`` says what it needs (``anthropic==2.14.0``). Beside it,
one lock per target says exactly what gets installed: the complete set of packages for
CPython 3.13 on Lambda's x86_64 or arm64, each pinned ``==`` with the sha256 of its files,
written by ``python -m constructs_lib.lock_requirements`` (``make lock`` in this repo)::

    lambda_src/model_step/requirements.txt           # input: the direct pins
    lambda_src/model_step/requirements-x86_64.lock   # manylinux2014_x86_64, CPython 3.13
    lambda_src/model_step/requirements-aarch64.lock  # manylinux2014_aarch64, CPython 3.13

Bundling installs the lock with ``pip --require-hashes --no-deps``, and the asset hash is
computed from it, so one S3 key always holds one set of files. A requirements file that
is itself fully pinned with hashes is its own lock (for every target).

:func:`resolve_locks` combines a function's locks (the runtime's and a custom handler's)
and fails, offline, when they disagree. A custom file without a current lock is refused,
unless the caller passes an :data:`UnlockedResolver`: bundling's resolves it at synth
(:mod:`constructs_lib.bundling.synth_resolution`) into a lock of its own, so the asset hash
still covers exactly what ships. :func:`check_installed` then proves on the
installed wheels' metadata that every dependency is satisfied for the target, with the
target's markers (pip would evaluate them for the build machine's Python).

Stdlib and ``packaging`` only: the lock command and the tests import it without jsii.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from .._paths import lambda_src_root
from .errors import (
    LocalBundlingError,
    RequirementsConflictError,
    RequirementsNotLockedError,
)

#: The Lambda Python runtime ships these (about 25 MB): no lock holds them and no asset
#: ships them. A lock line for one is ignored; a dependency on one counts as satisfied.
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer")

#: Lambda's CPUs, as manylinux platform machines.
LOCK_MACHINES = ("x86_64", "aarch64")

#: The command that writes a custom handler's locks (the library's own: ``make lock``).
LOCK_COMMAND = "python -m constructs_lib.lock_requirements"

_TARGET_KEY = "# lock-target:"
_INPUT_KEY = "# lock-input-sha256:"

__all__ = [
    "LOCK_COMMAND",
    "LOCK_MACHINES",
    "RUNTIME_PROVIDED",
    "DependencyLock",
    "LockTarget",
    "LockedPackage",
    "UnlockedRequirements",
    "UnlockedResolver",
    "check_conflicts",
    "check_installed",
    "input_digest",
    "is_library_file",
    "lock_header",
    "lock_path",
    "lock_problem",
    "lock_stamp",
    "read_requirements",
    "resolve_locks",
]


@dataclass(frozen=True)
class LockTarget:
    """What a lock is for: a CPython version on a manylinux platform.

    :param python_version: e.g. ``"3.13"``.
    :param platform: pip's platform tag, e.g. ``"manylinux2014_x86_64"``.
    """

    python_version: str
    platform: str

    @property
    def machine(self) -> str:
        """``x86_64`` or ``aarch64``: names the lock file."""
        return self.platform.split("_", 1)[1]

    @property
    def label(self) -> str:
        """e.g. ``cp313-manylinux2014_x86_64``, as written in the lock's header."""
        return f"cp{self.python_version.replace('.', '')}-{self.platform}"

    @property
    def uv_platform(self) -> str:
        """uv's ``--python-platform`` spelling, e.g. ``x86_64-manylinux2014``."""
        family, machine = self.platform.split("_", 1)
        return f"{machine}-{family}"

    def describe(self) -> str:
        return f"CPython {self.python_version} on {self.platform}"

    def marker_environment(self) -> dict[str, str]:
        """PEP 508 marker values of the Lambda runtime (its patch release taken as .0)."""
        return {
            "implementation_name": "cpython",
            "implementation_version": f"{self.python_version}.0",
            "os_name": "posix",
            "platform_machine": self.machine,
            "platform_python_implementation": "CPython",
            "platform_release": "",
            "platform_system": "Linux",
            "platform_version": "",
            "python_full_version": f"{self.python_version}.0",
            "python_version": self.python_version,
            "sys_platform": "linux",
        }

    @classmethod
    def for_machine(cls, python_version: str, machine: str) -> LockTarget:
        return cls(python_version, f"manylinux2014_{machine}")


@dataclass(frozen=True)
class LockedPackage:
    """One locked distribution: its exact version and the hashes pip may accept."""

    name: str
    version: str
    hashes: tuple[str, ...]
    source: Path
    line: int

    def requirement_line(self) -> str:
        return " ".join([f"{self.name}=={self.version}", *(f"--hash={h}" for h in self.hashes)])


@dataclass(frozen=True)
class UnlockedRequirements:
    """A custom requirements file that had no current lock for the target.

    :param requirements: the file.
    :param problem: why its lock did not apply, e.g. ``has no lock requirements-x86_64.lock
        for CPython 3.13 on manylinux2014_x86_64``.
    :param lock_file: what it was installed through instead: the lock resolved at synth, or
        None when the synth skipped bundling and nothing was resolved.
    """

    requirements: Path
    problem: str
    lock_file: Path | None


@dataclass(frozen=True)
class DependencyLock:
    """The packages an asset installs, combined from one or more locks, sorted by name.

    ``unlocked`` lists the custom files that had no current lock (resolved at synth, or left
    out of a synth that skips bundling); it is not part of :meth:`canonical_text`.
    """

    target: LockTarget
    packages: tuple[LockedPackage, ...]
    unlocked: tuple[UnlockedRequirements, ...] = ()

    def canonical_text(self) -> str:
        """The lock as pip reads it, independent of comments and layout: hashed and installed."""
        return "".join(f"{p.requirement_line()}\n" for p in self.packages)

    def by_name(self) -> dict[str, LockedPackage]:
        return {p.name: p for p in self.packages}


@dataclass(frozen=True)
class RequirementLine:
    """One requirement of a requirements file, with its ``--hash`` options."""

    requirement: Requirement
    hashes: tuple[str, ...]
    line: int
    #: The requirement as written, whitespace removed: what a lock records of its input
    #: (``str(requirement)`` would follow the installed ``packaging``'s formatting).
    text: str

    @property
    def name(self) -> str:
        return canonicalize_name(self.requirement.name)

    @property
    def pinned_version(self) -> str | None:
        """The version of an exact ``==X`` pin (no wildcard), else None."""
        specs = list(self.requirement.specifier)
        if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
            return specs[0].version
        return None

    def is_locked(self) -> bool:
        return bool(self.hashes) and self.pinned_version is not None


def display_path(path: Path) -> str:
    """A path as a user would type it (relative to the working directory when under it);
    a lock shipped with this library says so."""
    resolved = path.resolve()
    try:
        shown = str(resolved.relative_to(Path.cwd()))
    except ValueError:
        shown = str(resolved)
    if resolved.suffix == ".lock" and is_library_file(resolved):
        shown += " (this library's lock)"
    return shown


def _logical_lines(path: Path) -> Iterable[tuple[int, str]]:
    """pip's reading of a requirements file: continuations joined, comments dropped."""
    pending = ""
    start = 0
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not pending:
            start = number
        text = raw if not raw.lstrip().startswith("#") else ""
        text = text.split(" #", 1)[0].split("\t#", 1)[0].rstrip()
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        line = (pending + text).strip()
        pending = ""
        if line:
            yield start, line
    if pending.strip():
        yield start, pending.strip()


def read_requirements(path: Path) -> list[RequirementLine]:
    """The requirements of ``path``; anything but requirement lines and ``--hash`` is refused.

    Index options (``--index-url``, ``-r``, ...) would be lost between the lock command and
    pip; set ``PIP_INDEX_URL`` (bundling) and ``UV_INDEX_URL`` (locking) instead.
    """
    found: list[RequirementLine] = []
    for number, line in _logical_lines(path):
        words = line.split()
        first_option = next((i for i, w in enumerate(words) if w.startswith("-")), len(words))
        spec, options = " ".join(words[:first_option]), words[first_option:]
        where = f"{display_path(path)}, line {number}"
        if not spec:
            raise LocalBundlingError(
                f"{where}: {line!r}: a requirements file for bundling holds requirements "
                "only; set the index with PIP_INDEX_URL (bundling) and UV_INDEX_URL (locking)"
            )
        hashes: list[str] = []
        rest = iter(options)
        for option in rest:
            if option.startswith("--hash="):
                hashes.append(option.removeprefix("--hash="))
            elif option == "--hash":
                hashes.append(next(rest, ""))
            else:
                raise LocalBundlingError(f"{where}: unsupported option {option!r} in {line!r}")
        try:
            requirement = Requirement(spec)
        except InvalidRequirement as error:
            raise LocalBundlingError(f"{where}: not a requirement: {spec!r} ({error})") from None
        if requirement.url:
            raise LocalBundlingError(
                f"{where}: {spec!r}: direct URLs cannot be locked for bundling; "
                "publish the package to an index"
            )
        hashes_found = tuple(sorted(set(hashes)))
        found.append(RequirementLine(requirement, hashes_found, number, "".join(spec.split())))
    return found


def input_digest(lines: Sequence[RequirementLine]) -> str:
    """What a lock records of its input: comments and layout do not count."""
    text = "".join(f"{line.text}\n" for line in lines)
    return hashlib.sha256(text.encode()).hexdigest()


def lock_path(requirements: Path, target: LockTarget) -> Path:
    """Where the lock of ``requirements`` for ``target`` lives: beside it."""
    return requirements.with_name(f"{requirements.stem}-{target.machine}.lock")


def lock_stamp(target: LockTarget, digest: str) -> str:
    """The two header lines bundling checks: the lock's target and its input's digest."""
    return f"{_TARGET_KEY} {target.label}\n{_INPUT_KEY} {digest}\n"


def lock_header(requirements: Path, target: LockTarget, command: str) -> str:
    """The lock's first lines: what it locks, for which target, and how to refresh it."""
    digest = input_digest(read_requirements(requirements))
    return (
        f"# Hash-pinned lock of {requirements.name} for {target.describe()}: every package\n"
        f"# the asset installs. Do not edit; change {requirements.name} and run:\n"
        f"#    {command}\n" + lock_stamp(target, digest)
    )


def _header_values(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        for key in (_TARGET_KEY, _INPUT_KEY):
            if raw.startswith(key):
                values[key] = raw.removeprefix(key).strip()
    return values


@dataclass(frozen=True)
class _Source:
    """A requirements file as bundling sees it: its input lines and the lock that applies."""

    path: Path
    lines: tuple[RequirementLine, ...]
    lock_file: Path | None
    locked: tuple[RequirementLine, ...]
    problem: str | None


def lock_problem(lock: Path, lines: Sequence[RequirementLine], target: LockTarget) -> str | None:
    """Why ``lock`` is not a current lock of ``lines`` for ``target``, or None when it is."""
    if not lock.is_file():
        return f"has no lock {lock.name} for {target.describe()}"
    header = _header_values(lock)
    loose = [line for line in read_requirements(lock) if not line.is_locked()]
    stated = header.get(_TARGET_KEY, "no stated target")
    if loose:
        return f"has a lock {lock.name} with an unhashed line {loose[0].line}"
    if stated != target.label:
        return f"has a lock {lock.name} for {stated}, not {target.label}"
    if header.get(_INPUT_KEY) != input_digest(lines):
        return f"changed since {lock.name} was written"
    return None


def _load(path: Path, target: LockTarget) -> _Source:
    if not path.is_file():
        raise RequirementsNotLockedError(
            f"local bundling: the requirements file {display_path(path)} does not exist"
        )
    lines = tuple(read_requirements(path))
    if all(line.is_locked() for line in lines):
        return _Source(path, lines, path, lines, None)
    lock = lock_path(path, target)
    problem = lock_problem(lock, lines, target)
    if problem is None:
        return _Source(path, lines, lock, tuple(read_requirements(lock)), None)
    return _Source(path, lines, None, (), problem)


def _conflict_lines(sources: Sequence[_Source], target: LockTarget) -> list[str]:
    """Every package two sources disagree on, each side with its file and version."""
    conflicts: list[str] = []
    env = target.marker_environment()
    for source in sources:
        for other in sources:
            if other is source or other.lock_file is None:
                continue
            pins = {line.name: line for line in other.locked}
            for line in source.lines:
                pin = pins.get(line.name)
                if pin is None or not _applies(line, env) or pin.pinned_version is None:
                    continue
                if not line.requirement.specifier.contains(pin.pinned_version, prereleases=True):
                    asks = str(line.requirement.specifier) or "any version"
                    conflicts.append(
                        f"{line.name}: {display_path(source.path)} (line {line.line}) asks "
                        f"{asks}, but {display_path(other.lock_file)} pins {pin.pinned_version}"
                    )
    return list(dict.fromkeys(conflicts))


def _applies(line: RequirementLine, env: Mapping[str, str]) -> bool:
    marker = line.requirement.marker
    return marker is None or marker.evaluate({**env, "extra": ""})


def _raise_conflicts(conflicts: Sequence[str], sources: Sequence[_Source], target: str) -> None:
    if not conflicts:
        return
    yours = [s.path for s in sources if not is_library_file(s.path)]
    relock = " ".join(display_path(p) for p in yours) or "<your requirements.txt>"
    raise RequirementsConflictError(
        f"the requirements for {target} conflict:\n"
        + "".join(f"  - {c}\n" for c in conflicts)
        + "This library's runtime pins are fixed for its release: allow the pinned version "
        "in your requirements (or drop the line; the runtime already installs the package), "
        f"then re-lock with `{LOCK_COMMAND} {relock}`."
    )


def is_library_file(path: Path) -> bool:
    """True for this library's own files (its runtime's requirements and locks)."""
    return path.resolve().is_relative_to(lambda_src_root())


def check_conflicts(requirements: Sequence[Path], target: LockTarget) -> None:
    """Raise :class:`RequirementsConflictError` when one file asks for a version that
    another file's current lock does not pin. Offline; files without a lock are fine here.
    """
    sources = [_load(Path(path), target) for path in requirements]
    _raise_conflicts(_conflict_lines(sources, target), sources, target.describe())


#: Resolves a custom requirements file that has no current lock, against ``constraints``
#: (the combined lock of the function's locked files: the runtime's), for the constraints'
#: target. Returns a current lock of the file for that target, or None to leave the file
#: out (a synth that skips bundling).
#: See :func:`constructs_lib.bundling.synth_resolution.resolve_at_synth`.
UnlockedResolver = Callable[[Path, DependencyLock], Path | None]


def resolve_locks(
    requirements: Sequence[Path],
    target: LockTarget,
    resolve_unlocked: UnlockedResolver | None = None,
) -> DependencyLock:
    """The one set of packages ``requirements`` install on ``target``, from their locks.

    Raises :class:`RequirementsConflictError` when one file asks for a version another's
    lock does not pin (``aws-lambda-powertools==3.36.0`` against the runtime's 3.37.0), or
    two locks pin one package differently; offline, before anything is resolved.

    :param resolve_unlocked: what to do with a custom file that has no current lock for
        ``target``. Default None: raise :class:`RequirementsNotLockedError` (offline).
        Given, it is called with the file and the other files' combined lock, and the lock it
        returns is used; the file is recorded in :attr:`DependencyLock.unlocked`. This
        library's own files must always have current locks.
    """
    sources = [_load(Path(path), target) for path in requirements]
    _raise_conflicts(_conflict_lines(sources, target), sources, target.describe())
    unlocked = [s for s in sources if s.problem]
    refused = [s for s in unlocked if resolve_unlocked is None or is_library_file(s.path)]
    if refused:
        raise RequirementsNotLockedError(
            f"local bundling for {target.describe()} installs only hash-pinned locks, and\n"
            + "".join(f"  - {display_path(s.path)} {s.problem}\n" for s in refused)
            + "Lock it (both Lambda architectures; the runtime's lock is the constraint):\n"
            f"    {LOCK_COMMAND} {' '.join(display_path(s.path) for s in refused)}\n"
            "or make the file itself a complete lock: every package pinned == with --hash."
        )
    if not unlocked or resolve_unlocked is None:
        return _combine(sources, target)
    constraints = _combine([s for s in sources if not s.problem], target)
    records: list[UnlockedRequirements] = []
    combined: list[_Source] = []
    for source in sources:
        if source.problem:
            lock_file = resolve_unlocked(source.path, constraints)
            records.append(UnlockedRequirements(source.path, source.problem, lock_file))
            source = _resolved(source, lock_file, target)
        combined.append(source)
    return replace(_combine(combined, target), unlocked=tuple(records))


def _resolved(source: _Source, lock_file: Path | None, target: LockTarget) -> _Source:
    """``source`` installed through ``lock_file``, the lock a resolver returned for it."""
    if lock_file is None:
        return _Source(source.path, source.lines, None, (), None)
    problem = lock_problem(lock_file, source.lines, target)
    if problem is not None:
        raise LocalBundlingError(
            f"local bundling: {display_path(lock_file)}, resolved for "
            f"{display_path(source.path)}, is not a current lock of it: the file {problem}"
        )
    return _Source(source.path, source.lines, lock_file, tuple(read_requirements(lock_file)), None)


def _combine(sources: Sequence[_Source], target: LockTarget) -> DependencyLock:
    """The locks of ``sources`` as one lock; raises when two pin one package differently.

    A source without a lock (left out by the resolver) adds nothing.
    """
    chosen: dict[str, LockedPackage] = {}
    conflicts: list[str] = []
    env = target.marker_environment()
    for source in sources:
        if source.lock_file is None:
            continue
        for line in source.locked:
            if line.name in RUNTIME_PROVIDED or not _applies(line, env):
                continue
            version = line.pinned_version
            assert version is not None
            package = LockedPackage(line.name, version, line.hashes, source.lock_file, line.line)
            seen = chosen.setdefault(line.name, package)
            if seen.version != version:
                conflicts.append(
                    f"{line.name}: {display_path(seen.source)} pins {seen.version}, but "
                    f"{display_path(source.lock_file)} pins {version}"
                )
    _raise_conflicts(conflicts, sources, target.describe())
    return DependencyLock(target, tuple(chosen[name] for name in sorted(chosen)))


def check_installed(site: Path, lock: DependencyLock) -> None:
    """Raise unless every installed distribution's dependencies are installed too.

    Reads each ``*.dist-info`` under ``site`` and evaluates its ``Requires-Dist`` markers
    for the lock's target (pip with ``--platform`` would evaluate them for this machine's
    Python). A dependency on a runtime-provided package (boto3, ...) is satisfied by
    Lambda. Catches a hand-written lock that misses a dependency, and a custom lock
    whose package needs another version of something the runtime's lock pins.
    """
    env = lock.target.marker_environment()
    installed = {
        canonicalize_name(d.metadata["Name"]): d
        for d in importlib.metadata.distributions(path=[os.fspath(site)])
    }
    locked = lock.by_name()
    problems: list[str] = []
    pending = [(name, "") for name in sorted(installed)]
    seen: set[tuple[str, str]] = set()
    while pending:
        name, extra = pending.pop()
        if (name, extra) in seen or name not in installed:
            continue
        seen.add((name, extra))
        dist = installed[name]
        for text in dist.requires or ():
            requirement = Requirement(text)
            marker = requirement.marker
            if marker is not None and not marker.evaluate({**env, "extra": extra}):
                continue
            dependency = canonicalize_name(requirement.name)
            if dependency in RUNTIME_PROVIDED:
                continue
            who = f"{name} {dist.version}{f'[{extra}]' if extra else ''}"
            if name in locked:
                who += f" ({display_path(locked[name].source)})"
            if dependency not in installed:
                problems.append(f"{who} requires {requirement}, which no lock provides")
                continue
            have = installed[dependency].version
            if not requirement.specifier.contains(have, prereleases=True):
                where = display_path(locked[dependency].source) if dependency in locked else ""
                problems.append(
                    f"{who} requires {requirement}, but {dependency} {have} is locked"
                    + (f" ({where})" if where else "")
                )
            pending += [(dependency, canonicalize_name(e)) for e in requirement.extras]
    if problems:
        raise RequirementsConflictError(
            f"local bundling for {lock.target.describe()}: the locked packages do not "
            "satisfy each other:\n"
            + "".join(f"  - {p}\n" for p in sorted(set(problems)))
            + f"Re-lock your requirements against this library's lock: `{LOCK_COMMAND} "
            "<your requirements.txt>`."
        )
