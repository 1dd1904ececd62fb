"""Find a CPython of the Lambda's version and compile an asset's bytecode with it.

Stdlib only, so benchmarks and tools can find the interpreter without starting jsii.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Where Lambda unpacks the asset; compiled code objects name their files under it, so
#: the .pyc bytes do not depend on the build directory.
LAMBDA_TASK_ROOT = "/var/task"

_PROBE = (
    "import importlib.util, json, sys, sysconfig; print(json.dumps({"
    "'implementation': sys.implementation.name, 'version': '%d.%d.%d' % sys.version_info[:3],"
    "'releaselevel': sys.version_info.releaselevel,"
    "'free_threaded': bool(sysconfig.get_config_var('Py_GIL_DISABLED')),"
    "'cache_tag': sys.implementation.cache_tag,"
    "'magic': importlib.util.MAGIC_NUMBER.hex()}))"
)

__all__ = ["LAMBDA_TASK_ROOT", "BytecodeCompiler", "find_bytecode_python"]


@dataclass(frozen=True)
class BytecodeCompiler:
    """A CPython interpreter that writes the Lambda runtime's bytecode."""

    #: Path of the interpreter.
    executable: str
    #: Its full version, e.g. ``"3.13.0"``.
    version: str
    #: E.g. ``"cpython-313"``; names the ``.pyc`` files.
    cache_tag: str
    #: The bytecode magic number, hex.
    magic: str

    @property
    def mode(self) -> str:
        """What goes into the asset hash: bytecode flavour and the compiler that wrote it."""
        return f"pyc-unchecked-hash:CPython-{self.version}:magic-{self.magic}"

    def compile(self, root: Path, only: Sequence[Path] | None = None) -> None:
        """Write unchecked hash-based ``.pyc`` for every ``.py`` under ``root``.

        :param only: the directories under ``root`` to compile instead, their files named
            under :data:`LAMBDA_TASK_ROOT` all the same; default None, all of ``root``.

        ``-I`` ignores ``PYTHONPYCACHEPREFIX`` and friends, which would send the
        ``.pyc`` elsewhere. A file that does not compile under this Python could not
        be imported on Lambda either; it is left without bytecode and named on stderr.

        A large tree is compiled by a few ``compileall`` processes side by side, each
        given whole top-level entries (:func:`_compile_groups`), rather than by one
        ``compileall -j 0``: its process pool sends every file to a worker and back, and
        the model step's asset (about 3,900 files) took 8.2 CPU-s that way against 5.1 in
        one process. The files and their bytes are the same either way.
        """
        targets = [root] if only is None else list(only)
        if not targets:
            return
        command = [
            self.executable, "-I", "-m", "compileall", "-q",
            "--invalidation-mode", "unchecked-hash",
            "-s", str(root), "-p", LAMBDA_TASK_ROOT,
        ]  # fmt: skip
        processes = [
            subprocess.Popen(
                [*command, *(str(path) for path in group)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for group in _compile_groups(targets, _usable_cpus())
        ]
        failed = []
        for process in processes:
            stdout, stderr = process.communicate()
            if process.returncode != 0:
                failed.append(stdout + stderr)
        if failed:
            tail = "\n".join("".join(failed).strip().splitlines()[-10:])
            print(
                f"local bundling: CPython {self.version} could not compile some files "
                f"(left without .pyc; Lambda could not import them either):\n{tail}",
                file=sys.stderr,
            )


#: Source files a ``compileall`` process is given at least, so that a small asset is
#: compiled by one process (each costs an interpreter start).
FILES_PER_PROCESS = 500


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _source_count(path: Path) -> int:
    if path.is_dir():
        return sum(1 for _ in path.rglob("*.py"))
    return 1 if path.suffix == ".py" else 0


def _entries(targets: Sequence[Path]) -> list[Path]:
    """What ``compileall`` would recurse into under ``targets``, one level down: the
    ``.py`` files and the directories (not ``__pycache__``, not a symbolic link)."""
    found: list[Path] = []
    for target in targets:
        if not target.is_dir() or target.is_symlink():
            found.append(target)
            continue
        for entry in sorted(target.iterdir()):
            if entry.is_dir() and not entry.is_symlink() and entry.name != "__pycache__":
                found.append(entry)
            elif entry.is_file() and entry.suffix == ".py":
                found.append(entry)
    return found


def _compile_groups(targets: Sequence[Path], cpus: int) -> list[list[Path]]:
    """``targets`` split into at most ``cpus`` groups of about equal numbers of source
    files, one group per :data:`FILES_PER_PROCESS` files at most: each group is one
    ``compileall`` process. A single group is ``targets`` as given."""
    if cpus <= 1:
        return [list(targets)]  # nothing to split over: no need to count the tree
    entries = _entries(targets)
    counts = {entry: _source_count(entry) for entry in entries}
    total = sum(counts.values())
    wanted = max(1, min(cpus, total // FILES_PER_PROCESS))
    if wanted == 1:
        return [list(targets)]
    groups: list[list[Path]] = [[] for _ in range(wanted)]
    sizes = [0] * wanted
    # Largest first, each to the group with the fewest files so far.
    for entry in sorted(entries, key=lambda e: (-counts[e], str(e))):
        smallest = sizes.index(min(sizes))
        groups[smallest].append(entry)
        sizes[smallest] += counts[entry]
    return [group for group in groups if group]


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
    version: str, environ: Mapping[str, str] | None = None
) -> BytecodeCompiler | None:
    """The first final, GIL-enabled CPython ``version`` on this machine, or None.

    Looks for ``python3.13`` on ``PATH`` (a pyenv shim for a version that is not
    selected fails the probe and is skipped), then ``$(pyenv root)/versions/3.13.*``,
    then uv-managed Pythons (``$UV_PYTHON_INSTALL_DIR`` or ``~/.local/share/uv/python``),
    newest patch release first. Each candidate is run once to confirm what it is.

    :param version: the Lambda's Python, e.g. ``"3.13"``; a candidate of another minor
        version, a pre-release or a free-threaded build is skipped.
    :param environ: the environment to search (default ``os.environ``).
    """
    env = os.environ if environ is None else environ
    keys = ("PATH", "HOME", "PYENV_ROOT", "UV_PYTHON_INSTALL_DIR", "XDG_DATA_HOME")
    return _find_cached(version, tuple((k, env[k]) for k in keys if k in env))
