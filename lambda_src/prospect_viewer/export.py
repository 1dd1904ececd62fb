"""CSV export with spreadsheet formula-injection protection."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from typing import Any

from .store import PUBLIC_FIELDS, public_view

# The export is exactly what the page shows: the same public fields, same order.
EXPORT_COLUMNS = PUBLIC_FIELDS
# Function URL responses are capped at 6 MB; stop before that and say so in a header.
MAX_EXPORT_CHARS = 5 * 1024 * 1024
_FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def neutralise_cell(value: object) -> str:
    """Prefix a single quote to any cell a spreadsheet could read as a formula.

    Triggers (OWASP CSV injection): a leading ``=``, ``+``, ``-``, ``@``, tab or CR.
    """
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_TRIGGERS) else text


def render_csv(items: Iterable[dict[str, Any]]) -> tuple[str, bool]:
    """CSV text of ``items`` (header first) and whether it was truncated at the size cap."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(EXPORT_COLUMNS)
    for item in items:
        view = public_view(item)
        writer.writerow([neutralise_cell(view.get(column)) for column in EXPORT_COLUMNS])
        if buffer.tell() > MAX_EXPORT_CHARS:
            return buffer.getvalue(), True
    return buffer.getvalue(), False
