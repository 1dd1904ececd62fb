"""One process, one ``os.environ``: the union of the functions' environments.

The handlers read their configuration from ``os.environ`` (lazily, on first invocation), and
they all run in this process, so every function sees every function's variables. That is
safe only while no two functions give one variable different values; the union refuses
such a conflict rather than letting one function silently read another's setting.

Two model steps in one template (a step that follows another's results) give the runtime's
own variables (``IDEMPOTENCY_TABLE_NAME``, ...) different values by design. Those names,
:func:`function_scoped_names`, are not in the union: :class:`FunctionEnviron` answers them
per function, from the function marked on the reading thread (:mod:`.identity`).

The one exemption is ``POWERTOOLS_SERVICE_NAME``: it differs per function by design and only
labels logs and metrics. The model-step function's value is used, because the model step is
the only handler that reads it (the splitter names its service in code).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from typing import Any

from . import identity
from .assembly import FunctionSpec
from .errors import EnvironmentConflictError
from .intrinsics import Resolver

EXEMPT_VARIABLES = frozenset({"POWERTOOLS_SERVICE_NAME"})
# Variables that would send boto3 past moto or to a real account; removed for the run.
UNSAFE_VARIABLES = (
    "AWS_ENDPOINT_URL",
    "AWS_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
)


def function_scoped_names(functions: Sequence[FunctionSpec]) -> frozenset[str]:
    """The names a model step's runtime reads that two model steps may set differently:
    every name set by the construct (``model_step/environment.py``), when the template has
    more than one model step. Empty with one (the union then holds them all)."""
    from .._runtime_environment import runtime_environment as runtime_env

    if sum(spec.is_model_step for spec in functions) < 2:
        return frozenset()
    return frozenset(v.name for v in runtime_env.VARIABLES if v.origin == "construct")


def function_environments(
    functions: Sequence[FunctionSpec], resolver: Resolver, names: frozenset[str]
) -> dict[str, dict[str, str]]:
    """By logical id, each function's resolved values of ``names``."""
    return {
        spec.logical_id: {
            name: str(value)
            for name, value in resolver.resolve(
                dict(spec.environment), f"{spec.logical_id}.Environment"
            ).items()
            if name in names
        }
        for spec in functions
    }


class FunctionEnviron(MutableMapping[str, str]):
    """``os.environ`` for a run: the function-scoped ``names`` come from the environment of
    the function running on the reading thread (absent on an unmarked thread); every other
    name is the process's. Writes go to the process's environment."""

    def __init__(
        self, base: MutableMapping[str, str], per_function: Mapping[str, Mapping[str, str]]
    ) -> None:
        self._base = base
        self._per_function = per_function
        self._names = frozenset(name for env in per_function.values() for name in env)

    def _own(self) -> Mapping[str, str]:
        function = identity.current()
        return self._per_function.get(function, {}) if function is not None else {}

    def __getitem__(self, name: str) -> str:
        if name in self._names:
            return self._own()[name]
        return self._base[name]

    def __setitem__(self, name: str, value: str) -> None:
        self._base[name] = value

    def __delitem__(self, name: str) -> None:
        del self._base[name]

    def __iter__(self) -> Iterator[str]:
        own = self._own()
        yield from (name for name in self._base if name not in self._names)
        yield from own

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def copy(self) -> dict[str, str]:
        return dict(self)

    def __getattr__(self, name: str) -> Any:
        # os._Environ's own helpers (encodekey, ...), for code that reaches for them.
        return getattr(self._base, name)


@contextmanager
def function_scoped_environ(per_function: Mapping[str, Mapping[str, str]]) -> Iterator[None]:
    """Install :class:`FunctionEnviron` as ``os.environ`` while open (nothing to do when no
    name is function-scoped)."""
    if not any(per_function.values()):
        yield
        return
    original = os.environ
    # Rebinding (not clearing) is the point: reads go through the per-function view.
    os.environ = FunctionEnviron(original, per_function)  # type: ignore[assignment]  # noqa: B003
    try:
        yield
    finally:
        os.environ = original  # noqa: B003


def environment_union(
    functions: Sequence[FunctionSpec],
    resolver: Resolver,
    function_scoped: frozenset[str] = frozenset(),
) -> dict[str, str]:
    """Resolved variables of every function, merged (``function_scoped`` names left out).

    Raises :class:`EnvironmentConflictError` listing each variable two functions set to
    different values (``POWERTOOLS_SERVICE_NAME`` excepted; see the module docstring).
    """
    merged: dict[str, str] = {}
    owners: dict[str, str] = {}
    conflicts: list[str] = []
    # The model step first, so its value of an exempt variable is the one kept.
    ordered = sorted(functions, key=lambda spec: not spec.is_model_step)
    for spec in ordered:
        variables = resolver.resolve(dict(spec.environment), f"{spec.logical_id}.Environment")
        for name, value in variables.items():
            value = str(value)
            if name in function_scoped:
                continue
            if name not in merged:
                merged[name], owners[name] = value, spec.display_name
            elif merged[name] != value and name not in EXEMPT_VARIABLES:
                conflicts.append(
                    f"{name} ({owners[name]}={merged[name]!r}, {spec.display_name}={value!r})"
                )
    if conflicts:
        raise EnvironmentConflictError(
            "functions set these environment variables to different values, and a local run "
            "shares one os.environ: " + "; ".join(conflicts)
        )
    return merged


@contextmanager
def patched_environ(values: Mapping[str, str], remove: Sequence[str] = ()) -> Iterator[None]:
    """Set ``values`` and delete ``remove`` in ``os.environ``; restore both on exit."""
    saved = {name: os.environ.get(name) for name in [*values, *remove]}
    try:
        for name in remove:
            os.environ.pop(name, None)
        os.environ.update(values)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
