"""Turn a failed ``pip install`` into an error that says which failure it was.

pip exits 1 for every failure, and with ``--quiet`` an index it could not connect to looks
exactly like an index without the wheel ("No matching distribution found"): the
connection error is logged at debug level only, and so is the resolver's account of a
conflict ("The conflict is caused by: ..."). Bundling therefore runs pip with ``--log``,
and this module reads that log. The hint about network access appears only when pip
really failed to connect; a hash mismatch, a missing wheel and a version conflict each
get their own message. :func:`explain_pip_failure` is for installing a lock,
:func:`explain_resolution_failure` for resolving an unlocked file at synth.
"""

from __future__ import annotations

import re
from pathlib import Path

from packaging.utils import canonicalize_name

from .dependency_lock import (
    LOCK_COMMAND,
    DependencyLock,
    LockTarget,
    display_path,
    read_requirements,
)
from .errors import (
    LocalBundlingError,
    PackageIndexUnreachableError,
    RequirementsConflictError,
)

#: What pip (urllib3, requests, ssl) logs when it could not talk to an index or file host.
NETWORK_MARKERS = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "Read timed out",
    "Connection refused",
    "Connection reset",
    "Temporary failure in name resolution",
    "Name or service not known",
    "nodename nor servname",
    "ProxyError",
    "SSLError",
    "CERTIFICATE_VERIFY_FAILED",
    "is not a trusted or secure host and is being ignored",
)

_FETCH_FAILED = re.compile(r"Could not fetch URL (\S+?):? ")
_NO_MATCH = re.compile(r"No matching distribution found for (\S+)")
_IGNORED_HOST = re.compile(r"The repository located at (\S+) is not a trusted or secure host")
_CONNECTION_TO = re.compile(r"(\w+ConnectionPool\(host='[^']+', port=\d+\))")
#: The timestamp pip puts before every line of its ``--log`` file.
_LOG_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT[\d:.,]+ ?", re.MULTILINE)
#: The resolver's causes, one a line under "The conflict is caused by:".
_DEPENDS = re.compile(r"^(?P<who>\S+ \S+) depends on (?P<spec>.+)$")
_REQUESTED = re.compile(r"^The user requested (?P<constraint>\(constraint\) )?(?P<spec>.+)$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")

__all__ = [
    "NETWORK_MARKERS",
    "conflict_causes",
    "explain_pip_failure",
    "explain_resolution_failure",
]


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _block(text: str, start: str, lines: int = 12) -> str:
    """``lines`` lines of ``text`` from the first one containing ``start``."""
    all_lines = text.splitlines()
    for index, line in enumerate(all_lines):
        if start in line:
            return "\n".join(all_lines[index : index + lines]).rstrip()
    return ""


def _conflict_block(output: str, log: str) -> str:
    """pip's "The conflict is caused by:" paragraph: on the console without ``--quiet``,
    else in the log (its timestamps removed)."""
    start = "The conflict is caused by"
    return _block(output, start, 20) or _block(_LOG_STAMP.sub("", log), start, 20)


def _is_conflict(both: str) -> bool:
    # Not "ResolutionImpossible" alone: pip's log holds its traceback for any failed lookup.
    return "ERROR: ResolutionImpossible" in both or "The conflict is caused by:" in both


def _unreachable(
    output: str, log: str, what: str, needs_none: str
) -> PackageIndexUnreachableError | None:
    """The error when pip failed to connect to an index or file host, else None.

    :param needs_none: which synths need no index, for the hint.
    """
    both = f"{output}\n{log}"
    if not any(marker in both for marker in NETWORK_MARKERS):
        return None
    urls = _FETCH_FAILED.findall(log) + _IGNORED_HOST.findall(both)
    urls = urls or _CONNECTION_TO.findall(both)  # a file host, not an index page
    where = ", ".join(dict.fromkeys(urls)) or "the package index"
    return PackageIndexUnreachableError(
        f"local bundling: pip could not reach {where}, so it could not fetch {what}. "
        "Local bundling needs network access to a package index with binary wheels for "
        f"that platform (PyPI, or a mirror in PIP_INDEX_URL); {needs_none}. pip said:\n"
        + _tail(output or log)
    )


def explain_pip_failure(output: str, log: str, target: LockTarget) -> LocalBundlingError:
    """The error for pip's failure to install a lock, from its console ``output`` and its
    debug ``log``.

    :param output: pip's stderr and stdout.
    :param log: the file pip wrote with ``--log`` (may be empty if pip died early).
    :param target: what was being installed for, to name in the message.
    """
    both = f"{output}\n{log}"
    what = f"{target.platform} wheels for CPython {target.python_version}"
    relock = f"`{LOCK_COMMAND} <requirements.txt>` (`make lock` in this repository)"
    if "THESE PACKAGES DO NOT MATCH THE HASHES" in both:
        return LocalBundlingError(
            f"local bundling: the index served a file whose sha256 is not in the lock, so "
            f"pip refused it. Either the index is not the one the lock was made from (a "
            f"mirror with rebuilt wheels), or the file was tampered with. If you trust the "
            f"index, re-lock with {relock}. pip said:\n"
            + _block(output or log, "THESE PACKAGES DO NOT MATCH")
        )
    if _is_conflict(both):
        return RequirementsConflictError(
            f"local bundling: the locked requirements conflict for {target.describe()}; "
            f"pip's resolver said:\n" + _conflict_block(output, log)
        )
    unreachable = _unreachable(
        output, log, what, "a synth that finds the asset already staged in cdk.out needs none"
    )
    if unreachable is not None:
        return unreachable
    missing = _NO_MATCH.findall(both)
    if missing:
        return LocalBundlingError(
            f"local bundling: the index has no {what} of {', '.join(dict.fromkeys(missing))} "
            f"(pip reached it; no source builds are possible for another CPU). Pick a "
            f"version that publishes such wheels and re-lock with {relock}. pip said:\n"
            + _tail(output or log)
        )
    return LocalBundlingError(
        f"local bundling failed: pip could not install the lock as {what}. pip said:\n"
        + _tail(output or log)
    )


def conflict_causes(output: str, log: str) -> list[tuple[str, str, bool]]:
    """pip's causes of a resolution conflict: ``(package, cause, is_constraint)`` each.

    ``"requests 2.25.1 depends on idna<3 and >=2.5"`` gives ``("idna", "requests 2.25.1
    depends on idna<3 and >=2.5", False)``; ``"The user requested (constraint)
    idna==3.20"`` gives ``("idna", "idna==3.20", True)``; ``"The user requested six==1"``
    gives ``("six", "six==1", False)``. Empty when pip said no such thing.
    """
    block = _conflict_block(output, log).splitlines()[1:]
    causes: list[tuple[str, str, bool]] = []
    for raw in block:
        line = raw.strip()
        if not line:
            break
        match = _DEPENDS.match(line) or _REQUESTED.match(line)
        name = _NAME.match(match.group("spec")) if match else None
        if match is None or name is None:
            continue
        package = canonicalize_name(name.group(0))
        if match.re is _DEPENDS:
            causes.append((package, line, False))
        else:
            causes.append((package, match.group("spec"), bool(match.group("constraint"))))
    return causes


def _cause_sides(
    causes: list[tuple[str, str, bool]], requirements: Path, constraints: DependencyLock
) -> list[str]:
    """One line a conflicting package: each side, with its file and version."""
    lines = {line.name: line for line in read_requirements(requirements)}
    pins = constraints.by_name()
    sides: dict[str, list[str]] = {}
    for package, cause, is_constraint in causes:
        if is_constraint and package in pins:
            pin = pins[package]
            side = f"{display_path(pin.source)} pins {pin.version}"
        elif is_constraint:
            side = f"a constraint of your pip configuration (PIP_CONSTRAINT, pip.conf) asks {cause}"
        elif package in lines:
            side = f"{display_path(requirements)} (line {lines[package].line}) asks {cause}"
        elif " depends on " in cause:
            side = cause
        else:
            side = f"{display_path(requirements)} asks {cause}"
        sides.setdefault(package, [])
        if side not in sides[package]:
            sides[package].append(side)
    # The constraint (the locked side) last, after "but", as the offline check words it.
    return [
        f"{package}: " + ", but ".join(sorted(found, key=lambda side: " pins " in side))
        for package, found in sides.items()
    ]


def explain_resolution_failure(
    output: str, log: str, requirements: Path, constraints: DependencyLock
) -> LocalBundlingError:
    """The error for pip's failure to resolve ``requirements`` at synth against
    ``constraints`` (the runtime's lock), from its console ``output`` and debug ``log``.

    A conflict is a :class:`RequirementsConflictError` that names each package and the
    versions on each side; only a failed connection is a
    :class:`PackageIndexUnreachableError`, with the hint about network access.
    """
    target = constraints.target
    both = f"{output}\n{log}"
    what = f"{target.platform} wheels for CPython {target.python_version}"
    shown = display_path(requirements)
    lock_it = f"`{LOCK_COMMAND} {shown}`"
    if _is_conflict(both):
        sides = _cause_sides(conflict_causes(output, log), requirements, constraints)
        said = "".join(f"  - {side}\n" for side in sides) or _conflict_block(output, log) + "\n"
        return RequirementsConflictError(
            f"local bundling: {shown} cannot be resolved together with the locked "
            f"requirements for {target.describe()}:\n{said}"
            "This library's runtime pins are fixed for its release: require versions whose "
            "dependencies allow the pinned ones (or drop the line; the runtime may already "
            "install what you need), and synthesize again."
        )
    unreachable = _unreachable(
        output,
        log,
        what,
        f"a synth that finds the resolution of {shown} cached needs none to resolve, and a "
        f"committed lock ({lock_it}) needs no resolution at all",
    )
    if unreachable is not None:
        return unreachable
    if "no such option: --report" in both or "no such option: --dry-run" in both:
        return LocalBundlingError(
            f"local bundling: resolving {shown} at synth needs pip 22.2 or later (`--dry-run "
            f"--report`); upgrade it (`python -m pip install -U pip`) or lock the file with "
            f"{lock_it}. pip said:\n" + _tail(output or log)
        )
    missing = _NO_MATCH.findall(both)
    if missing:
        return LocalBundlingError(
            f"local bundling: the index has no {what} of {', '.join(dict.fromkeys(missing))} "
            f"(pip reached it; no source builds are possible for another CPU), so {shown} "
            "cannot be resolved. Require a version that publishes such wheels. pip said:\n"
            + _tail(output or log)
        )
    return LocalBundlingError(
        f"local bundling failed: pip could not resolve {shown} for {target.describe()}. "
        "pip said:\n" + _tail(output or log)
    )
