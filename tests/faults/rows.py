"""The rows a schedule publishes, and the JSON each copy is written in.

The lab writes each event's body itself, so a copy can spell its row number as a producer
would: ``1``, ``1.0`` or ``1.0000000000000000000001`` (more digits than a double holds: a
JSON parser reads it as ``1.0``, and a fraction is compared as that float); ``1e30``, ``1E+30``
or its 31 digits; ``9007199254740993`` (2**53 + 1) or ``9007199254740993.0``, which a float
cannot hold. Every spelling of one value is one key (the keys canonicalise numbers by value on
the SQS path, where the runtime parses the body).

The ``big`` row carries 150 KB of non-ASCII text (UTF-8): a body that fits every queue as
it is, and is three times larger once ASCII-escaped.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

ACCOUNT = "123456789012"
REGION = "us-east-1"
UPLOAD = "u-1"
#: Bytes of non-ASCII text in the big row (UTF-8).
BIG_ROW_BYTES = 150_000
#: Three-byte characters (ASCII-escaped: six bytes each), then two- and four-byte ones.
_BIG_PIECE = "漢字かなカナ" * 4 + "éü" + "🙂"


def big_text() -> str:
    """About :data:`BIG_ROW_BYTES` of UTF-8 text, none of it ASCII."""
    piece_bytes = len(_BIG_PIECE.encode())
    return _BIG_PIECE * (BIG_ROW_BYTES // piece_bytes)


@dataclass(frozen=True)
class Row:
    """One row: its number's value, the spellings copies use, and its company text."""

    name: str
    value: int
    spellings: tuple[str, ...]
    big: bool = False

    def body(self, spelling: int, *, generation: int | None = None) -> str:
        """One copy of the row's event (its own event id, never the key), as JSON text."""
        number = self.spellings[spelling % len(self.spellings)]
        company = big_text() if self.big else "Acme"
        marker = "" if generation is None else f', "replay_generation": {generation}'
        company_json = json.dumps(company, ensure_ascii=False)
        detail = (
            f'{{"upload_id": {json.dumps(UPLOAD)}, "row_number": {number}, '
            f'"company": {company_json}{marker}}}'
        )
        envelope = {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "Row",
            "source": "fault.lab",
            "account": ACCOUNT,
            "time": "2026-01-01T00:00:00Z",  # a producer's time long ago: never the window
            "region": REGION,
            "resources": [],
        }
        return json.dumps(envelope)[:-1] + ', "detail": ' + detail + "}"


PLAIN = Row("plain", 1, ("1", "1.0", "1.0000000000000000000001"))
SECOND = Row("second", 2, ("2",))
BIG = Row("big", 3, ("3",), big=True)
HUGE_NUMBER = Row("huge-number", 10**30, ("1e30", "1000000000000000000000000000000", "1E+30"))
PAST_FLOAT = Row("past-float", 2**53 + 1, ("9007199254740993", "9007199254740993.0"))
#: A schedule's second row is one of these (its first is always :data:`PLAIN`).
SECOND_ROWS = (SECOND, BIG, HUGE_NUMBER, PAST_FLOAT)
