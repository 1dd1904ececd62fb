"""Exceptions of a local run. A CLI maps each class to an exit code and a one-line message."""

from __future__ import annotations


class LocalRunError(Exception):
    """Base class: every error the local run reports to the user without a traceback."""

    exit_code = 1


class UsageError(LocalRunError):
    """The command line or its inputs are wrong (exit code 2)."""

    exit_code = 2


class InputFileError(UsageError):
    """FILE is missing, not a regular file, or unreadable."""


class AssemblyNotFoundError(UsageError):
    """There is no synthesized cloud assembly where ``--cdk-out`` points."""


class AssemblyError(UsageError):
    """The cloud assembly lacks something the local run needs, or uses a feature it does not
    emulate (an intrinsic, a pattern operator, a destination type)."""


class EnvironmentConflictError(UsageError):
    """Two functions set one environment variable to different values; one process has one
    ``os.environ``, so the local run cannot give each function its own."""


class NoMatchingRuleError(UsageError):
    """The first event matched no rule with a Lambda target (e.g. a key without ``.csv``)."""


class ModelUnavailableError(UsageError):
    """``--model anthropic`` was asked for without ``ANTHROPIC_API_KEY``."""


class EmulatorError(LocalRunError):
    """A bug or an unexpected failure in the emulation itself (not in a handler)."""


class RunTimeoutError(LocalRunError):
    """The pipeline did not settle within the run's time limit. ``result``: what the run saw
    until then (its counts and denied calls), when the caller could read it; else None."""

    result: object | None = None
