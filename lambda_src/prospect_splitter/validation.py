"""Header and row validation for prospect CSV files. Pure functions, no AWS."""

from __future__ import annotations

import string
import unicodedata
from dataclasses import dataclass
from typing import cast

from prospect_contract.events import PROSPECT_FIELDS, RowValidatedDetail

#: The upload's header: the row detail's prospect fields, in column order.
HEADER = PROSPECT_FIELDS
MAX_FIELD_CHARS = 1000
# RFC 5321 limits, counted in UTF-8 octets as RFC 6531 does for internationalised addresses.
MAX_EMAIL_OCTETS = 254
MAX_LOCAL_PART_OCTETS = 64
MAX_DOMAIN_LABEL_CHARS = 63

_ATEXT = frozenset(string.ascii_letters + string.digits + "!#$%&'*+-/=?^_`{|}~")


@dataclass(frozen=True)
class RowError:
    """Why a data row was rejected: a machine ``error_code`` and a short human ``reason``."""

    error_code: str
    reason: str


def header_matches(cells: list[str]) -> bool:
    """True when the header is exactly HEADER, in order.

    Accepted variations: surrounding whitespace and letter case of each column name
    (the BOM is removed earlier by the utf-8-sig decoder). Not accepted: extra,
    missing, reordered or renamed columns, including empty trailing columns.
    """
    return tuple(cell.strip().lower() for cell in cells) == HEADER


def _is_local_char(char: str) -> bool:
    if char in _ATEXT:
        return True
    # RFC 6531 allows any UTF-8 non-ASCII character; we still refuse invisible ones.
    return ord(char) > 127 and char.isprintable() and not char.isspace()


def _is_label_char(char: str) -> bool:
    if char.isascii():
        return char.isalnum() or char == "-"
    # Internationalised labels: letters, digits and combining marks (e.g. "ä" decomposed).
    return unicodedata.category(char)[0] in ("L", "N", "M")


def _is_valid_domain(domain: str) -> bool:
    labels = domain.split(".")
    if len(labels) < 2:
        return False
    for label in labels:
        if not 1 <= len(label) <= MAX_DOMAIN_LABEL_CHARS:
            return False
        if label.startswith("-") or label.endswith("-"):
            return False
        if not all(_is_label_char(char) for char in label):
            return False
    return not labels[-1].isdigit()


def is_valid_email(address: str) -> bool:
    """Shape check for a mailbox address (no DNS lookup).

    Accepts RFC 5322 dot-atom local parts (so apostrophes and plus signs are fine)
    and RFC 6531 non-ASCII local parts and domains, e.g. ``用户@例子.广告``.
    Rejects quoted local parts, IP-literal domains, single-label domains and
    addresses over 254 octets; these are legal but never seen in a prospect list.
    """
    if len(address.encode("utf-8")) > MAX_EMAIL_OCTETS:
        return False
    local, at, domain = address.rpartition("@")
    if not at or not local or not domain:
        return False
    if len(local.encode("utf-8")) > MAX_LOCAL_PART_OCTETS:
        return False
    if local.startswith(".") or local.endswith(".") or ".." in local:
        return False
    if not all(char == "." or _is_local_char(char) for char in local):
        return False
    return _is_valid_domain(domain)


def validate_row(fields: list[str]) -> RowError | None:
    """Return the first problem with a parsed data row, or None when it is valid.

    Checks, in order: field count, field length (over MAX_FIELD_CHARS=1000 characters,
    measured before trimming), email (blank or malformed), company (blank).
    Values are compared after trimming surrounding whitespace.
    """
    if len(fields) != len(HEADER):
        return RowError("FieldCountMismatch", f"expected {len(HEADER)} fields, found {len(fields)}")
    for name, value in zip(HEADER, fields, strict=True):
        if len(value) > MAX_FIELD_CHARS:
            return RowError(
                "FieldTooLong", f"{name} is {len(value)} characters (limit {MAX_FIELD_CHARS})"
            )
    email = fields[0].strip()
    if not email:
        return RowError("InvalidEmail", "email is blank")
    if not is_valid_email(email):
        return RowError("InvalidEmail", "email is not a valid address")
    if not fields[3].strip():
        return RowError("MissingCompany", "company is blank")
    return None


def prospect_detail(upload_id: str, row_number: int) -> RowValidatedDetail:
    """The Detail of a "Prospect Row Validated" event: the row's ids only (its values are in
    RowsTable, ``prospect_contract.rows``)."""
    return cast(RowValidatedDetail, {"upload_id": upload_id, "row_number": row_number})


def prospect_values(fields: list[str]) -> dict[str, str]:
    """A valid row's fields by name, trimmed (what RowsTable keeps and the prompt shows)."""
    return {name: value.strip() for name, value in zip(HEADER, fields, strict=True)}
