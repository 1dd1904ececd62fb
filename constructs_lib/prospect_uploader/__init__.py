"""The Prospect Uploader: the reference pipeline built from the library's constructs."""

from .stack import ProspectUploaderStack

__all__ = ["ProspectUploaderStack"]
