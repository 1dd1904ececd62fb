"""The Prospect Uploader: the reference pipeline built from the library's constructs.

``ProspectUploaderStack`` is imported on first use, so the ``prospect-uploader``
CLI starts without aws-cdk-lib and jsii.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["ProspectUploaderStack"]

if TYPE_CHECKING:
    from .stack import ProspectUploaderStack


def __getattr__(name: str) -> Any:
    if name == "ProspectUploaderStack":
        from .stack import ProspectUploaderStack

        return ProspectUploaderStack
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
