"""One process, one ``os.environ``: the union of the functions' environments.

The handlers read their configuration from ``os.environ`` (lazily, on first invocation), and
they all run in this process, so every function sees every function's variables. That is
safe only while no two functions give one variable different values; the union refuses
such a conflict rather than letting one function silently read another's setting.

The one exemption is ``POWERTOOLS_SERVICE_NAME``: it differs per function by design and only
labels logs and metrics. The model-step function's value is used, because the model step is
the only handler that reads it (the splitter names its service in code).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

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


def environment_union(functions: Sequence[FunctionSpec], resolver: Resolver) -> dict[str, str]:
    """Resolved variables of every function, merged.

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
