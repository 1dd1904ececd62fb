"""The local model with Amazon Bedrock's wire shape: ``bedrock-runtime`` InvokeModel on 127.0.0.1.

:class:`LocalBedrockRuntime` is :class:`~.local_model.LocalMessagesAPI` (the same labels from a
hash of the row, seeded fault plans, run-clock rate limiter and prompt-cache emulation,
counted the same way) answering as Bedrock answers Claude requests:

- ``POST /model/{modelId}/invoke``, the model id (foundation model or inference profile) in
  the path; a body with ``anthropic_version`` ``bedrock-2023-05-31`` and no ``model``
  (else ``ValidationException``);
- a SigV4 signature for service ``bedrock`` in the run's region, its form, scope and date
  checked (a local run signs with moto's fake credentials, so the value is not compared);
- a model id AWS does not publish for a catalogued model (``anthropic.claude-haiku-5-5``, its
  ``us.``/``eu.``/... profiles: the model catalogue's ``bedrock_ids``) gets 400
  ``ValidationException`` "The provided model identifier is invalid.", and a request the
  model refuses (:mod:`.model_behaviour`) a 400 ``ValidationException`` with the reason;
- ``x-amzn-requestid`` on every answer; errors as Bedrock sends them: ``x-amzn-errortype``
  and ``{"message": ...}``. The fault plan's statuses become Bedrock's errors, one of each
  class chosen per row (seeded), so a run meets all ten InvokeModel errors
  (:data:`BEDROCK_FAULTS`): a 429 is ``ThrottlingException`` or
  ``ServiceQuotaExceededException`` (400), both waited out; a 529 (which Bedrock does not
  send) ``ServiceUnavailableException`` (503), waited out too; a 500
  ``InternalServerException``, ``ModelTimeoutException`` (408) or ``ModelNotReadyException``
  (429), each retried within the key's budget; a 400 ``ValidationException``,
  ``AccessDeniedException`` (403), ``ResourceNotFoundException`` (404) or
  ``ModelErrorException`` (424), each dead-lettered;
- a ``--rate-limit`` 429 is a ``ThrottlingException`` **without** ``retry-after``, as
  Bedrock's are: the step waits its own backoff (5 s x 2^waits with jitter, on the run's
  clock) instead of the server's hint;
- the answer's ``model`` is the Claude name (``claude-haiku-5-5``), as Bedrock reports it,
  which also picks the model's minimum cacheable length for the prompt-cache emulation.

Whether the calling function may invoke the model at all is the IAM check's business
(:mod:`.bedrock_iam`), evaluated on the client side as for every other AWS call.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any

from constructs_lib.bedrock_models import claude_model_name, parse_model_id
from constructs_lib.testing.bedrock_api import (
    ERROR_STATUSES,
    INVALID_MODEL_ID,
    body_problem,
    error_headers,
    published_model,
)
from constructs_lib.testing.sigv4 import SignatureError, check_signature

from .intrinsics import LOCAL_REGION
from .local_model import TIMEOUT, LocalMessagesAPI, user_text
from .loopback import send_json

#: The Bedrock errors a fault plan's status stands for (one per row, seeded): each class is
#: handled as the status it stands for (waited out, retried within the budget, dead-lettered).
BEDROCK_FAULTS: Mapping[int, tuple[str, ...]] = {
    429: ("ThrottlingException", "ServiceQuotaExceededException"),
    529: ("ServiceUnavailableException",),
    500: ("InternalServerException", "ModelTimeoutException", "ModelNotReadyException"),
    400: (
        "ValidationException",
        "AccessDeniedException",
        "ResourceNotFoundException",
        "ModelErrorException",
    ),
}


class LocalBedrockRuntime(LocalMessagesAPI):
    """The local model as ``bedrock-runtime``. Parameters: those of
    :class:`~.local_model.LocalMessagesAPI`, and ``region`` [the run's, us-east-1]: the
    region signatures must be scoped to."""

    thread_name = "local-bedrock"

    def __init__(self, *, region: str = LOCAL_REGION, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: The region every signature must be scoped to.
        self.region = region
        #: Requests refused before the model: the Bedrock error name of each.
        self.refused: list[str] = []

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        """Requests are answered by this server's state, in Bedrock's shape."""
        return _handler_class(self)

    def bedrock_error(self, status: int, request: dict[str, Any]) -> str:
        """The Bedrock error a fault plan's ``status`` is for this row (seeded by its text)."""
        names = BEDROCK_FAULTS.get(status) or ("InternalServerException",)
        digest = hashlib.sha256(user_text(request).encode("utf-8")).hexdigest()
        return random.Random(f"{self.seed}:bedrock:{status}:{digest}").choice(names)


def _handler_class(api: LocalBedrockRuntime) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            return  # The counters are the log.

        def do_POST(self) -> None:  # http.server's naming
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {name.lower(): value for name, value in self.headers.items()}
            signed = check_signature(
                "POST", self.path, headers, raw, service="bedrock", region=api.region
            )
            if isinstance(signed, SignatureError):
                self._refuse(403, signed.error_type, signed.message)
                return
            model_id = published_model(self.path)
            parsed = parse_model_id(model_id) if model_id else None
            if parsed is None:
                self._refuse(400, "ValidationException", INVALID_MODEL_ID)
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = None
            problem = body_problem(body)
            if problem is not None:
                self._refuse(400, "ValidationException", problem)
                return
            request = {**body, "model": claude_model_name(parsed)}
            refused = api.model_problem(request)
            if refused is not None:
                self._refuse(400, "ValidationException", refused[1])
                return
            throttled = api.throttle()
            if throttled is not None:
                _, request_id = throttled
                message = "Too many requests, please wait before trying again."
                self._error(429, "ThrottlingException", message, request_id)
                return
            outcome, request_id = api.decide(request)
            if outcome == TIMEOUT:
                api.hold()
                self.close_connection = True
                return
            if outcome != 200:
                error = api.bedrock_error(int(outcome), request)
                message = f"local model: injected {error}"
                self._error(ERROR_STATUSES[error], error, message, request_id)
                return
            answer = api.success_body(request, request_id)
            api.count_usage(answer["usage"])
            usage = answer["usage"]
            self._send(
                200,
                answer,
                {
                    "x-amzn-requestid": request_id,
                    "x-amzn-bedrock-input-token-count": str(usage["input_tokens"]),
                    "x-amzn-bedrock-output-token-count": str(usage["output_tokens"]),
                },
            )

        def _refuse(self, status: int, error_type: str, message: str) -> None:
            api.count_rejected(status)
            with api._lock:
                api.refused.append(error_type)
            self._error(status, error_type, message, "")

        def _error(self, status: int, error_type: str, message: str, request_id: str) -> None:
            self._send(status, {"message": message}, error_headers(error_type, request_id))

        def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str]) -> None:
            send_json(self, status, payload, headers)

    return Handler
