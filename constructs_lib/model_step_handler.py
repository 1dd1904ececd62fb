"""Which code an :class:`~constructs_lib.IdempotentModelStep` function runs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ._paths import lambda_src_root
from ._validation import PropValidationError

_HANDLER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")


class ModelStepHandler:
    """The handler code for a model step: the library's runtime, or yours in front of it.

    The default runs ``model_step.handler.handler`` from the library's
    ``lambda_src/model_step``. A custom handler is a Python package of yours that
    imports :class:`model_step.ModelStep` and adds prompt building or answer
    parsing; the library's runtime is bundled beside it, so the idempotent call,
    retry classification and dead-lettering are not copied into your code::

        step = IdempotentModelStep(
            self, "Classify",
            ...,
            handler=ModelStepHandler.from_package(
                "lambda_src/prospect_classifier",
                handler="prospect_classifier.handler.handler",
            ),
        )
    """

    def __init__(self, packages: list[Path], handler: str, requirements: list[Path]) -> None:
        self.packages = packages
        self.handler = handler
        self.requirements = requirements

    @staticmethod
    def _runtime() -> Path:
        return lambda_src_root() / "model_step"

    @classmethod
    def default(cls) -> ModelStepHandler:
        """The library's own handler: the user message is the event's ``detail`` as JSON."""
        runtime = cls._runtime()
        return cls([runtime], "model_step.handler.handler", [runtime / "requirements.txt"])

    @classmethod
    def from_package(
        cls,
        path: str | Path,
        *,
        handler: str,
        requirements: str | Path | None = None,
        extra_packages: Sequence[str | Path] = (),
    ) -> ModelStepHandler:
        """A package of yours that builds on ``model_step``.

        :param path: the package directory; it is copied to the asset root under its own name.
        :param handler: ``"<package>.<module>.<function>"``, inside that package.
        :param requirements: your extra requirements file. Default: None, nothing beyond
            the runtime's lock (anthropic, aws-lambda-powertools and their dependencies).
            Bundling installs it through its hash-pinned locks beside it
            (``requirements-x86_64.lock``, ``requirements-aarch64.lock``), which
            ``python -m constructs_lib.lock_requirements <file>`` writes, resolved with
            the runtime's lock as constraints; or the file is itself a complete lock
            (every package ``==`` with ``--hash``). Without a current lock, synth resolves
            it with pip against the runtime's lock (cached; the asset hash covers the
            result) and warns that another machine or day may resolve differently. A
            package at another version than the runtime's lock fails synth with both
            versions named.
        :param extra_packages: more package directories your handler imports (a shared
            library of yours, say), each copied to the asset root under its own name beside
            yours. Default: none.
        """
        package = _package_directory("path", path)
        extras = [_package_directory("extra_packages", extra) for extra in extra_packages]
        names = [package.name, *(extra.name for extra in extras)]
        if len(set(names)) != len(names):
            raise PropValidationError(
                f"ModelStepHandler: path and extra_packages must be packages with distinct "
                f"names (each is copied to the asset root under its name), got {names!r}"
            )
        if not _HANDLER_RE.match(handler) or not handler.startswith(f"{package.name}."):
            raise PropValidationError(
                f"ModelStepHandler: handler must be '<module path>.<function>' inside "
                f"package {package.name!r} (e.g. '{package.name}.handler.handler'), "
                f"got {handler!r}"
            )
        if "model_step" in names:
            raise PropValidationError(
                "ModelStepHandler: the package name 'model_step' is the library's runtime; "
                "name your package differently"
            )
        runtime = cls._runtime()
        reqs = [runtime / "requirements.txt"]
        if requirements is not None:
            extra = Path(requirements).resolve()
            if not extra.is_file():
                raise PropValidationError(
                    f"ModelStepHandler: requirements must be an existing requirements file, "
                    f"got {str(requirements)!r} ({extra} "
                    f"{'is a directory' if extra.is_dir() else 'does not exist'}); "
                    "leave it out (default None) when the handler needs nothing beyond the "
                    "runtime's packages"
                )
            reqs.append(extra)
        return cls([package, *extras, runtime], handler, reqs)


def _package_directory(prop: str, path: str | Path) -> Path:
    """``path`` resolved, if it is a Python package directory (it has an ``__init__.py``)."""
    package = Path(path).resolve()
    if not (package / "__init__.py").is_file():
        raise PropValidationError(
            f"ModelStepHandler: {prop} must be a Python package directory with an "
            f"__init__.py, got {str(path)!r}"
        )
    return package
