"""Checks an AWS Signature Version 4 ``Authorization`` header, standard library only.

The fakes of AWS endpoints that are reached over plain HTTP (the fake ``bedrock-runtime``)
use it to refuse a request the real service would refuse before doing any work: unsigned,
signed for another service or region, signed too long ago, or (when the fake knows the
secret key) signed with a signature that does not match the request.

The canonical request is built as AWS (and botocore's ``SigV4Auth``) builds it: the method,
the path URI-encoded once more (every service but S3), the sorted query, the signed headers
(lower-case names, values with whitespace folded), the signed header names and the body's
SHA-256. See https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-create-signed-request.html.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

ALGORITHM = "AWS4-HMAC-SHA256"
#: How far ``X-Amz-Date`` may be from the server's clock, as AWS allows (5 minutes).
MAX_CLOCK_SKEW = dt.timedelta(minutes=5)
_AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<credential>[^,\s]+),\s*"
    r"SignedHeaders=(?P<signed>[^,\s]+),\s*Signature=(?P<signature>[0-9a-f]{64})$"
)


@dataclass(frozen=True)
class SignatureError:
    """Why a request's signature was refused: AWS's error name and message."""

    #: E.g. ``"MissingAuthenticationTokenException"`` or ``"InvalidSignatureException"``.
    error_type: str
    message: str


@dataclass(frozen=True)
class SignedBy:
    """Who signed an accepted request, from its credential scope."""

    access_key_id: str
    date: str
    region: str
    service: str
    signed_headers: tuple[str, ...]


def check_signature(
    method: str,
    target: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    service: str,
    region: str,
    secret_keys: Mapping[str, str] | None = None,
    now: dt.datetime | None = None,
) -> SignedBy | SignatureError:
    """Check the SigV4 signature of one request.

    :param target: the request target as received (path and query).
    :param headers: the request headers, names lower-cased.
    :param service: the signing name the scope must carry, e.g. ``"bedrock"``.
    :param region: the region the scope must carry.
    :param secret_keys: secret access key by access key id. Default None: the signature's
        form, scope and date are checked, not its value. With a mapping, an unknown access
        key is refused and the signature is recomputed and compared.
    :param now: the server's clock. Default: the current UTC time.
    """
    authorization = headers.get("authorization", "")
    if not authorization:
        return SignatureError("MissingAuthenticationTokenException", "Missing Authentication Token")
    match = _AUTHORIZATION.match(authorization.strip())
    if match is None:
        return SignatureError(
            "IncompleteSignatureException",
            f"Authorization header requires {ALGORITHM} with Credential, SignedHeaders and "
            "Signature",
        )
    parts = match["credential"].split("/")
    if len(parts) != 5 or parts[4] != "aws4_request":
        return SignatureError("IncompleteSignatureException", "Credential is malformed")
    access_key, date, scope_region, scope_service, _ = parts
    if scope_service != service:
        return SignatureError(
            "InvalidSignatureException",
            f"Credential should be scoped to correct service: '{service}'.",
        )
    if scope_region != region:
        return SignatureError(
            "InvalidSignatureException",
            f"Credential should be scoped to a valid region, not '{scope_region}'.",
        )
    amz_date = headers.get("x-amz-date", "")
    try:
        signed_at = dt.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return SignatureError("IncompleteSignatureException", "X-Amz-Date is missing or invalid")
    if amz_date[:8] != date:
        return SignatureError(
            "InvalidSignatureException", "Date in Credential scope does not match X-Amz-Date"
        )
    clock = now or dt.datetime.now(dt.UTC)
    if abs(clock - signed_at) > MAX_CLOCK_SKEW:
        return SignatureError("InvalidSignatureException", f"Signature expired: {amz_date}")
    signed = tuple(match["signed"].split(";"))
    if "host" not in signed or any(name not in headers for name in signed):
        return SignatureError(
            "IncompleteSignatureException", "SignedHeaders must include host and be present"
        )
    if secret_keys is not None:
        secret = secret_keys.get(access_key)
        if secret is None:
            return SignatureError(
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
            )
        expected = signature(
            secret, method, target, headers, signed, body, amz_date, f"{date}/{region}/{service}"
        )
        if not hmac.compare_digest(expected, match["signature"]):
            return SignatureError(
                "InvalidSignatureException",
                "The request signature we calculated does not match the signature you "
                "provided. Check your AWS Secret Access Key and signing method.",
            )
    return SignedBy(access_key, date, scope_region, scope_service, signed)


def signature(
    secret_key: str,
    method: str,
    target: str,
    headers: Mapping[str, str],
    signed_headers: tuple[str, ...],
    body: bytes,
    amz_date: str,
    scope: str,
) -> str:
    """The hex signature of a request, for ``scope`` ``DATE/REGION/SERVICE``."""
    path, _, query = target.partition("?")
    canonical = "\n".join(
        [
            method.upper(),
            quote(path or "/", safe="/~"),
            _canonical_query(query),
            "".join(f"{name}:{' '.join(headers[name].split())}\n" for name in signed_headers),
            ";".join(signed_headers),
            headers.get("x-amz-content-sha256") or hashlib.sha256(body).hexdigest(),
        ]
    )
    string_to_sign = "\n".join(
        [
            ALGORITHM,
            amz_date,
            f"{scope}/aws4_request",
            hashlib.sha256(canonical.encode()).hexdigest(),
        ]
    )
    key = f"AWS4{secret_key}".encode()
    for part in [*scope.split("/"), "aws4_request"]:
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()


def _canonical_query(query: str) -> str:
    """The query's pairs sorted, as received (botocore signs an encoded URL's query as is)."""
    pairs = [item.partition("=") for item in filter(None, query.split("&"))]
    return "&".join(f"{name}={value}" for name, _, value in sorted(pairs))
