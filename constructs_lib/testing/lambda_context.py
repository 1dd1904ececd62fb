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

    #: The function's name (Powertools logs it). Default ``"model-step-test"``.
    function_name: str = "model-step-test"
    #: The version invoked. Default ``"$LATEST"``.
    function_version: str = "$LATEST"
    #: The function's memory. Default 512.
    memory_limit_in_mb: int = 512
    #: What :meth:`get_remaining_time_in_millis` answers. Default 30,000 (30 s).
    remaining_millis: int = 30_000
    #: The region in :attr:`invoked_function_arn`. Default ``"us-east-1"``.
    region: str = "us-east-1"
    #: The account in :attr:`invoked_function_arn`. Default ``"123456789012"``.
    account_id: str = "123456789012"
    #: A new UUID per context, as Lambda gives each invocation.
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    #: The function's log group. Default ``"/aws/lambda/model-step-test"``.
    log_group_name: str = "/aws/lambda/model-step-test"
    #: The invocation's log stream. Default a fixed stream name.
    log_stream_name: str = "2026/01/01/[$LATEST]0123456789abcdef"

    @property
    def invoked_function_arn(self) -> str:
        """``arn:aws:lambda:<region>:<account>:function:<function_name>``."""
        return f"arn:aws:lambda:{self.region}:{self.account_id}:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before the (pretend) invocation times out."""
        return self.remaining_millis
