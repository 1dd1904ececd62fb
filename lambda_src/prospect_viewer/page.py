"""The single HTML page, served with a per-response CSP nonce."""

from __future__ import annotations

import secrets
from functools import lru_cache
from pathlib import Path

from .web import Response

_TEMPLATE_PATH = Path(__file__).with_name("index.html")


@lru_cache(maxsize=1)
def _template() -> str:
    return _TEMPLATE_PATH.read_text(encoding="utf-8")


def content_security_policy(nonce: str) -> str:
    """Only our own nonce'd inline script/style runs; fetches go to this origin only."""
    return (
        "default-src 'none'; "
        f"script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
        "connect-src 'self'; img-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


def index_page() -> Response:
    """The viewer page; data arrives through /api/failures and is inserted as text."""
    nonce = secrets.token_urlsafe(18)
    return Response(
        200,
        _template().replace("__NONCE__", nonce),
        "text/html; charset=utf-8",
        {"content-security-policy": content_security_policy(nonce)},
    )
