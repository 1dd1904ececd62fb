"""What a user of the library needs to test a stack or a custom handler, shipped in the wheel.

- :func:`normalize_template`: a synthesized template with what varies between machines and
  runs masked (asset hashes and S3 keys, published-version hashes, asset metadata), for
  snapshot tests with syrupy or any other tool. Standard library only.
- :func:`runtime_on_path`: makes ``import model_step`` find the runtime that ships in the
  wheel (the code bundled beside a custom handler). Standard library only.
- :class:`FakeMessagesAPI` (with :class:`Reply` and :class:`RecordedRequest`): a scripted
  Anthropic Messages API on 127.0.0.1 that counts and records every request, and serves the
  Message Batches endpoints (create, retrieve, list, results, cancel) with scripted result
  types, a processing delay and faults around create (``api.batches``). Standard library
  only.
- :class:`FakeBedrockRuntime` (with :class:`BedrockRequest`): a scripted Amazon Bedrock
  ``bedrock-runtime`` InvokeModel for Claude on 127.0.0.1, with Bedrock's wire shape and
  errors, that checks each request's SigV4 signature. Standard library only.
- :func:`model_step_environment`: a handler's AWS side in moto (idempotency table,
  dead-letter queue, API key secret) and the environment the construct sets, pointing at a
  fake API; it loads a handler as a Lambda cold start would. Needs the ``local`` extra.
- :class:`FakeLambdaContext`: the Lambda context object a handler is called with.

Names are imported on first use (PEP 562), so importing this package imports neither
aws-cdk-lib, boto3 nor moto.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_EXPORTS = {
    "BedrockRequest": ".bedrock_api",
    "FakeBedrockRuntime": ".bedrock_api",
    "FakeLambdaContext": ".lambda_context",
    "FakeMessagesAPI": ".messages_api",
    "LocalModelStep": ".model_step_environment",
    "RecordedRequest": ".messages_api",
    "Reply": ".messages_api",
    "RuntimeImportError": ".runtime_import",
    "model_step_environment": ".model_step_environment",
    "normalize_template": ".snapshot",
    "runtime_on_path": ".runtime_import",
}

__all__ = [
    "BedrockRequest",
    "FakeBedrockRuntime",
    "FakeLambdaContext",
    "FakeMessagesAPI",
    "LocalModelStep",
    "RecordedRequest",
    "Reply",
    "RuntimeImportError",
    "model_step_environment",
    "normalize_template",
    "runtime_on_path",
]

if TYPE_CHECKING:
    from .bedrock_api import BedrockRequest, FakeBedrockRuntime
    from .lambda_context import FakeLambdaContext
    from .messages_api import FakeMessagesAPI, RecordedRequest, Reply
    from .model_step_environment import LocalModelStep, model_step_environment
    from .runtime_import import RuntimeImportError, runtime_on_path
    from .snapshot import normalize_template


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
