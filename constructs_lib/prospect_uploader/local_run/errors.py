"""Exceptions of the Prospect Uploader's local run: the engine's, plus a rejected upload."""

from __future__ import annotations

from constructs_lib.local_engine.errors import LocalRunError, UsageError

__all__ = ["LocalRunError", "UploadRejectedError", "UsageError"]


class UploadRejectedError(LocalRunError):
    """The splitter rejected the whole upload; ``reason`` is the recorded reason (exit 1)."""

    def __init__(self, error_code: str, reason: str) -> None:
        super().__init__(f"upload rejected ({error_code}): {reason}")
        self.error_code = error_code
        self.reason = reason
