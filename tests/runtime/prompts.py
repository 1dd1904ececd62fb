"""Where the runtime tests ship their system prompts (standard library and ``model_step``
only, so a unit test can use it without moto).

The prompt ships with the code, named by its sha256 (``model_step.system_prompt``): the
runtime tests ship theirs in one directory on ``sys.path``, as the asset root is in Lambda.
"""

from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
from pathlib import Path

PROMPT_ROOT = Path(tempfile.mkdtemp(prefix="runtime-test-prompts-"))
# Removed when the process exits: every test process that imported this made one, and they
# were left in the temporary directory.
atexit.register(shutil.rmtree, PROMPT_ROOT, ignore_errors=True)
sys.path.append(str(PROMPT_ROOT))


def shipped(text: str) -> str:
    """Ship ``text`` as a step's system prompt; its sha256, for ``SYSTEM_PROMPT_SHA256``."""
    from model_step.system_prompt import write_prompt

    return write_prompt(PROMPT_ROOT, text)
