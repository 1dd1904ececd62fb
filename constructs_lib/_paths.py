"""Where the runtime packages live; importable without aws-cdk-lib (the local run uses it)."""

from __future__ import annotations

from pathlib import Path


def lambda_src_root() -> Path:
    """The directory that holds the runtime packages (``model_step`` and friends).

    It is installed beside ``constructs_lib`` (as the ``lambda_src`` package) and
    is the repository's ``lambda_src/`` in a checkout.
    """
    return Path(__file__).resolve().parent.parent / "lambda_src"
