"""Docker-free bundling: locked requirements, a custom file resolved at synth, a stable
asset hash, byte-identical trees, shipped bytecode, and an error that names the cause when
bundling cannot proceed."""

from __future__ import annotations

import os
import shutil
import struct
import zipfile
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_lambda as lambda_

from constructs_lib import (
    LocalBundlingError,
    LocalPipBundling,
    ModelStepHandler,
    PropValidationError,
)
from constructs_lib._paths import lambda_src_root
from constructs_lib.bundling import lock_requirements
from constructs_lib.bundling.bytecode import find_bytecode_python
from constructs_lib.bundling.dependency_lock import (
    LockTarget,
    check_installed,
    display_path,
    lock_path,
    read_requirements,
    resolve_locks,
)
from constructs_lib.bundling.errors import (
    PackageIndexUnreachableError,
    RequirementsConflictError,
    RequirementsNotLockedError,
)
from constructs_lib.bundling.local_pip import (
    BUNDLING_SKIPPED,
    NO_BYTECODE,
    NO_BYTECODE_WARNING,
    UNLOCKED_REQUIREMENTS_WARNING,
    bundle_hash,
    pip_platform,
)
from constructs_lib.bundling.lock_requirements import LIBRARY_REQUIREMENTS
from constructs_lib.bundling.pip_failure import explain_pip_failure, explain_resolution_failure
from constructs_lib.bundling.synth_resolution import CACHE_DIR_ENV, resolve_at_synth
from constructs_lib.python_function import python_function

from .conftest import NO_BUNDLING, step_props, unvalidated_app

RUNTIME = lambda_src_root() / "model_step"
REQS = [RUNTIME / "requirements.txt"]
X86 = LockTarget("3.13", "manylinux2014_x86_64")
ARM = LockTarget("3.13", "manylinux2014_aarch64")
LOCK = resolve_locks(REQS, X86)
#: Network-free pip: no config file (this machine's adds find-links and local indexes).
PIP_OFFLINE_ENV = {"PIP_CONFIG_FILE": os.devnull, "PIP_RETRIES": "0", "PIP_NO_INPUT": "1"}


@pytest.fixture
def runtime_copy(tmp_path):
    copy = tmp_path / "model_step"
    shutil.copytree(RUNTIME, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


@pytest.fixture
def isolated_pip(monkeypatch, tmp_path):
    """pip sees only what a test sets: no config file, no retries, an empty cache; and
    synth's resolutions go to an empty cache of the test's own."""
    for key in list(os.environ):
        if key.startswith("PIP_"):
            monkeypatch.delenv(key)
    for key, value in PIP_OFFLINE_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PIP_CACHE_DIR", str(tmp_path / "pip-cache"))
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "resolutions"))
    return monkeypatch


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def fake_sha(char: str = "0") -> str:
    return "sha256:" + char * 64


# --------------------------------------------------------------------------- hash
def test_hash_is_stable_across_calls():
    first = bundle_hash([RUNTIME], LOCK, "manylinux2014_x86_64", "3.13")
    assert first == bundle_hash([RUNTIME], resolve_locks(REQS, X86), "manylinux2014_x86_64", "3.13")


def test_hash_ignores_bytecode_caches(runtime_copy):
    before = bundle_hash([runtime_copy], LOCK, "manylinux2014_x86_64", "3.13")
    (runtime_copy / "__pycache__").mkdir(exist_ok=True)
    (runtime_copy / "__pycache__" / "handler.cpython-311.pyc").write_bytes(b"\x00")
    assert bundle_hash([runtime_copy], LOCK, "manylinux2014_x86_64", "3.13") == before


def test_hash_changes_with_handler_code(runtime_copy):
    before = bundle_hash([runtime_copy], LOCK, "manylinux2014_x86_64", "3.13")
    (runtime_copy / "handler.py").write_text("# changed\n", encoding="utf-8")
    assert bundle_hash([runtime_copy], LOCK, "manylinux2014_x86_64", "3.13") != before


def test_hash_differs_per_architecture():
    # An arm64 and an x86_64 function must never share one staged asset.
    x86 = bundle_hash([RUNTIME], LOCK, pip_platform(lambda_.Architecture.X86_64), "3.13")
    arm = bundle_hash(
        [RUNTIME], resolve_locks(REQS, ARM), pip_platform(lambda_.Architecture.ARM_64), "3.13"
    )
    assert x86 != arm


def copy_lock(tmp_path: Path, edit=lambda text: text) -> Path:
    """The runtime's requirements and x86_64 lock, copied (the lock edited by ``edit``)."""
    reqs = write(tmp_path / "locked" / "requirements.txt", REQS[0].read_text())
    write(lock_path(reqs, X86), edit(lock_path(REQS[0], X86).read_text()))
    return reqs


def test_hash_follows_the_locked_versions_and_hashes_not_the_comments(tmp_path):
    base = bundle_hash([RUNTIME], LOCK, X86.platform, "3.13")

    def with_lock(name, edit):
        return bundle_hash([RUNTIME], resolve_locks([copy_lock(tmp_path / name, edit)], X86),
                           X86.platform, "3.13")  # fmt: skip

    # GIVEN the same lock with comments changed THEN the same hash
    assert with_lock("comments", lambda t: t.replace("# via", "#   via")) == base
    # GIVEN one locked version or one accepted file hash changed THEN another hash
    assert with_lock("version", lambda t: t.replace("jiter==0.19.0", "jiter==0.19.1")) != base
    first_hash = LOCK.by_name()["jiter"].hashes[0].removeprefix("sha256:")
    assert with_lock("sha", lambda t: t.replace(first_hash, "f" * 64)) != base


def test_platform_tags():
    assert pip_platform(lambda_.Architecture.ARM_64) == "manylinux2014_aarch64"
    assert pip_platform(lambda_.Architecture.X86_64) == "manylinux2014_x86_64"


def test_copy_only_bundle_has_no_caches_tests_requirements_or_locks(tmp_path, runtime_copy):
    (runtime_copy / "__pycache__").mkdir(exist_ok=True)
    (runtime_copy / "__pycache__" / "x.pyc").write_bytes(b"\x00")
    (runtime_copy / "tests").mkdir()
    (runtime_copy / "tests" / "test_x.py").write_text("")
    out = tmp_path / "out"
    LocalPipBundling([runtime_copy], [], "manylinux2014_x86_64").bundle(out)
    assert (out / "model_step" / "handler.py").is_file()
    assert not list(out.rglob("__pycache__")) and not list(out.rglob("tests"))
    assert not (out / "model_step" / "requirements.txt").exists()
    assert not list(out.rglob("*.lock"))


# --------------------------------------------------------------------------- the locks
@pytest.mark.parametrize("target", [X86, ARM], ids=lambda t: t.machine)
@pytest.mark.parametrize("name", LIBRARY_REQUIREMENTS)
def test_every_library_lock_is_current_complete_and_hashed(name, target):
    # GIVEN a bundled function's requirements.txt WHEN resolved for a target
    requirements = lambda_src_root() / name / "requirements.txt"
    lock = resolve_locks([requirements], target)
    # THEN its lock (not stale, for that target) pins every direct requirement, with hashes
    pins = {p.name: p for p in lock.packages}
    for line in read_requirements(requirements):
        assert pins[line.name].version == line.pinned_version, line
    assert all(p.hashes and all(h.startswith("sha256:") for h in p.hashes) for p in pins.values())
    # AND it leaves out what the Lambda runtime provides
    assert not {"boto3", "botocore", "s3transfer"} & set(pins)


def test_the_model_step_lock_holds_the_whole_sdk_closure():
    # The transitive packages that used to float are pinned now.
    assert {"pydantic", "pydantic-core", "httpx2", "anyio", "jiter"} <= set(LOCK.by_name())


def test_a_stale_lock_is_refused(tmp_path):
    # GIVEN requirements.txt edited after its lock was written
    reqs = copy_lock(tmp_path)
    reqs.write_text(reqs.read_text() + "six==1.17.0\n")
    # WHEN resolved THEN bundling refuses, saying what to run
    with pytest.raises(RequirementsNotLockedError) as error:
        resolve_locks([reqs], X86)
    assert "changed since requirements-x86_64.lock was written" in str(error.value)
    assert "python -m constructs_lib.lock_requirements" in str(error.value)


def test_a_lock_for_another_target_is_refused(tmp_path):
    reqs = copy_lock(tmp_path)
    with pytest.raises(RequirementsNotLockedError) as error:
        resolve_locks([reqs], LockTarget("3.14", X86.platform))
    assert "for cp313-manylinux2014_x86_64, not cp314-manylinux2014_x86_64" in str(error.value)


def test_a_requirements_file_with_index_options_is_refused(tmp_path):
    reqs = write(tmp_path / "requirements.txt", "--index-url https://example.org/simple\nsix\n")
    with pytest.raises(LocalBundlingError) as error:
        resolve_locks([reqs], X86)
    assert "line 1" in str(error.value) and "PIP_INDEX_URL" in str(error.value)


# --------------------------------------------------------------------------- custom requirements
def test_a_custom_requirement_against_the_runtime_pin_names_both_sides(tmp_path):
    # GIVEN a handler that asks for another Powertools than the runtime's lock pins
    extra = write(tmp_path / "my_step" / "requirements.txt", "aws-lambda-powertools==3.36.0\n")
    # WHEN resolved with the runtime's lock
    with pytest.raises(RequirementsConflictError) as error:
        resolve_locks([*REQS, extra], X86)
    # THEN the error names the package, each side's file and version, and how to fix it
    message = str(error.value)
    assert "aws-lambda-powertools:" in message
    assert f"{extra} (line 1) asks ==3.36.0" in message
    assert "requirements-x86_64.lock (this library's lock) pins 3.37.0" in message
    assert "network" not in message


def test_a_custom_lock_pinning_another_version_names_both_locks(tmp_path):
    # GIVEN a complete custom lock whose pydantic is not the runtime's
    extra = write(tmp_path / "requirements.txt", f"pydantic==2.12.0 --hash={fake_sha()}\n")
    with pytest.raises(RequirementsConflictError) as error:
        resolve_locks([*REQS, extra], X86)
    locked = LOCK.by_name()["pydantic"].version
    assert f"pydantic: {extra} (line 1) asks ==2.12.0, but " in str(error.value)
    assert f"requirements-x86_64.lock (this library's lock) pins {locked}" in str(error.value)


def test_an_unlocked_custom_requirement_is_refused_with_the_lock_command(tmp_path):
    extra = write(tmp_path / "requirements.txt", "six>=1.16\n")
    with pytest.raises(RequirementsNotLockedError) as error:
        resolve_locks([*REQS, extra], X86)
    message = str(error.value)
    assert f"{extra} has no lock requirements-x86_64.lock" in message
    assert f"python -m constructs_lib.lock_requirements {extra}" in message


def test_a_fully_hashed_custom_file_is_its_own_lock(tmp_path):
    # GIVEN a custom file pinned == with hashes, repeating one runtime pin and naming boto3
    pydantic = LOCK.by_name()["pydantic"]
    extra = write(
        tmp_path / "requirements.txt",
        f"six==1.17.0 --hash={fake_sha('a')}\n"
        f"{pydantic.requirement_line()}\n"
        f"boto3==1.40.0 --hash={fake_sha('b')}  # the runtime's, never bundled\n",
    )
    # WHEN combined with the runtime's lock THEN six joins, pydantic once, boto3 not at all
    combined = resolve_locks([*REQS, extra], X86).by_name()
    assert combined["six"].version == "1.17.0" and combined["six"].source == extra
    assert combined["pydantic"] == pydantic
    assert "boto3" not in combined
    assert set(combined) == {*LOCK.by_name(), "six"}


def test_a_custom_requirements_path_must_exist(tmp_path):
    package = write(tmp_path / "my_step" / "__init__.py", "").parent
    with pytest.raises(PropValidationError) as error:
        ModelStepHandler.from_package(
            package, handler="my_step.handler.handler", requirements="no/such/requirements.txt"
        )
    message = str(error.value)
    assert "'no/such/requirements.txt'" in message and "does not exist" in message


def test_custom_requirements_are_optional(tmp_path):
    package = write(tmp_path / "my_step" / "__init__.py", "").parent
    handler = ModelStepHandler.from_package(package, handler="my_step.handler.handler")
    assert handler.requirements == REQS


@pytest.mark.parametrize("context", [NO_BUNDLING, {}], ids=["bundling-skipped", "bundling"])
def test_a_conflicting_custom_handler_fails_synth_with_both_versions(tmp_path, context):
    # GIVEN the case, through the public API, in a synth that skips bundling or not
    from constructs_lib import IdempotentModelStep

    package = write(tmp_path / "my_step" / "__init__.py", "").parent
    extra = write(package / "requirements.txt", "aws-lambda-powertools==3.36.0\n")
    handler = ModelStepHandler.from_package(
        package, handler="my_step.handler.handler", requirements=extra
    )
    stack = cdk.Stack(unvalidated_app(context=context, outdir=str(tmp_path / "out")), "S")
    # WHEN the step is built THEN synth stops with both versions, offline, before pip resolves
    with pytest.raises(RequirementsConflictError, match=r"asks ==3\.36\.0.*pins 3\.37\.0") as error:
        IdempotentModelStep(stack, "Step", **step_props(stack, handler=handler))
    assert "network" not in str(error.value)


def test_the_lock_command_refuses_a_conflict_before_resolving(tmp_path, capsys):
    extra = write(tmp_path / "requirements.txt", "aws-lambda-powertools==3.36.0\n")
    assert lock_requirements.main([str(extra)]) == 1
    err = capsys.readouterr().err
    assert "asks ==3.36.0" in err and "pins 3.37.0" in err
    assert not list(tmp_path.glob("*.lock"))


def test_the_lock_command_locks_a_custom_file_for_both_architectures(
    tmp_path, runtime_copy, isolated_pip
):
    # GIVEN a custom requirement, served by a local index to uv (locking) and pip (bundling)
    links = tmp_path / "links"
    tiny_wheel(links)
    for key, value in {"UV_OFFLINE": "1", "PIP_NO_INDEX": "1"}.items():
        isolated_pip.setenv(key, value)
    for tool in ("UV", "PIP"):
        isolated_pip.setenv(f"{tool}_FIND_LINKS", str(links))
    isolated_pip.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    extra = write(tmp_path / "my_step" / "requirements.txt", "tinypkg>=1  # floats here\n")
    # WHEN locked with the command users run
    assert lock_requirements.main([str(extra)]) == 0
    # THEN each architecture's lock pins it with the wheel's hash, against the runtime's lock
    for target in (X86, ARM):
        combined = resolve_locks([*REQS, extra], target).by_name()
        assert combined["tinypkg"].version == "1.0"
        assert combined["tinypkg"].source == lock_path(extra, target)
        assert set(combined) == {*resolve_locks(REQS, target).by_name(), "tinypkg"}
    # AND bundling installs that lock, its hash checked by pip
    out = tmp_path / "out"
    LocalPipBundling([runtime_copy], [extra], X86.platform).bundle(out)
    assert (out / "tinypkg" / "__init__.py").is_file()


# --------------------------------------------------------------------------- installed closure
def fake_dist(site: Path, name: str, version: str, *requires: str) -> None:
    metadata = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    metadata += [f"Requires-Dist: {r}" for r in requires]
    write(site / f"{name.replace('-', '_')}-{version}.dist-info" / "METADATA",
          "\n".join(metadata) + "\n")  # fmt: skip


def lock_of(tmp_path: Path, target: LockTarget, *pins: str) -> object:
    text = "".join(f"{pin} --hash={fake_sha()}\n" for pin in pins)
    return resolve_locks([write(tmp_path / "lock.txt", text)], target)


def test_installed_closure_is_checked_with_the_targets_markers(tmp_path):
    # GIVEN packages whose dependencies apply only on another Python or CPU, or come
    # with Lambda (boto3)
    site = tmp_path / "site"
    fake_dist(site, "app", "1.0",
              "helper>=2", "tomli; python_version < '3.11'",
              "x86-only; platform_machine == 'x86_64'", "boto3>=1.30",
              "extra-only; extra == 'cli'")  # fmt: skip
    fake_dist(site, "helper", "2.1")
    lock = lock_of(tmp_path, ARM, "app==1.0", "helper==2.1")
    # WHEN checked for arm64 on CPython 3.13 THEN nothing is missing
    check_installed(site, lock)


def test_installed_closure_names_a_missing_and_a_mismatched_dependency(tmp_path):
    # GIVEN a custom package needing an older pydantic than the lock, and a missing one
    site = tmp_path / "site"
    fake_dist(site, "legacy-client", "0.9", "pydantic<2", "missing-dep==1.*")
    fake_dist(site, "pydantic", "2.14.4")
    lock = lock_of(tmp_path, X86, "legacy-client==0.9", "pydantic==2.14.4")
    with pytest.raises(RequirementsConflictError) as error:
        check_installed(site, lock)
    message = str(error.value)
    assert "legacy-client 0.9" in message
    assert "requires pydantic<2, but pydantic 2.14.4 is locked" in message
    assert "requires missing-dep==1.*, which no lock provides" in message


def test_installed_closure_follows_requested_extras(tmp_path):
    site = tmp_path / "site"
    fake_dist(site, "app", "1.0", "lib[fast]>=1")
    fake_dist(site, "lib", "1.2", "speedups; extra == 'fast'")
    lock = lock_of(tmp_path, X86, "app==1.0", "lib==1.2")
    with pytest.raises(RequirementsConflictError, match=r"lib 1\.2\[fast\].*speedups"):
        check_installed(site, lock)


# --------------------------------------------------------------------------- pip failures
def tiny_wheel(
    directory: Path, name: str = "tinypkg", version: str = "1.0", requires: tuple[str, ...] = ()
) -> Path:
    """A real, minimal pure-Python wheel, built here, so pip and uv need no index."""
    import base64
    import hashlib

    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {requirement}\n" for requirement in requires)
    files = {
        f"{name}/__init__.py": "VALUE = 1\n",
        f"{info}/METADATA": metadata,
        f"{info}/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    rows = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        rows.append(f"{path},sha256={digest.decode()},{len(text.encode())}\n")
    files[f"{info}/RECORD"] = "".join(rows) + f"{info}/RECORD,,\n"
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def test_an_unreachable_index_says_so(tmp_path, runtime_copy, isolated_pip):
    # GIVEN an index nothing listens on
    isolated_pip.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    bundling = LocalPipBundling([runtime_copy], REQS, "manylinux2014_aarch64")
    # WHEN the lock is installed THEN the error says the index could not be reached
    with pytest.raises(PackageIndexUnreachableError) as error:
        bundling.bundle(tmp_path / "out")
    message = str(error.value)
    assert "could not reach http://127.0.0.1:9/simple/" in message
    assert "needs network access to a package index" in message
    assert "manylinux2014_aarch64 wheels for CPython 3.13" in message
    assert "\x1b[" not in message  # pip's own lines, quoted without terminal colours


def test_a_wheel_missing_from_a_reachable_index_is_not_called_a_network_problem(
    tmp_path, runtime_copy, isolated_pip
):
    # GIVEN a reachable (local) index that holds only an sdist of the locked package
    links = tmp_path / "links"
    write(links / "tinypkg-1.0.tar.gz", "not a real sdist")
    isolated_pip.setenv("PIP_NO_INDEX", "1")
    isolated_pip.setenv("PIP_FIND_LINKS", str(links))
    reqs = write(tmp_path / "requirements.txt", f"tinypkg==1.0 --hash={fake_sha()}\n")
    # WHEN installed THEN the error names the package and the wheels it needs, no network hint
    with pytest.raises(LocalBundlingError) as error:
        LocalPipBundling([runtime_copy], [reqs], X86.platform).bundle(tmp_path / "out")
    message = str(error.value)
    assert "has no manylinux2014_x86_64 wheels for CPython 3.13 of tinypkg==1.0" in message
    assert "network" not in message and not isinstance(error.value, PackageIndexUnreachableError)


def test_a_file_that_does_not_match_the_lock_is_refused(tmp_path, runtime_copy, isolated_pip):
    # GIVEN an index serving a wheel whose sha256 the lock does not list
    links = tmp_path / "links"
    tiny_wheel(links)
    isolated_pip.setenv("PIP_NO_INDEX", "1")
    isolated_pip.setenv("PIP_FIND_LINKS", str(links))
    reqs = write(tmp_path / "requirements.txt", f"tinypkg==1.0 --hash={fake_sha()}\n")
    with pytest.raises(LocalBundlingError) as error:
        LocalPipBundling([runtime_copy], [reqs], X86.platform).bundle(tmp_path / "out")
    message = str(error.value)
    assert "sha256 is not in the lock" in message and "tinypkg==1.0" in message
    assert "network" not in message


def test_a_locked_wheel_installs_with_its_metadata_and_no_foreign_records(
    tmp_path, runtime_copy, isolated_pip
):
    # GIVEN an index serving exactly the locked wheel
    import hashlib

    links = tmp_path / "links"
    wheel = tiny_wheel(links)
    isolated_pip.setenv("PIP_NO_INDEX", "1")
    isolated_pip.setenv("PIP_FIND_LINKS", str(links))
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    reqs = write(tmp_path / "requirements.txt", f"tinypkg==1.0 --hash=sha256:{sha}\n")
    # WHEN bundled THEN the package and its dist-info are in the asset, beside the runtime
    out = tmp_path / "out"
    LocalPipBundling([runtime_copy], [reqs], X86.platform).bundle(out)
    assert (out / "tinypkg" / "__init__.py").read_text() == "VALUE = 1\n"
    record = (out / "tinypkg-1.0.dist-info" / "RECORD").read_text()
    assert "tinypkg/__init__.py" in record and "../" not in record
    assert (out / "model_step" / "handler.py").is_file()


def test_pip_failures_are_told_apart_by_pips_log():
    # pip 23-25 wording, as logged with --log; only a failed connection gets the network hint
    refused = (
        "Could not fetch URL https://mirror.example/simple/jiter/: connection error: "
        "HTTPSConnectionPool(host='mirror.example', port=443): Max retries exceeded "
        "(Caused by NewConnectionError('Failed to establish a new connection: [Errno 111] "
        "Connection refused')) - skipping\n"
        "ERROR: No matching distribution found for jiter==0.19.0\n"
    )
    conflict = (
        "ERROR: Cannot install a==1 and b==2 because these package versions have conflicting "
        "dependencies.\nThe conflict is caused by:\n    a 1 depends on c<2\n    b 2 depends "
        "on c>=2\nERROR: ResolutionImpossible: for help visit https://pip.pypa.io/\n"
    )
    unreachable = explain_pip_failure("", refused, X86)
    assert isinstance(unreachable, PackageIndexUnreachableError)
    assert "https://mirror.example/simple/jiter/" in str(unreachable)
    resolved = explain_pip_failure(conflict, conflict, X86)
    assert isinstance(resolved, RequirementsConflictError)
    assert "a 1 depends on c<2" in str(resolved) and "network" not in str(resolved)
    missing = explain_pip_failure("ERROR: No matching distribution found for x==1\n", "", X86)
    assert "network" not in str(missing) and "x==1" in str(missing)


# --------------------------------------------------------------------------- resolved at synth
JMESPATH = LOCK.by_name()["jmespath"]  # pinned by the runtime's lock, a dependency of Powertools


def local_index(isolated_pip, tmp_path: Path, *wheels: tuple[str, str, tuple[str, ...]]) -> Path:
    """A --find-links directory of tiny wheels as pip's only index, plus the runtime's jmespath."""
    links = tmp_path / "links"
    tiny_wheel(links, "jmespath", JMESPATH.version)
    for name, version, requires in wheels:
        tiny_wheel(links, name, version, requires)
    isolated_pip.setenv("PIP_NO_INDEX", "1")
    isolated_pip.setenv("PIP_FIND_LINKS", str(links))
    return links


def unreachable_index(isolated_pip) -> None:
    isolated_pip.delenv("PIP_NO_INDEX", raising=False)
    isolated_pip.delenv("PIP_FIND_LINKS", raising=False)
    isolated_pip.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")


def test_an_unlocked_custom_file_is_resolved_against_the_runtime_lock(tmp_path, isolated_pip):
    # GIVEN a custom file with a range, whose package needs the runtime's jmespath, and a
    # helper only this machine's Python needs (markers are the target's: CPython 3.13)
    links = local_index(
        isolated_pip, tmp_path,
        ("tinypkg", "1.0", ("jmespath>=1", "oldhelper; python_version < '3.13'")),
        ("oldhelper", "1.0", ()),
    )  # fmt: skip
    extra = write(tmp_path / "my_step" / "requirements.txt", "tinypkg>=1\n")
    # WHEN resolved at synth
    lock = resolve_locks([*REQS, extra], X86, resolve_at_synth)
    # THEN tinypkg joins the runtime's lock, hash-pinned to the wheel pip chose
    import hashlib

    combined = lock.by_name()
    sha = hashlib.sha256((links / "tinypkg-1.0-py3-none-any.whl").read_bytes()).hexdigest()
    assert combined["tinypkg"].version == "1.0"
    assert combined["tinypkg"].hashes == (f"sha256:{sha}",)
    # AND the runtime's packages keep their lock's pins and hashes; the helper is left out
    assert combined["jmespath"] == JMESPATH
    assert set(combined) == {*LOCK.by_name(), "tinypkg"}
    # AND the file is recorded as resolved, not locked, with the lock it was resolved into
    (unlocked,) = lock.unlocked
    assert unlocked.requirements == extra and "has no lock" in unlocked.problem
    assert unlocked.lock_file is not None
    assert unlocked.lock_file.is_relative_to(tmp_path / "resolutions")
    assert combined["tinypkg"].source == unlocked.lock_file


def test_a_cached_resolution_needs_no_index(tmp_path, isolated_pip):
    # GIVEN a custom file resolved once
    local_index(isolated_pip, tmp_path, ("tinypkg", "1.0", ()))
    extra = write(tmp_path / "requirements.txt", "tinypkg\n")
    first = resolve_locks([*REQS, extra], ARM, resolve_at_synth)
    # WHEN resolved again with no index to be reached
    unreachable_index(isolated_pip)
    second = resolve_locks([*REQS, extra], ARM, resolve_at_synth)
    # THEN the same lock comes from the cache; bundling hashes the same thing
    assert second.canonical_text() == first.canonical_text()
    assert bundle_hash([RUNTIME], second, ARM.platform, "3.13") == bundle_hash(
        [RUNTIME], first, ARM.platform, "3.13"
    )
    # AND another target, never resolved, does need the index
    with pytest.raises(PackageIndexUnreachableError):
        resolve_locks([*REQS, extra], X86, resolve_at_synth)


def test_a_transitive_conflict_names_both_sides_and_no_network(tmp_path, isolated_pip):
    # GIVEN a custom package that needs an older jmespath than the runtime's lock pins
    local_index(isolated_pip, tmp_path, ("legacy", "1.0", ("jmespath<1",)))
    extra = write(tmp_path / "requirements.txt", "legacy==1.0\n")
    # WHEN resolved at synth THEN pip's conflict comes back with each side and its version
    with pytest.raises(RequirementsConflictError) as error:
        resolve_locks([*REQS, extra], X86, resolve_at_synth)
    message = str(error.value)
    assert "cannot be resolved together with the locked requirements" in message
    assert (
        "jmespath: legacy 1.0 depends on jmespath<1, but "
        f"{display_path(lock_path(REQS[0], X86))} pins {JMESPATH.version}"
    ) in message
    assert "network" not in message and not (tmp_path / "resolutions").exists()


def test_an_unreachable_index_at_synth_resolution_says_so(tmp_path, isolated_pip):
    # GIVEN the case: an index nothing listens on, and an empty cache
    unreachable_index(isolated_pip)
    extra = write(tmp_path / "requirements.txt", "six==1.16.0\n")
    # WHEN the custom file is resolved THEN the error says the index could not be reached
    with pytest.raises(PackageIndexUnreachableError) as error:
        resolve_locks([*REQS, extra], X86, resolve_at_synth)
    message = str(error.value)
    assert "could not reach http://127.0.0.1:9/simple/six/" in message
    assert "needs network access to a package index" in message
    assert f"python -m constructs_lib.lock_requirements {extra}" in message


def test_a_dependency_only_the_target_needs_is_refused_with_the_lock_command(
    tmp_path, isolated_pip
):
    # GIVEN a package whose dependency applies on arm64 only (this machine is not arm64)
    local_index(
        isolated_pip, tmp_path,
        ("tinypkg", "1.0", ("armhelper; platform_machine == 'aarch64'",)),
        ("armhelper", "1.0", ()),
    )  # fmt: skip
    extra = write(tmp_path / "requirements.txt", "tinypkg\n")
    # WHEN resolved for arm64 THEN pip's pick (this machine's markers) is not trusted
    with pytest.raises(RequirementsNotLockedError) as error:
        resolve_locks([*REQS, extra], ARM, resolve_at_synth)
    assert "left out what CPython 3.13 on manylinux2014_aarch64 needs: armhelper" in str(
        error.value
    )
    assert f"python -m constructs_lib.lock_requirements {extra}" in str(error.value)
    # AND for x86_64 the dependency is rightly absent
    assert "armhelper" not in resolve_locks([*REQS, extra], X86, resolve_at_synth).by_name()


def test_this_librarys_own_files_are_never_resolved_at_synth(tmp_path, monkeypatch):
    # GIVEN a library file whose lock is stale (its locks ship in the wheel; a stale one is
    # a packaging bug, never something to paper over at synth)
    reqs = copy_lock(tmp_path)
    reqs.write_text(reqs.read_text() + "six==1.17.0\n")
    monkeypatch.setattr("constructs_lib.bundling.dependency_lock.lambda_src_root", lambda: tmp_path)

    def never(path, constraints):
        raise AssertionError("resolved")

    with pytest.raises(RequirementsNotLockedError, match="changed since"):
        resolve_locks([reqs], X86, never)


def test_resolution_failures_are_told_apart_by_pips_log(tmp_path):
    # pip 23-25 wording with --quiet: the causes are only in the --log file, timestamped
    extra = write(tmp_path / "requirements.txt", "requests==2.25.1\ntorch\n")
    log = (
        "2026-12-01T12:40:46,721 ERROR: Cannot install -r requirements.txt (line 1) because "
        "these package versions have conflicting dependencies.\n"
        "2026-12-01T12:40:46,721 \n2026-12-01T12:40:46,721 The conflict is caused by:\n"
        "2026-12-01T12:40:46,721     requests 2.25.1 depends on idna<3 and >=2.5\n"
        "2026-12-01T12:40:46,721     The user requested (constraint) idna==3.20\n"
        "2026-12-01T12:40:46,721     The user requested torch\n"
        "2026-12-01T12:40:46,721     The user requested (constraint) torch<=2.14.1\n"
        "2026-12-01T12:40:46,721 \n"
        "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/\n"
    )
    idna = LOCK.by_name()["idna"]
    error = explain_resolution_failure("ERROR: ResolutionImpossible\n", log, extra, LOCK)
    assert isinstance(error, RequirementsConflictError)
    message = str(error)
    assert (
        f"idna: requests 2.25.1 depends on idna<3 and >=2.5, but {display_path(idna.source)} "
        f"pins {idna.version}"
    ) in message
    assert (
        f"torch: {extra} (line 2) asks torch, but a constraint of your pip configuration "
        "(PIP_CONSTRAINT, pip.conf) asks torch<=2.14.1"
    ) in message
    assert "network" not in message
    # AND a lookup that found nothing on a reachable index is no network problem either
    missing = explain_resolution_failure(
        "ERROR: No matching distribution found for six==9\n", "", extra, LOCK
    )
    assert "network" not in str(missing) and "six==9" in str(missing)


def probe_package(tmp_path: Path) -> Path:
    return write(tmp_path / "src" / "my_step" / "handler.py", "import six\n").parent


def synth_probe(
    outdir: Path, package: Path, requirements: list[Path], context: dict
) -> tuple[cdk.Stack, dict]:
    context = {"aws:cdk:enable-asset-metadata": True, **context}
    app = unvalidated_app(context=context, outdir=str(outdir))
    stack = cdk.Stack(app, "ResolveProbe")
    python_function(stack, "Fn", packages=[package], handler="my_step.handler.handler",
                    requirements=requirements, description="probe", environment={})  # fmt: skip
    template = app.synth().get_stack_artifact("ResolveProbe").template
    (function,) = [
        r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"
    ]
    return stack, function


def unlocked_warnings(stack: cdk.Stack) -> list[str]:
    found = assertions.Annotations.from_stack(stack).find_warning(
        "*", assertions.Match.string_like_regexp(UNLOCKED_REQUIREMENTS_WARNING)
    )
    return [str(warning.entry.data) for warning in found]


@pytest.mark.bundling
def test_an_unlocked_extra_synthesizes_ships_and_resynthesizes_offline(tmp_path, isolated_pip):
    # GIVEN a function on the splitter's lock (Powertools) plus an unlocked extra from PyPI
    package = probe_package(tmp_path)
    splitter = lambda_src_root() / "prospect_splitter" / "requirements.txt"
    extra = write(tmp_path / "src" / "requirements.txt", "six==1.16.0\n")
    out = tmp_path / "cdk.out"
    # WHEN synthesized with bundling
    stack, function = synth_probe(out, package, [splitter, extra], {})
    # THEN the asset ships six beside the locked packages and the handler
    asset = out / function["Metadata"]["aws:asset:path"]
    assert (asset / "six.py").is_file() and (asset / "six-1.16.0.dist-info").is_dir()
    assert (asset / "aws_lambda_powertools").is_dir() and (
        asset / "my_step" / "handler.py"
    ).is_file()
    # AND synth warns that the file was resolved, naming the command that locks it
    (warning,) = unlocked_warnings(stack)
    assert f"{extra} has no lock requirements-x86_64.lock" in warning
    assert "synth resolved it with pip" in warning
    assert f"python -m constructs_lib.lock_requirements {extra}" in warning
    # WHEN synthesized again with no index to be reached
    unreachable_index(isolated_pip)
    _, again = synth_probe(out, package, [splitter, extra], {})
    # THEN the cached resolution gives the same asset key, and the staged asset is reused
    assert again["Properties"]["Code"]["S3Key"] == function["Properties"]["Code"]["S3Key"]


@pytest.mark.bundling
def test_a_conflict_found_by_pips_resolver_fails_synth_without_the_network_hint(
    tmp_path, isolated_pip
):
    # GIVEN a custom handler whose requirement needs an idna the runtime's lock does not pin
    from constructs_lib import IdempotentModelStep

    package = write(tmp_path / "my_step" / "__init__.py", "").parent
    extra = write(package / "requirements.txt", "requests==2.25.1\n")
    handler = ModelStepHandler.from_package(
        package, handler="my_step.handler.handler", requirements=extra
    )
    stack = cdk.Stack(unvalidated_app(outdir=str(tmp_path / "out")), "S")
    # WHEN the step is built, bundling THEN synth stops, naming each side and its version
    with pytest.raises(RequirementsConflictError) as error:
        IdempotentModelStep(stack, "Step", **step_props(stack, handler=handler))
    message = str(error.value)
    idna = LOCK.by_name()["idna"].version
    assert "idna: requests 2.25.1 depends on idna<3" in message
    assert f"(this library's lock) pins {idna}" in message
    assert "network" not in message


def test_a_synth_that_skips_bundling_resolves_nothing_but_warns(tmp_path, isolated_pip):
    # GIVEN an unlocked extra, no index to be reached and an empty cache
    unreachable_index(isolated_pip)
    package = probe_package(tmp_path)
    extra = write(tmp_path / "src" / "requirements.txt", "six==1.16.0\n")
    # WHEN synthesized with bundling skipped (cdk ls, unit tests) THEN no pip runs
    stack, _ = synth_probe(tmp_path / "cdk.out", package, [*REQS, extra], NO_BUNDLING)
    assert not (tmp_path / "resolutions").exists()
    # AND the warning still says the file is not locked
    (warning,) = unlocked_warnings(stack)
    assert "this synth skips bundling, so nothing was resolved" in warning
    assert f"python -m constructs_lib.lock_requirements {extra}" in warning


# --------------------------------------------------------------------------- byte identity
def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.bundling
def test_two_bundlings_with_different_pip_caches_build_byte_identical_trees(tmp_path, monkeypatch):
    # GIVEN the splitter's asset inputs (its lock: Powertools and two small packages),
    # bytecode included when this machine has a CPython 3.13
    src = lambda_src_root()
    packages = [src / "prospect_splitter", src / "upload_accounting"]
    reqs = [src / "prospect_splitter" / "requirements.txt"]
    compiler = find_bytecode_python("3.13")
    # WHEN bundled twice, each time with an empty pip cache of its own
    trees = []
    for name in ("first", "second"):
        monkeypatch.setenv("PIP_CACHE_DIR", str(tmp_path / f"cache-{name}"))
        out = tmp_path / name / "asset"
        bundling = LocalPipBundling(packages, reqs, X86.platform, compiler=compiler)
        bundling.bundle(out)
        trees.append(tree(out))
    # THEN every file's path and bytes are the same
    first, second = trees
    assert sorted(first) == sorted(second)
    assert [path for path in first if first[path] != second[path]] == []
    # AND the asset holds exactly the lock's distributions
    assert bundling.lock is not None
    dist_infos = {p.split("/")[0] for p in first if p.split("/")[0].endswith(".dist-info")}
    expected = {f"{p.name.replace('-', '_')}-{p.version}.dist-info" for p in bundling.lock.packages}
    assert dist_infos == expected
    if compiler is not None:
        assert any(path.endswith(".cpython-313.pyc") for path in first)


# --------------------------------------------------------------------------- bytecode
def pyc_flags(path: Path) -> int:
    """The PEP 552 flags word: bit 0 = hash-based, bit 1 = check the source."""
    return struct.unpack("<I", path.read_bytes()[4:8])[0]


def no_python_313_environ(tmp_path: Path) -> dict[str, str]:
    """An environment where no CPython 3.13 can be found: only Node's directory on PATH."""
    node = shutil.which("node")
    assert node, "jsii needs node on PATH"
    empty = tmp_path / "empty-home"
    empty.mkdir(exist_ok=True)
    return {
        "PATH": str(Path(node).parent),
        "HOME": str(empty),
        "PYENV_ROOT": str(empty / "pyenv"),
        "UV_PYTHON_INSTALL_DIR": str(empty / "uv"),
    }


@pytest.fixture(scope="module")
def python313():
    compiler = find_bytecode_python("3.13")
    if compiler is None:
        pytest.skip("no CPython 3.13 on this machine (PATH, pyenv, uv)")
    return compiler


def test_hash_differs_per_bytecode_mode(python313):
    # GIVEN one set of inputs WHEN built with .pyc, without, or not at all THEN three keys.
    hashes = {
        bundle_hash([RUNTIME], LOCK, "manylinux2014_x86_64", "3.13", mode)
        for mode in (NO_BYTECODE, python313.mode, BUNDLING_SKIPPED)
    }
    assert len(hashes) == 3


def test_finder_confirms_the_interpreter(python313):
    assert python313.version.startswith("3.13.") and python313.cache_tag == "cpython-313"
    assert python313.mode == f"pyc-unchecked-hash:CPython-{python313.version}:magic-f30d0d0a"


def test_finder_finds_nothing_without_an_interpreter(tmp_path):
    assert find_bytecode_python("3.13", no_python_313_environ(tmp_path)) is None


def test_finder_skips_a_pyenv_shim_and_reads_pyenv_root(tmp_path, python313):
    # GIVEN a PATH `python3.13` that fails (a pyenv shim of an unselected version)
    # and a pyenv root holding a real 3.13
    shims = tmp_path / "shims"
    shims.mkdir()
    shim = shims / "python3.13"
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.13: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    root = tmp_path / "pyenv"
    (root / "versions" / python313.version / "bin").mkdir(parents=True)
    os.symlink(python313.executable, root / "versions" / python313.version / "bin/python3.13")
    environ = {**no_python_313_environ(tmp_path), "PYENV_ROOT": str(root)}
    environ["PATH"] = f"{shims}{os.pathsep}{environ['PATH']}"
    # WHEN searched THEN the shim is probed, rejected, and pyenv's interpreter wins
    found = find_bytecode_python("3.13", environ)
    assert found is not None and found.executable.startswith(str(root))


def test_bundle_ships_unchecked_hash_based_pyc(tmp_path, runtime_copy, python313):
    out = tmp_path / "out"
    LocalPipBundling([runtime_copy], [], "manylinux2014_x86_64", compiler=python313).bundle(out)
    sources = sorted(out.rglob("*.py"))
    assert sources
    for source in sources:
        pyc = source.parent / "__pycache__" / f"{source.stem}.cpython-313.pyc"
        assert pyc.is_file(), source
        assert pyc_flags(pyc) == 0b01, pyc  # hash-based, source never checked


def test_a_large_tree_is_split_by_source_count_and_a_small_one_is_not(tmp_path):
    # GIVEN a tree of 1,200 sources: packages of 700, 300 and 199, and a top-level module
    from constructs_lib.bundling.bytecode import _compile_groups

    for package, files in (("big", 700), ("mid", 300), ("small", 199)):
        for n in range(files):
            (tmp_path / package / f"m{n // 100}").mkdir(parents=True, exist_ok=True)
            (tmp_path / package / f"m{n // 100}" / f"f{n}.py").write_text("")
    (tmp_path / "handler.py").write_text("")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "README.txt").write_text("")
    # WHEN grouped for 2 and for 8 CPUs THEN 2 groups (1,200 // 500), by source count,
    # largest first to the emptiest, with no __pycache__ and no non-source file
    two = _compile_groups([tmp_path], 2)
    assert two == [
        [tmp_path / "big"],
        [tmp_path / "mid", tmp_path / "small", tmp_path / "handler.py"],
    ]
    assert _compile_groups([tmp_path], 8) == two
    # AND one CPU, or a tree under 1,000 sources, is one process with the targets as given
    assert _compile_groups([tmp_path], 1) == [[tmp_path]]
    assert _compile_groups([tmp_path / "mid", tmp_path / "small"], 2) == [
        [tmp_path / "mid", tmp_path / "small"]
    ]


def test_a_split_compile_writes_the_bytes_one_compileall_writes(tmp_path, python313, monkeypatch):
    # GIVEN every package of lambda_src/, copied twice
    from constructs_lib.bundling import bytecode

    packages = sorted(p for p in lambda_src_root().iterdir() if (p / "__init__.py").is_file())
    trees = {name: tmp_path / name for name in ("one", "split")}
    for tree in trees.values():
        for package in packages:
            ignore = shutil.ignore_patterns("__pycache__", "tests")
            shutil.copytree(package, tree / package.name, ignore=ignore)
    # WHEN one is compiled by a single compileall and the other split over 3 processes
    python313.compile(trees["one"])
    monkeypatch.setattr(bytecode, "FILES_PER_PROCESS", 10)
    monkeypatch.setattr(bytecode, "_usable_cpus", lambda: 3)
    assert len(bytecode._compile_groups([trees["split"]], 3)) == 3
    python313.compile(trees["split"])
    # THEN every source has its .pyc, byte for byte the same (named under /var/task)
    one = {p.relative_to(trees["one"]): p.read_bytes() for p in trees["one"].rglob("*.pyc")}
    assert len(one) == sum(1 for _ in trees["one"].rglob("*.py")) > 30
    split = {p.relative_to(trees["split"]): p.read_bytes() for p in trees["split"].rglob("*.pyc")}
    assert split == one


# --------------------------------------------------------------------------- synth
def synth_function(tmp_path: Path, package: Path, context: dict) -> tuple[cdk.Stack, dict]:
    # Asset metadata (aws:asset:path) is what the CLI asks for too.
    context = {"aws:cdk:enable-asset-metadata": True, **context}
    app = unvalidated_app(context=context, outdir=str(tmp_path / "cdk.out"))
    stack = cdk.Stack(app, "BundlingProbe")
    python_function(
        stack,
        "Fn",
        packages=[package],
        handler="model_step.handler.handler",
        description="bundling probe",
        environment={},
    )
    assembly = app.synth()
    template = assembly.get_stack_artifact("BundlingProbe").template
    (function,) = [
        r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"
    ]
    return stack, function


def test_skipped_bundling_never_shares_the_bundled_hash(tmp_path, runtime_copy):
    # GIVEN the same function synthesized with bundling and with bundling skipped
    _, bundled = synth_function(tmp_path / "bundled", runtime_copy, {})
    _, skipped = synth_function(tmp_path / "skipped", runtime_copy, NO_BUNDLING)
    # THEN the skipped synth points at the raw source under a key of its own
    assert bundled["Properties"]["Code"]["S3Key"] != skipped["Properties"]["Code"]["S3Key"]
    assert Path(skipped["Metadata"]["aws:asset:path"]).resolve() == runtime_copy.parent


def test_no_interpreter_warns_and_bundles_without_bytecode(tmp_path, runtime_copy, monkeypatch):
    # GIVEN a machine with no CPython 3.13 to be found
    for key in ("PATH", "HOME", "PYENV_ROOT", "UV_PYTHON_INSTALL_DIR", "XDG_DATA_HOME"):
        monkeypatch.delenv(key, raising=False)
    for key, value in no_python_313_environ(tmp_path).items():
        monkeypatch.setenv(key, value)
    # WHEN the function is bundled
    stack, function = synth_function(tmp_path, runtime_copy, {})
    # THEN synth warns, naming how to get one, and the asset has no bytecode
    warnings = assertions.Annotations.from_stack(stack).find_warning(
        "*", assertions.Match.string_like_regexp("No CPython 3.13 found")
    )
    assert len(warnings) == 1
    assert "uv python install 3.13" in warnings[0].entry.data
    assert NO_BYTECODE_WARNING in warnings[0].entry.data
    asset = tmp_path / "cdk.out" / function["Metadata"]["aws:asset:path"]
    assert (asset / "model_step" / "handler.py").is_file()
    assert not list(asset.rglob("*.pyc"))


def test_finder_reads_uv_managed_pythons(tmp_path, python313):
    # GIVEN only a uv-managed 3.13 (uv's layout: cpython-<version>-<platform>/bin/python3.13)
    uv = tmp_path / "uv-python"
    bin_dir = uv / f"cpython-{python313.version}-linux-x86_64-gnu" / "bin"
    bin_dir.mkdir(parents=True)
    os.symlink(python313.executable, bin_dir / "python3.13")
    environ = {**no_python_313_environ(tmp_path), "UV_PYTHON_INSTALL_DIR": str(uv)}
    # WHEN searched THEN it is found there
    found = find_bytecode_python("3.13", environ)
    assert found is not None and found.executable == str(bin_dir / "python3.13")


def test_make_lock_relocks_every_shipped_lock_extras_after_the_runtime():
    # Every requirements file that ships a lock is re-locked by `make lock`, and an extra
    # (the tracing SDK) only after the runtime's lock it is resolved within.
    from constructs_lib.bundling.lock_requirements import library_requirement_files

    files, extras = library_requirement_files()
    assert files[0] == RUNTIME / "requirements.txt"
    shipped = {
        path.parent / path.name.replace(f"-{machine}.lock", ".txt")
        for machine in ("x86_64", "aarch64")
        for path in lambda_src_root().glob(f"*/requirements*-{machine}.lock")
    }
    assert shipped == {*files, *extras}
