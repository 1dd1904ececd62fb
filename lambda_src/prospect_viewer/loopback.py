"""Request checks shared by the two loopback servers in front of the viewer.

Both ``local_server`` (the viewer on this machine) and the operator's signing proxy
(``prospect-uploader viewer``) listen on 127.0.0.1 and act with the operator's AWS
credentials, so a request reaches the viewer only when:

- its target is origin-form (starts with ``/``); anything else is 400;
- its Host is this server's own loopback address (``127.0.0.1:PORT`` or
  ``localhost:PORT``); a DNS-rebinding page sends its own name and gets 421;
- its path starts with the per-start secret prefix ``/t/<token>/`` printed at start,
  so another local user (or a page guessing ports) cannot use the server; else 404;
- the rest of the path and the method are one of the viewer's routes (404 / 405);
- a present Origin is this server's own origin (403 otherwise);
- its body length is a plain decimal Content-Length within the limit: a negative,
  non-numeric, repeated or chunked length is 400, an oversized one 413. The body is
  never read for a refused request, and the connection is closed after the answer.

Stdlib only: the proxy imports this module without the Lambda's dependencies.
"""

from __future__ import annotations

import hmac
import re
import secrets
from dataclasses import dataclass
from email.message import Message
from typing import BinaryIO

from .routes import ROUTES

TOKEN_PREFIX = "/t/"
MAX_BODY_BYTES = 64 * 1024
_DIGITS = re.compile(r"[0-9]+")


def new_token() -> str:
    """A fresh per-start secret (32 URL-safe characters, 192 bits)."""
    return secrets.token_urlsafe(24)


def own_hosts(port: int) -> frozenset[str]:
    """The Host values a browser sends to this server (lower case)."""
    return frozenset({f"127.0.0.1:{port}", f"localhost:{port}"})


def own_origins(port: int) -> frozenset[str]:
    """The Origin values of pages served by this server."""
    return frozenset(f"http://{host}" for host in own_hosts(port))


@dataclass(frozen=True)
class Refusal:
    """An answer given without forwarding: ``status`` and a one-line reason."""

    status: int
    reason: str
    allow: str = ""


@dataclass(frozen=True)
class Accepted:
    """A request that may go on: the target with the token prefix removed."""

    target: str
    path: str
    body_length: int


def content_length(headers: Message) -> int | Refusal:
    """The body length, or a Refusal for a length the server must not trust.

    ``headers`` is http.server's parsed header block (repeated names are kept).
    """
    values = headers.get_all("content-length") or []
    chunked = headers.get_all("transfer-encoding") or []
    if chunked:
        return Refusal(400, "Transfer-Encoding is not accepted; send a Content-Length")
    if not values:
        return 0
    if len(values) > 1:
        return Refusal(400, "more than one Content-Length")
    raw = values[0].strip()
    if not _DIGITS.fullmatch(raw):
        return Refusal(400, "Content-Length must be a non-negative decimal number")
    # Compare lengths before int(): Python refuses to parse 4,300+ digit numbers.
    if len(raw.lstrip("0")) > len(str(MAX_BODY_BYTES)) or int(raw) > MAX_BODY_BYTES:
        return Refusal(413, f"request body over {MAX_BODY_BYTES} bytes")
    return int(raw)


def check_request(
    method: str,
    target: str,
    headers: Message,
    *,
    port: int,
    token: str,
) -> Accepted | Refusal:
    """Decide whether one incoming request may reach the viewer (see the module doc)."""
    if not target.startswith("/") or target.startswith("//"):
        return Refusal(400, "the request target must be a path starting with a single /")
    host = str(headers.get("host") or "").strip().lower()
    if host not in own_hosts(port):
        return Refusal(421, "this server answers only to its own loopback address")
    prefix = f"{TOKEN_PREFIX}{token}/"
    if not hmac.compare_digest(target[: len(prefix)].encode(), prefix.encode()):
        return Refusal(404, "not found; open the URL printed at start")
    inner = "/" + target[len(prefix) :]
    path = inner.split("?", 1)[0].split("#", 1)[0]
    allowed = ROUTES.get(path)
    if allowed is None:
        return Refusal(404, "no such route")
    if method != allowed:
        return Refusal(405, f"use {allowed}", allow=allowed)
    origin = headers.get("origin")
    if origin is not None and origin.strip().lower() not in own_origins(port):
        return Refusal(403, "cross-origin requests are refused")
    length = content_length(headers)
    if isinstance(length, Refusal):
        return length
    return Accepted(target=inner, path=path, body_length=length)


def read_body(accepted: Accepted, rfile: BinaryIO) -> bytes | Refusal:
    """The body an accepted request announced, or a Refusal when fewer bytes arrived
    (the socket's timeout bounds the wait)."""
    body = rfile.read(accepted.body_length) if accepted.body_length else b""
    if len(body) != accepted.body_length:
        return Refusal(400, "request body shorter than its Content-Length")
    return body
