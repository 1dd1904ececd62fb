"""The system prompt, read from the function's code by its sha256 (stdlib only).

The prompt can be up to 200,000 bytes, far more than Lambda's 4 KB of environment, so the
construct ships it with the code as ``model_step_prompt/<sha256>.txt`` at the code's root and
sets only ``SYSTEM_PROMPT_SHA256``. The runtime looks for that file on ``sys.path`` (the
code's root, ``/var/task``, is on it in Lambda; a local run or a test puts its own directory
there) and checks the text against the hash, so a stale or edited file never answers under
another prompt's key.

Example::

    text = load_system_prompt("9f86d08...")
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterable
from pathlib import Path

from . import environment as env_names
from .errors import ConfigurationError

#: The directory, at the root of the function's code, that holds the prompt as
#: ``<sha256>.txt``; ``constructs_lib.system_prompt_asset`` ships it under the same name
#: (``tests/infra/test_system_prompt.py`` holds the two together).
SYSTEM_PROMPT_DIRECTORY = "model_step_prompt"


def prompt_sha256(text: str) -> str:
    """The hex sha256 of ``text`` encoded as UTF-8: the value of ``SYSTEM_PROMPT_SHA256``."""
    return hashlib.sha256(text.encode()).hexdigest()


def prompt_path(root: Path, sha256: str) -> Path:
    """Where the prompt with ``sha256`` lives under a code root ``root``."""
    return root / SYSTEM_PROMPT_DIRECTORY / f"{sha256}.txt"


def write_prompt(root: Path, text: str) -> str:
    """Write ``text`` where :func:`load_system_prompt` finds it under ``root``; its sha256."""
    sha256 = prompt_sha256(text)
    path = prompt_path(root, sha256)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode())
    return sha256


def load_system_prompt(sha256: str, search: Iterable[str] | None = None) -> str:
    """The prompt whose hash is ``sha256``, from the first directory of ``search`` (default
    ``sys.path``) that holds it. Raises ``ConfigurationError`` when none does, or when the
    file's text does not hash to ``sha256``."""
    wanted = sha256.strip().lower()
    for entry in sys.path if search is None else search:
        path = prompt_path(Path(entry or "."), wanted)
        if not path.is_file():
            continue
        text = path.read_bytes().decode()
        if prompt_sha256(text) != wanted:
            raise ConfigurationError(
                f"{path} does not hash to {env_names.SYSTEM_PROMPT_SHA256}={wanted}: the "
                "function's code and its environment come from different synths"
            )
        return text
    raise ConfigurationError(
        f"no system prompt {SYSTEM_PROMPT_DIRECTORY}/{wanted}.txt on sys.path: the "
        "construct ships it with the function's code (a local run or test writes it with "
        "model_step.system_prompt.write_prompt)"
    )
