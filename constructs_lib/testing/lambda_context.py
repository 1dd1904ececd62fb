"""The Lambda context object a handler is called with, for tests."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

__all__ = ["FakeLambdaContext"]


@dataclass
class FakeLambdaContext:
    """What Lambda passes as ``context``: the attributes Powertools and the runtime read.

    ``remaining_millis`` is what :meth:`get_remaining_time_in_millis` answers; the runtime
    keeps the model timeout below it, as on Lambda. Every context gets a new request id.
    """

    function_name: str = "model-step-test"
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 512
    remaining_millis: int = 30_000
    region: str = "us-east-1"
    account_id: str = "123456789012"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = "/aws/lambda/model-step-test"
    log_stream_name: str = "2026/01/01/[$LATEST]0123456789abcdef"

    @property
    def invoked_function_arn(self) -> str:
        """``arn:aws:lambda:<region>:<account>:function:<function_name>``."""
        return f"arn:aws:lambda:{self.region}:{self.account_id}:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before the (pretend) invocation times out."""
        return self.remaining_millis
