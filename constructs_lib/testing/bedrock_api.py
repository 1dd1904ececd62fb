"""A fake Amazon Bedrock ``bedrock-runtime`` InvokeModel for Claude, on 127.0.0.1.

It speaks Bedrock's wire shape, as the Anthropic SDK's ``AnthropicBedrock`` client meets it
(point the client at it with ``ANTHROPIC_BEDROCK_BASE_URL`` or ``base_url=``):

- ``POST /model/{modelId}/invoke``: the model id (a foundation-model id or an inference
  profile id) is in the path, never in the body;
- the body is a Messages request without ``model``, with ``anthropic_version``
  ``bedrock-2023-05-31``; anything else is a ``ValidationException``, as on Bedrock;
- the model id must be one AWS publishes for a model of the catalogue (``models``, default
  the library's: its foundation-model id or one of its profiles, e.g.
  ``anthropic.claude-haiku-5-5``, ``us.anthropic.claude-haiku-5-5``); any other is a 400
  ``ValidationException`` ("The provided model identifier is invalid."), and a request the
  model refuses (sampling parameters, prefill, thinking, effort, ``max_tokens``) a 400
  ``ValidationException`` with the reason, both recorded and answered before the script;
- a 200 of a model that thinks starts with a ``thinking`` block counted in ``max_tokens``
  and ``output_tokens``, as :class:`~.messages_api.FakeMessagesAPI`'s;
- every request must carry a SigV4 signature for service ``bedrock`` in the fake's region
  (:mod:`.sigv4`); an unsigned or mis-signed request gets Bedrock's 403 and is counted in
  :attr:`FakeBedrockRuntime.rejected`, not in :attr:`~FakeBedrockRuntime.requests`;
- every answer carries ``x-amzn-requestid``; an error carries ``x-amzn-errortype``
  (``ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/``) and a
  ``{"message": ...}`` body, the shape of every Bedrock error;
- a success body is the Messages response, with Bedrock's
  ``X-Amzn-Bedrock-Input-Token-Count`` / ``-Output-Token-Count`` /
  ``-Invocation-Latency`` headers.

Script entries (one per request, in order; once the script is used up every request gets 200),
the same as :class:`~.messages_api.FakeMessagesAPI`'s, so one test can run over both:

- ``200``: a success body whose text is the server's ``text`` (default ``"warm"``);
- any other ``int``: the Bedrock error of that status (:data:`ERROR_TYPES`: 400
  ``ValidationException``, 403 ``AccessDeniedException``, 408 ``ModelTimeoutException``,
  429 ``ThrottlingException``, 500 ``InternalServerException``, 503
  ``ServiceUnavailableException``, ...);
- a Bedrock error name, e.g. ``"ModelNotReadyException"``: that error with its status
  (:data:`ERROR_STATUSES`: all ten InvokeModel errors);
- ``"timeout"`` and ``"disconnect"``: as the Messages fake;
- :class:`~.messages_api.Reply`: full control (status, text, stop reason, body, headers,
  delay, chunks). A ``x-amzn-errortype`` in its headers names the error.

Usage::

    with FakeBedrockRuntime([429, 200], secret_keys={"testing": "testing"}) as bedrock:
        os.environ["ANTHROPIC_BEDROCK_BASE_URL"] = bedrock.base_url
        ...
        assert bedrock.request_count == 2
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import unquote

from constructs_lib.local_engine import model_behaviour

from .scripted_model import Reply, Script, ScriptedHandler, ScriptedServer, ScriptEntry
from .sigv4 import SignatureError, check_signature

#: The ``anthropic_version`` Bedrock accepts for Claude.
BEDROCK_ANTHROPIC_VERSION = "bedrock-2023-05-31"
#: The suffix Bedrock's ``x-amzn-errortype`` carries after the error name.
ERROR_TYPE_NAMESPACE = "http://internal.amazon.com/coral/com.amazon.bedrock/"
#: InvokeModel's errors and their statuses (botocore's bedrock-runtime service model).
ERROR_STATUSES = {
    "ValidationException": 400,
    "ServiceQuotaExceededException": 400,
    "AccessDeniedException": 403,
    "ResourceNotFoundException": 404,
    "ModelTimeoutException": 408,
    "ModelErrorException": 424,
    "ThrottlingException": 429,
    "ModelNotReadyException": 429,
    "InternalServerException": 500,
    "ServiceUnavailableException": 503,
}
#: The error a bare status stands for in a script.
ERROR_TYPES = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}
#: Bedrock's message for a model id it does not serve.
INVALID_MODEL_ID = "The provided model identifier is invalid."


def error_type_for(status: int) -> str:
    """The Bedrock error of a status (5xx: ``InternalServerException``, other 4xx:
    ``ValidationException``)."""
    if status in ERROR_TYPES:
        return ERROR_TYPES[status]
    return "InternalServerException" if status >= 500 else "ValidationException"


def error_headers(error_type: str, request_id: str) -> dict[str, str]:
    """The headers of a Bedrock error answer."""
    return {
        "x-amzn-requestid": request_id,
        "x-amzn-errortype": f"{error_type}:{ERROR_TYPE_NAMESPACE}",
    }


def model_id_of(path: str) -> str | None:
    """The model id of an InvokeModel path ``/model/{modelId}/invoke``, else None."""
    parts = path.split("?", 1)[0].split("/")
    if len(parts) != 4 or parts[0] or parts[1] != "model" or parts[3] != "invoke":
        return None
    return unquote(parts[2]) or None


def published_model(path: str, models: Mapping[str, Any] | None = None) -> str | None:
    """The model id of an InvokeModel path when AWS publishes it for a model of the catalogue
    (``models``; None: the library's), else None."""
    model_id = model_id_of(path)
    spec = model_behaviour.model_spec(model_id, models) if model_id else None
    return model_id if spec is not None and model_id in spec.bedrock_ids() else None


def body_problem(body: Any) -> str | None:
    """Why Bedrock would refuse a Claude InvokeModel body (its ``ValidationException``
    message), or None for a body it accepts."""
    if not isinstance(body, dict):
        return "Malformed input request: the body is not a JSON object"
    if body.get("anthropic_version") != BEDROCK_ANTHROPIC_VERSION:
        return (
            f"Malformed input request: #/anthropic_version: {body.get('anthropic_version')!r} "
            f"is not a valid version, expected {BEDROCK_ANTHROPIC_VERSION!r}"
        )
    if "model" in body:
        return "Malformed input request: extraneous key [model] is not permitted"
    if not body.get("messages") or "max_tokens" not in body:
        return "Malformed input request: #: required key [messages] or [max_tokens] not found"
    return None


@dataclass(frozen=True)
class BedrockRequest:
    """What the fake saw of one signed request."""

    #: The model id from the path: a foundation-model or inference-profile id.
    model_id: str
    #: The request's JSON body, parsed.
    body: dict[str, Any]
    #: The request's headers, names lower-cased.
    headers: dict[str, str]
    #: The access key id the request was signed with.
    access_key_id: str
    #: The ``x-amzn-requestid`` the fake answered with.
    request_id: str


class FakeBedrockRuntime(ScriptedServer[BedrockRequest]):
    """A threaded HTTP server that imitates ``bedrock-runtime`` InvokeModel for Claude.

    :param script: scripted entries or a callable ``(index, body) -> entry``, see the module
        docstring. Default None: always 200.
    :param text: answer text for 200 replies. Default ``"warm"``.
    :param delay: seconds to wait before every answer. Default 0.
    :param timeout_sleep: seconds a ``"timeout"`` entry holds the request. Default 5.
    :param region: the region signatures must be scoped to. Default ``"us-east-1"``.
    :param secret_keys: secret access key by access key id, to verify each signature's
        value. Default None: the signature's form, scope and date are checked, not its value.
    :param model: ``model`` of success bodies. Default None: the model id of the path.
    :param models: the model catalogue the fake answers as. Default None: the library's.
    """

    #: The name of the server's thread.
    thread_name = "fake-bedrock-runtime"

    def __init__(
        self,
        script: Script | None = None,
        *,
        text: str = "warm",
        delay: float = 0.0,
        timeout_sleep: float = 5.0,
        region: str = "us-east-1",
        secret_keys: Mapping[str, str] | None = None,
        model: str | None = None,
        models: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(script, text=text, delay=delay, timeout_sleep=timeout_sleep, models=models)
        #: The region every signature must be scoped to.
        self.region = region
        #: Secret access key by access key id (None: signature values are not verified).
        self.secret_keys = dict(secret_keys) if secret_keys is not None else None
        #: ``model`` of success bodies (None: the path's model id).
        self.model = model
        #: Requests refused before the script: their Bedrock error name, e.g.
        #: ``"InvalidSignatureException"``.
        self.rejected: list[str] = []

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        """Requests are answered by this server's state."""
        return _make_handler(self)

    def new_request_id(self) -> str:
        """A fresh id shaped like Bedrock's (a UUID)."""
        number = next(self._ids)
        return f"{number:08x}-fa4e-4b3d-8000-{number:012x}"

    # -- internals ---------------------------------------------------------------------------
    def _reject(self, error_type: str) -> None:
        with self._lock:
            self.rejected.append(error_type)

    def _refusal(self, model_id: str, body: Any) -> str | None:
        """Bedrock's ``ValidationException`` message for a request it refuses, or None."""
        problem = body_problem(body)
        if problem is not None:
            return problem
        if published_model(f"/model/{model_id}/invoke", self.models) is None:
            return INVALID_MODEL_ID
        return model_behaviour.request_problem(body, self.model_spec(model_id))

    def _success_body(
        self, model_id: str, body: dict[str, Any], request_id: str, reply: Reply
    ) -> dict[str, Any]:
        return {
            "id": f"msg_bdrk_{request_id.rsplit('-', 1)[-1]}",
            "type": "message",
            "role": "assistant",
            "model": self.model or model_id,
            **self.answer(self.model_spec(model_id), body, reply),
            "stop_sequence": None,
        }


def _make_handler(api: FakeBedrockRuntime) -> type[BaseHTTPRequestHandler]:
    class Handler(ScriptedHandler):
        server_state = api

        def do_POST(self) -> None:  # http.server's naming
            started = time.monotonic()
            raw = self.read_body()
            headers = {name.lower(): value for name, value in self.headers.items()}
            request_id = api.new_request_id()
            signed = check_signature(
                "POST",
                self.path,
                headers,
                raw,
                service="bedrock",
                region=api.region,
                secret_keys=api.secret_keys,
            )
            if isinstance(signed, SignatureError):
                api._reject(signed.error_type)
                self._error(403, signed.error_type, signed.message, request_id)
                return
            model_id = model_id_of(self.path)
            if model_id is None:
                api._reject("UnknownOperationException")
                self._error(404, "UnknownOperationException", "", request_id)
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = None
            record = BedrockRequest(
                model_id,
                body if isinstance(body, dict) else {},
                headers,
                signed.access_key_id,
                request_id,
            )
            index = api._record(record)
            problem = api._refusal(model_id, body)
            if problem is not None:
                self._error(400, "ValidationException", problem, request_id)
                return

            self.play(
                api._entry_for(index, record.body),
                _as_reply,
                lambda reply: _respond(api, record, started, reply),
            )

        def _error(self, status: int, error_type: str, message: str, request_id: str) -> None:
            self.write_json(status, {"message": message}, error_headers(error_type, request_id))

    return Handler


def _respond(
    api: FakeBedrockRuntime, record: BedrockRequest, started: float, reply: Reply
) -> tuple[dict[str, Any], dict[str, str]]:
    """The body and headers of ``reply`` to ``record``, in Bedrock's shape."""
    request_id = record.request_id
    if reply.status == 200:
        payload = reply.body or api._answered(
            api._success_body(record.model_id, record.body, request_id, reply)
        )
        return payload, _success_headers(payload, request_id, started, reply)
    named = reply.headers.get("x-amzn-errortype", "").split(":", 1)[0]
    error_type = named or error_type_for(reply.status)
    payload = reply.body or {"message": f"fake {reply.status} {error_type}"}
    extra = {**error_headers(error_type, request_id), **reply.headers}
    extra["x-amzn-errortype"] = f"{error_type}:{ERROR_TYPE_NAMESPACE}"
    return payload, extra


def _as_reply(entry: ScriptEntry) -> Reply:
    """A script entry as a :class:`Reply`; a Bedrock error name becomes that error."""
    if isinstance(entry, str):
        return Reply(status=ERROR_STATUSES.get(entry, 500), headers={"x-amzn-errortype": entry})
    return entry if isinstance(entry, Reply) else Reply(status=int(entry))


def _success_headers(
    payload: dict[str, Any], request_id: str, started: float, reply: Reply
) -> dict[str, str]:
    usage = payload.get("usage") or {}
    return {
        "x-amzn-requestid": request_id,
        "x-amzn-bedrock-input-token-count": str(usage.get("input_tokens", 0)),
        "x-amzn-bedrock-output-token-count": str(usage.get("output_tokens", 0)),
        "x-amzn-bedrock-invocation-latency": str(int((time.monotonic() - started) * 1000)),
        **reply.headers,
    }
