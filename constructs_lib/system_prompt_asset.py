"""Shipping a model step's system prompt with its code, never in its environment.

Lambda allows 4 KB of environment in all, and a real prompt (a rubric with worked examples)
is thousands of tokens. The construct writes the prompt as
``model_step_prompt/<sha256>.txt`` into a directory of the cloud assembly
(``<outdir>/model-step-prompts/<sha256>/``), bundles that ``model_step_prompt`` directory
into the function's code beside the runtime (so the asset hash covers the text), and sets
only ``SYSTEM_PROMPT_SHA256``; ``model_step.system_prompt`` reads the file back and checks
the hash.

Why the code and not S3 or SSM: the prompt is part of what the function is, deployed and
rolled back with it; a cold start reads a local file instead of making a network call; and
no other resource or permission is needed. A local run finds the same files through
:func:`prompt_search_paths` of the assembly.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

#: The largest system prompt a step takes, in UTF-8 bytes: about 50,000 tokens, far past
#: every model's minimum cacheable length, well inside every model's context window.
SYSTEM_PROMPT_MAX_BYTES = 200_000

if TYPE_CHECKING:
    from constructs import Construct

#: The directory, at the root of the function's code, that holds the prompt as
#: ``<sha256>.txt``: ``model_step.system_prompt.SYSTEM_PROMPT_DIRECTORY``, where the runtime
#: reads it (``tests/infra/test_system_prompt.py`` holds the two together).
SYSTEM_PROMPT_DIRECTORY = "model_step_prompt"

#: The directory of the cloud assembly that holds every step's prompt, one subdirectory
#: per sha256.
PROMPTS_DIRECTORY = "model-step-prompts"


def prompt_sha256(text: str) -> str:
    """The hex sha256 of ``text`` as UTF-8 (``SYSTEM_PROMPT_SHA256``)."""
    return hashlib.sha256(text.encode()).hexdigest()


def prompt_package(scope: Construct, text: str) -> Path:
    """Write ``text`` into the assembly of ``scope``'s stage; the ``model_step_prompt``
    directory to bundle (it holds only this prompt, so its content decides the asset hash)."""
    # Imported here: tests and local runs use this module without a CDK app.
    from aws_cdk import Stage

    sha256 = prompt_sha256(text)
    stage = Stage.of(scope)
    if stage is None:  # pragma: no cover - every construct in an app has a stage
        raise ValueError(f"{scope.node.path} is not inside an App or Stage")
    root = Path(str(stage.outdir)) / PROMPTS_DIRECTORY / sha256
    directory = root / SYSTEM_PROMPT_DIRECTORY
    path = directory / f"{sha256}.txt"
    if not path.is_file() or path.read_bytes() != text.encode():
        directory.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode())
    return directory


def prompt_search_paths(cdk_out: Path) -> list[Path]:
    """The code roots under which the runtime finds every prompt of an assembly."""
    base = cdk_out / PROMPTS_DIRECTORY
    return sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []


def ship_prompt(root: Path, text: str) -> str:
    """Write ``text`` as a code root ``root`` would ship it; its sha256."""
    sha256 = prompt_sha256(text)
    directory = root / SYSTEM_PROMPT_DIRECTORY
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{sha256}.txt").write_bytes(text.encode())
    return sha256


@contextmanager
def prompt_roots_on_path(roots: Sequence[Path]) -> Iterator[None]:
    """Put ``roots`` on ``sys.path`` (where the runtime looks for its prompt) until exit."""
    added = [str(root) for root in roots if str(root) not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for root in added:
            if root in sys.path:
                sys.path.remove(root)


@contextmanager
def system_prompt_on_path(text: str) -> Iterator[str]:
    """Write ``text`` as a shipped prompt in a temporary code root on ``sys.path``, for a test
    or a local run of the runtime without a synth; yields its sha256 (set it as
    ``SYSTEM_PROMPT_SHA256``)."""
    with tempfile.TemporaryDirectory(prefix="model-step-prompt-") as work:
        sha256 = ship_prompt(Path(work), text)
        with prompt_roots_on_path([Path(work)]):
            yield sha256
