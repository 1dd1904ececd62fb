"""Turn a failed ``pip install`` of a lock into an error that says which failure it was.

pip exits 1 for every failure, and with ``--quiet`` an index it could not connect to looks
exactly like an index without the wheel ("No matching distribution found"): the
connection error is logged at debug level only. Bundling therefore runs pip with
``--log``, and this module reads that log. The hint about network access appears only
when pip really failed to connect; a hash mismatch, a missing wheel and a version
conflict each get their own message.
"""

from __future__ import annotations

import re

from .bundling_errors import (
    LocalBundlingError,
    PackageIndexUnreachableError,
    RequirementsConflictError,
)
from .dependency_lock import LOCK_COMMAND, LockTarget

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

__all__ = ["NETWORK_MARKERS", "explain_pip_failure"]


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _block(text: str, start: str, lines: int = 12) -> str:
    """``lines`` lines of ``text`` from the first one containing ``start``."""
    all_lines = text.splitlines()
    for index, line in enumerate(all_lines):
        if start in line:
            return "\n".join(all_lines[index : index + lines]).rstrip()
    return ""


def explain_pip_failure(output: str, log: str, target: LockTarget) -> LocalBundlingError:
    """The error for pip's failure, from its console ``output`` and its debug ``log``.

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
    # Not "ResolutionImpossible" alone: pip's log holds its traceback for any failed lookup.
    if "ERROR: ResolutionImpossible" in both or "The conflict is caused by:" in both:
        return RequirementsConflictError(
            f"local bundling: the locked requirements conflict for {target.describe()}; "
            f"pip's resolver said:\n" + _block(output or log, "The conflict is caused by", 20)
        )
    if any(marker in both for marker in NETWORK_MARKERS):
        urls = _FETCH_FAILED.findall(log) + _IGNORED_HOST.findall(both)
        urls = urls or _CONNECTION_TO.findall(both)  # a file host, not an index page
        where = ", ".join(dict.fromkeys(urls)) or "the package index"
        return PackageIndexUnreachableError(
            f"local bundling: pip could not reach {where}, so it could not fetch {what}. "
            "Local bundling needs network access to a package index with binary wheels for "
            "that platform (PyPI, or a mirror in PIP_INDEX_URL); a synth that finds the "
            "asset already staged in cdk.out needs none. pip said:\n" + _tail(output or log)
        )
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
