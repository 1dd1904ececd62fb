"""Local run of the Prospect Uploader: the synthesized stack, emulated in one process.

The rules, targets, retry settings, handlers and environments come from ``cdk.out``; AWS is
moto; the real splitter, classifier, recorder and viewer handlers run in-process; the model
is a deterministic local Messages API with seeded faults (or the real API on request).

Entry points: :func:`run_pipeline` / :class:`LocalPipeline` with :class:`RunOptions`, and
:func:`check_invariants` on the :class:`RunResult`. The CLI is ``prospect-uploader run``.
"""

from .errors import LocalRunError, UploadRejectedError, UsageError
from .invariants import Check, check_invariants
from .options import RunOptions
from .pipeline import LocalPipeline, run_pipeline
from .results import RunResult

__all__ = [
    "Check",
    "LocalPipeline",
    "LocalRunError",
    "RunOptions",
    "RunResult",
    "UploadRejectedError",
    "UsageError",
    "check_invariants",
    "run_pipeline",
]
