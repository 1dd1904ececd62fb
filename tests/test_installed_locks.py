"""``constructs_lib.bundling.installed_locks``: the bundles of one process that install the
same lock for the same target and bytecode mode run pip (and compile) once; the later ones
hard-link the first one's installed files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from constructs_lib.bundling.installed_locks import InstalledLocks, LockKey

KEY: LockKey = ("six==1.17.0 --hash=sha256:" + "a" * 64 + "\n", "manylinux2014_x86_64", "3.13", "")


def installed_tree(root: Path) -> list[str]:
    """A lock's root entries as pip leaves them: a module, a package, its metadata."""
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "sub").chmod(0o750)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "sub" / "data.txt").write_text("data\n")
    (root / "six.py").write_text("VALUE = 1\n")
    (root / "six-1.17.0.dist-info").mkdir()
    (root / "six-1.17.0.dist-info" / "METADATA").write_text("Name: six\n")
    return sorted(p.name for p in root.iterdir())


def files(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root``: (inode, mode)."""
    return {
        p.relative_to(root).as_posix(): (p.stat().st_ino, p.stat().st_mode) for p in root.rglob("*")
    }


def test_a_remembered_tree_is_hard_linked_whole_and_nothing_else(tmp_path):
    # GIVEN a first asset holding the lock's tree and its own package
    first = tmp_path / "first"
    first.mkdir()
    names = installed_tree(first)
    (first / "own_step").mkdir()
    (first / "own_step" / "handler.py").write_text("")
    locks = InstalledLocks()
    locks.remember(KEY, first, names)
    # WHEN a second asset of the same key links it
    second = tmp_path / "second"
    second.mkdir()
    assert locks.link(KEY, second)
    # THEN it holds the lock's files, the same inodes, its directories with their modes
    linked = files(second)
    assert sorted(linked) == sorted(p for p in files(first) if not p.startswith("own_step"))
    for path, (inode, mode) in linked.items():
        assert mode == (first / path).stat().st_mode, path
        if (first / path).is_file():
            assert inode == (first / path).stat().st_ino, path
    # ... and another bytecode mode shares nothing
    assert not locks.link((*KEY[:3], "no-bytecode"), tmp_path / "other")


def test_the_tree_is_found_where_the_first_asset_was_renamed(tmp_path):
    # GIVEN the first asset, remembered while CDK builds it under a temporary name
    building = tmp_path / "asset.abc-building"
    building.mkdir()
    names = installed_tree(building)
    locks = InstalledLocks()
    locks.remember(KEY, building, names)
    # WHEN CDK moves it into place THEN the next asset still links it
    building.rename(tmp_path / "asset.abc")
    second = tmp_path / "second"
    second.mkdir()
    assert locks.link(KEY, second)
    assert (second / "six.py").stat().st_ino == (tmp_path / "asset.abc" / "six.py").stat().st_ino


@pytest.mark.parametrize("change", ["a file removed", "the asset removed", "a name taken"])
def test_a_tree_that_cannot_be_linked_whole_is_forgotten_and_nothing_is_left(tmp_path, change):
    # GIVEN a remembered tree
    first = tmp_path / "first"
    first.mkdir()
    locks = InstalledLocks()
    locks.remember(KEY, first, installed_tree(first))
    second = tmp_path / "second"
    second.mkdir()
    # WHEN it changed, or the new asset already has one of its names
    if change == "a file removed":
        (first / "pkg" / "sub" / "data.txt").unlink()
    elif change == "the asset removed":
        shutil.rmtree(first)
    else:
        (second / "six.py").write_text("mine\n")
    before = files(second)
    # THEN nothing is linked, the asset is as it was, and the key installs afresh next time
    assert not locks.link(KEY, second)
    assert files(second) == before
    assert not locks.link(KEY, second)


# local_pip imports jsii and aws_cdk (it is a jsii ILocalBundling); tests/needs.py does not
# read imports made inside a test function, so the need is marked here.
@pytest.mark.synth
def test_bundles_of_one_lock_run_pip_once_and_each_ships_its_own_package(tmp_path, monkeypatch):
    from constructs_lib.bundling.local_pip import LocalPipBundling

    # GIVEN two functions' packages on one fully hashed lock
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(KEY[0])
    packages = []
    for name in ("first_step", "second_step"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "handler.py").write_text(f"NAME = {name!r}\n")
        packages.append(tmp_path / name)
    calls: list[Path] = []

    def pip_install(self: LocalPipBundling, lock: object, output_dir: Path) -> None:
        calls.append(output_dir)
        installed_tree(output_dir)

    monkeypatch.setattr(LocalPipBundling, "_pip_install", pip_install)
    locks = InstalledLocks()
    # WHEN both are bundled
    for package in packages:
        bundling = LocalPipBundling([package], [requirements], KEY[1], installed_locks=locks)
        bundling.bundle(tmp_path / "assets" / package.name)
    # THEN pip ran for the first only; the second links its files beside its own package
    first, second = (tmp_path / "assets" / p.name for p in packages)
    assert calls == [first]
    assert sorted(os.listdir(second)) == sorted(
        ["pkg", "six.py", "six-1.17.0.dist-info", "second_step"]
    )
    assert (second / "six.py").stat().st_ino == (first / "six.py").stat().st_ino
    assert (second / "second_step" / "handler.py").read_text() == "NAME = 'second_step'\n"
    # ... and without shared locks, every bundle runs pip
    LocalPipBundling([packages[0]], [requirements], KEY[1]).bundle(tmp_path / "alone")
    assert calls == [first, tmp_path / "alone"]
