"""Each lock installed once a process: the bundles of one synth that ship the same lock share
one pip run and one bytecode compile of it.

A synth bundles every function's asset on its own, and functions whose code differs (each
model step ships its own system prompt) install the same lock for the same target: a stack of
three steps ran pip three times and compiled the same site-packages three times.

The first bundle of a lock installs and compiles it in its own asset, exactly as it would
alone, and :class:`InstalledLocks` remembers where: an open descriptor of that asset's
directory (it follows the directory when CDK renames the finished bundle into place) and the
names the lock put at its root. A later bundle of the same key (the lock, the platform, the
Lambda's Python version, the bytecode mode) hard-links those files into its own asset instead
of running pip and compileall again. The same inputs build byte-identical trees
(``tests/infra/test_bundling.py``), so the links hold what another install would have
written. Nothing is copied, so an app with one bundle per lock pays nothing; where links
cannot be made (another file system, no hard links, the first asset gone), the bundle
installs its own, as before.

Usage, as :func:`~constructs_lib.bundling.local_pip.python_lambda_code` does::

    LocalPipBundling(packages, requirements, platform, installed_locks=INSTALLED_LOCKS)
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["INSTALLED_LOCKS", "InstalledLocks", "LockKey"]

#: What decides an installed lock's bytes: the lock's canonical text, the pip platform tag,
#: the Lambda's Python version and the bytecode mode.
LockKey = tuple[str, str, str, str]

#: Hard links made relative to an open directory (POSIX; not on Windows).
_SUPPORTED = (
    hasattr(os, "O_DIRECTORY")
    and os.link in os.supports_dir_fd
    and os.stat in os.supports_dir_fd
    and os.open in os.supports_dir_fd
    and os.listdir in os.supports_fd
)


@dataclass(frozen=True)
class _Installed:
    """An asset directory holding a key's installed tree at ``names``."""

    #: Open descriptor of the directory (valid across renames).
    fd: int
    #: The root entries the lock installed (packages, dist-info, modules, ``__pycache__``).
    names: tuple[str, ...]
    #: Files and directories under ``names``: a tree missing any is not linked.
    entries: int


class InstalledLocks:
    """Where each :data:`LockKey` was installed in this process, for the bundles after it."""

    def __init__(self) -> None:
        self._installed: dict[LockKey, _Installed] = {}

    def remember(self, key: LockKey, directory: Path, names: Sequence[str]) -> None:
        """``directory`` holds ``key``'s installed tree at its root entries ``names``.

        A no-op where hard links relative to a directory are not supported.
        """
        if not _SUPPORTED:
            return
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            entries = sum(_count(fd, name) for name in names)
        except OSError:
            os.close(fd)
            return
        self.forget(key)
        self._installed[key] = _Installed(fd, tuple(names), entries)

    def forget(self, key: LockKey) -> None:
        """Never link ``key``'s tree again (the next bundle of it installs its own)."""
        installed = self._installed.pop(key, None)
        if installed is not None:
            os.close(installed.fd)

    def link(self, key: LockKey, output_dir: Path) -> bool:
        """Hard-link ``key``'s installed tree into ``output_dir``; True if it was.

        False when no bundle of this process installed ``key``, or its tree cannot be linked
        whole (gone, changed, on another file system): then ``output_dir`` is left as it was
        and ``key`` is forgotten.
        """
        installed = self._installed.get(key)
        if installed is None:
            return False
        made: list[Path] = []
        try:
            linked = 0
            for name in installed.names:
                target = output_dir / name
                if os.path.lexists(target):
                    raise FileExistsError(target)
                made.append(target)
                linked += _link(installed.fd, name, target)
            if linked != installed.entries:
                raise FileNotFoundError(f"{linked} of {installed.entries} entries linked")
        except OSError:
            for target in made:
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target, ignore_errors=True)
                elif os.path.lexists(target):
                    target.unlink()
            self.forget(key)
            return False
        return True


def _count(dir_fd: int, name: str) -> int:
    """Files and directories at ``name`` (relative to ``dir_fd``), itself included."""
    if not stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
        return 1
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=dir_fd)
    try:
        return 1 + sum(_count(fd, child) for child in os.listdir(fd))
    finally:
        os.close(fd)


def _link(dir_fd: int, name: str, target: Path) -> int:
    """Hard-link ``name`` (relative to ``dir_fd``) to ``target``, directories recreated with
    their mode; how many files and directories that made."""
    mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    if not stat.S_ISDIR(mode):
        os.link(name, target, src_dir_fd=dir_fd, follow_symlinks=False)
        return 1
    target.mkdir()
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=dir_fd)
    try:
        made = 1 + sum(_link(fd, child, target / child) for child in os.listdir(fd))
    finally:
        os.close(fd)
    os.chmod(target, stat.S_IMODE(mode))
    return made


#: The process's installed locks, shared by every bundle :func:`python_lambda_code` builds.
INSTALLED_LOCKS = InstalledLocks()
