"""The fakes, re-exported from where they ship: ``constructs_lib.testing``."""

from constructs_lib.testing.bedrock_api import BedrockRequest, FakeBedrockRuntime
from constructs_lib.testing.messages_api import FakeMessagesAPI, RecordedRequest, Reply

__all__ = ["BedrockRequest", "FakeBedrockRuntime", "FakeMessagesAPI", "RecordedRequest", "Reply"]
