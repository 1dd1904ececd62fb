"""Stdlib-only fakes of the external services the Lambda code talks to over HTTP."""

from .messages_api import FakeMessagesAPI, RecordedRequest, Reply

__all__ = ["FakeMessagesAPI", "RecordedRequest", "Reply"]
