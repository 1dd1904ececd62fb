"""CSV export with spreadsheet formula-injection protection and a response-size cap."""

from __future__ import annotations

import base64
import csv
import io
import json
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .store import PUBLIC_FIELDS, public_view

# The export is exactly what the page shows: the same public fields, same order.
EXPORT_COLUMNS = PUBLIC_FIELDS
# Lambda's synchronous response limit is 6 MB (6,291,456 bytes) of the *serialised*
# result: the JSON object {"statusCode", "headers", "body", "isBase64Encoded"}. The cap
# applies to that whole object, measured as below, with room for the runtime's framing.
MAX_RESPONSE_BYTES = 6_000_000
# Characters a spreadsheet skips before it reads a formula, besides str.isspace().
_INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff"
# Formula starts, after NFKC (which maps full-width ＝＋－＠ and small ﹦﹢﹣﹫ to ASCII).
_TRIGGERS = frozenset("=+-@\u2212")
# Where a spreadsheet may start a new cell inside a field: the separators of the usual CSV
# dialects and locales, a quote a lenient parser ends the field at, and line breaks.
_CELL_BOUNDARIES = frozenset(",;\t|\"'\r\n")
TRUNCATION_MARKER = "# export truncated after {rows} rows at the 6 MB response limit; "
TRUNCATION_MARKER += "narrow the filters (upload, kind, error code) to export the rest"


def neutralise_cell(value: object) -> str:
    """Prefix a single quote wherever a spreadsheet could read a formula.

    Triggers (OWASP CSV injection, widened): a cell starting with tab or CR, or whose
    first character after leading whitespace (spaces, NBSP, newlines, ideographic
    space, zero-width characters) is ``=``, ``+``, ``-``, ``@``, a minus sign, or a
    full-width or small-form look-alike of one of them: the quote goes first.

    A spreadsheet can also start a cell inside this one: after a separator of another
    locale or format (``;`` where the decimal comma is usual, ``,``, tab, ``|``), a quote
    (a lenient parser ends the field there) or a line break. So a trigger that is the first
    character after one of those (whitespace between them allowed) gets a quote right after
    it too: ``x;=cmd|' /C calc'!A0`` becomes ``x;'=cmd|' /C calc'!A0``, text in every locale.
    """
    text = "" if value is None else str(value)
    if not text:
        return text
    inner = _neutralise_inner_cells(text)
    if text[0] in "\t\r":
        return "'" + inner
    stripped = text.lstrip()
    while stripped and stripped[0] in _INVISIBLE:
        stripped = stripped[1:].lstrip()
    if stripped and _is_trigger(stripped[0]):
        return "'" + inner
    return inner


def _is_trigger(character: str) -> bool:
    return unicodedata.normalize("NFKC", character)[:1] in _TRIGGERS


def _neutralise_inner_cells(text: str) -> str:
    """``text`` with a quote after each cell boundary whose next visible character is a
    formula trigger (see :func:`neutralise_cell`)."""
    quoted: list[int] = []
    boundary: int | None = None  # a cell could start after this index, not yet begun
    for index, character in enumerate(text):
        if character in _CELL_BOUNDARIES:
            boundary = index
        elif not character.isspace() and character not in _INVISIBLE:
            if boundary is not None and _is_trigger(character):
                quoted.append(boundary + 1)
            boundary = None
    for position in reversed(quoted):
        text = text[:position] + "'" + text[position:]
    return text


def json_string_bytes(text: str) -> int:
    """Bytes ``text`` takes inside a JSON document, quotes excluded.

    Measured with ``ensure_ascii=True`` (every non-ASCII character as ``\\uXXXX``): the
    larger of the two encodings Lambda's Python runtimes use, so the cap holds for both.
    """
    return len(json.dumps(text)) - 2


def base64_bytes(utf8_length: int) -> int:
    """Length of the base64 text of ``utf8_length`` bytes."""
    return 4 * ((utf8_length + 2) // 3)


def response_bytes(result: dict[str, Any]) -> int:
    """Serialised size of a Function URL result, measured as ``json_string_bytes`` does."""
    return len(json.dumps(result).encode("utf-8"))


@dataclass(frozen=True)
class RenderedCsv:
    """The export body, ready for the Function URL result."""

    body: str  # text, or base64 text when ``base64`` is True
    base64: bool
    rows: int
    truncated: bool


def render_csv(items: Iterable[dict[str, Any]], max_body_bytes: int) -> RenderedCsv:
    """CSV of ``items`` (header first) whose encoded body fits ``max_body_bytes``.

    The body goes out as JSON-escaped text or as base64, whichever is smaller (quotes
    and non-ASCII cost 2-12 bytes as JSON text, base64 always 4/3): both sizes are
    tracked row by row and the first row that fits neither ends the export, with a
    last line saying so. ``items`` is consumed lazily, so the reads stop there too.
    """
    marker_reserve = json_string_bytes(TRUNCATION_MARKER.format(rows=10**12)) + 8
    budget = max_body_bytes - marker_reserve
    lines: list[str] = []
    text_bytes = utf8_bytes = 0
    rows = 0
    truncated = False

    def add(line: str) -> None:
        nonlocal text_bytes, utf8_bytes
        lines.append(line)
        text_bytes += json_string_bytes(line)
        utf8_bytes += len(line.encode("utf-8"))

    add(_csv_line(EXPORT_COLUMNS))
    for item in items:
        view = public_view(item)
        line = _csv_line([neutralise_cell(view.get(column)) for column in EXPORT_COLUMNS])
        next_text = text_bytes + json_string_bytes(line)
        next_b64 = base64_bytes(utf8_bytes + len(line.encode("utf-8")))
        if min(next_text, next_b64) > budget:
            truncated = True
            break
        add(line)
        rows += 1
    if truncated:
        add(_csv_line([TRUNCATION_MARKER.format(rows=rows)]))
    text = "".join(lines)
    if text_bytes <= base64_bytes(utf8_bytes):
        return RenderedCsv(text, False, rows, truncated)
    return RenderedCsv(base64.b64encode(text.encode("utf-8")).decode(), True, rows, truncated)


def _csv_line(cells: Iterable[object]) -> str:
    # Every field quoted: a separator, quote or line break in a value stays inside its field
    # for any reader that honours quotes, whatever its locale's separator.
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\r\n", quoting=csv.QUOTE_ALL).writerow(cells)
    return buffer.getvalue()
