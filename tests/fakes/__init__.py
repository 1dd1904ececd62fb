"""The fake Messages API, re-exported from where it ships: ``constructs_lib.testing``."""

from constructs_lib.testing.messages_api import FakeMessagesAPI, RecordedRequest, Reply

__all__ = ["FakeMessagesAPI", "RecordedRequest", "Reply"]
