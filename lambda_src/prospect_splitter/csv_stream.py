"""Streaming CSV decoding: bytes in, numbered records out, memory flat in file size.

Hostile shapes are stopped before the csv module can materialise them: every physical
line is read with a bounded ``readline``, so one 50 MiB line never becomes one 50 MiB
string, and a line's fields are bounded before it is parsed (see ``_LineGuard``).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .validation import HEADER, header_matches

# Reading in 64 KiB chunks keeps memory flat whatever the object size.
CHUNK_BYTES = 64 * 1024
# A valid row has 7 fields of at most MAX_FIELD_CHARS=1000 characters. A field takes at
# most 4,002 bytes as CSV (1000 four-byte characters, quoted; 1000 doubled quotes take
# 2,002), so a valid row is under 28.1 KB and a 64 KiB bound, counted over all the physical
# lines of one record (line breaks included), never rejects a row that could be valid.
MAX_RECORD_BYTES = 64 * 1024
# A valid row has 7 fields; 8 to 64 make it one invalid row (FieldCountMismatch), more
# reject the upload: such a file is not a prospect list.
MAX_FIELDS = 64
# Blank lines are not rows, but reading them is not free (a 50 MiB file of newlines took
# about a minute per pass): a file may hold this many, anywhere, before it is rejected as
# TooManyBlankLines. A few trailing blank lines are common in exports; a thousand is not a
# prospect list.
MAX_BLANK_LINES = 1000

_QUOTE = '"'
_DELIMITER = ","


class UploadRejected(Exception):
    """The whole upload is unusable; recorded as failure "upload" and summarised as rejected.

    ``error_code`` is one of: FileTooLarge, TooManyRows, TooManyBlankLines, LineTooLong,
    RecordTooLong, TooManyColumns, TooManyFields, MissingHeader, UndecodableBytes,
    MalformedCsv, ObjectNotFound, ObjectChanged.
    """

    def __init__(self, error_code: str, reason: str) -> None:
        super().__init__(f"{error_code}: {reason}")
        self.error_code = error_code
        self.reason = reason


class _ChunkReader(io.RawIOBase):
    """Adapts an iterator of byte chunks to a raw binary stream, enforcing a byte limit."""

    def __init__(self, chunks: Iterable[bytes], max_bytes: int) -> None:
        self._chunks = iter(chunks)
        self._pending = b""
        self._max_bytes = max_bytes
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self.bytes_read += len(chunk)
            if self.bytes_read > self._max_bytes:
                # The event's size can be wrong or absent; the bytes we read are not.
                raise UploadRejected(
                    "FileTooLarge", f"object is larger than {self._max_bytes} bytes"
                )
            self._pending = chunk
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


@dataclass(frozen=True)
class Record:
    """One non-blank data record: ``row_number`` counts data records from 1 (header excluded).

    It is the CSV record number, not the physical line: a quoted field spanning three
    lines is still one row, and blank lines are skipped without being numbered (at most
    ``MAX_BLANK_LINES`` of them, 1,000 by default).
    """

    row_number: int
    fields: list[str]


class _LineGuard:
    """Feeds the csv module one bounded physical line at a time.

    The csv reader pulls lines from ``lines()`` only until its current record is complete
    and never reads ahead, so everything pulled since the last ``record_done()`` belongs
    to the record being parsed. Per record it bounds:
    - bytes: each ``readline`` asks for at most ``max_bytes + 1`` characters (a character
      is at least one byte), so an overlong line is cut and rejected, never held whole;
    - fields: a record's fields are at most its delimiters + 1, and exactly that when it
      holds no quote character. A quote-free record with too many delimiters is rejected
      here, before csv splits it; a quoted one is parsed (at most ``max_bytes`` + 1 fields,
      bounded by the byte check) and its exact count checked afterwards.
    """

    def __init__(self, text: io.TextIOBase, max_bytes: int, max_fields: int) -> None:
        self._text = text
        self._max_bytes = max_bytes
        self._max_fields = max_fields
        self.in_header = True
        self.next_row = 1
        self._record_bytes = 0
        self._record_lines = 0
        self._record_delimiters = 0
        self._record_quoted = False

    def where(self) -> str:
        return "the header" if self.in_header else f"data row {self.next_row}"

    def record_done(self) -> None:
        self._record_bytes = self._record_lines = self._record_delimiters = 0
        self._record_quoted = False

    def lines(self) -> Iterator[str]:
        readline, limit = self._text.readline, self._max_bytes + 1
        while line := readline(limit):
            # str.isascii is O(1) in CPython; only non-ASCII lines pay for an encode.
            size = len(line) if line.isascii() else len(line.encode("utf-8"))
            self._record_bytes += size
            self._record_lines += 1
            if self._record_bytes > self._max_bytes:
                self._reject_length()
            self._record_delimiters += line.count(_DELIMITER)
            self._record_quoted = self._record_quoted or _QUOTE in line
            if not self._record_quoted and self._record_delimiters >= self._max_fields:
                self.reject_fields(f"more than {self._max_fields}")
            yield line

    def _reject_length(self) -> None:
        if self._record_lines == 1:
            raise UploadRejected(
                "LineTooLong", f"{self.where()} is longer than {self._max_bytes} bytes"
            )
        raise UploadRejected(
            "RecordTooLong",
            f"{self.where()} spans {self._record_lines} lines (quoted line breaks) and is "
            f"longer than {self._max_bytes} bytes",
        )

    def reject_fields(self, count: str) -> None:
        if self.in_header:
            raise UploadRejected(
                "TooManyColumns",
                f"the header has {count} columns (limit {self._max_fields}; "
                f"expected {','.join(HEADER)})",
            )
        raise UploadRejected(
            "TooManyFields", f"{self.where()} has {count} fields (limit {self._max_fields})"
        )


def iter_records(
    chunks: Iterable[bytes],
    max_bytes: int,
    *,
    max_record_bytes: int = MAX_RECORD_BYTES,
    max_fields: int = MAX_FIELDS,
    max_blank_lines: int = MAX_BLANK_LINES,
) -> Iterator[Record]:
    """Decode UTF-8 (optional BOM, CRLF or LF), check the header, yield data records.

    Raises UploadRejected with error_code MissingHeader (empty file or wrong header),
    UndecodableBytes (invalid UTF-8), LineTooLong / RecordTooLong (a record over
    ``max_record_bytes``), TooManyColumns / TooManyFields (a header / data record with
    more than ``max_fields`` fields), TooManyBlankLines (more than ``max_blank_lines``,
    default 1,000, blank lines anywhere in the file), MalformedCsv (any other csv module
    error) or FileTooLarge (more than ``max_bytes`` bytes read).
    """
    raw = _ChunkReader(chunks, max_bytes)
    # newline="" hands CR/LF untouched to the csv module, which needs them to parse
    # quoted fields that contain line breaks.
    text = io.TextIOWrapper(
        io.BufferedReader(raw, CHUNK_BYTES), encoding="utf-8-sig", errors="strict", newline=""
    )
    guard = _LineGuard(text, max_record_bytes, max_fields)
    reader = csv.reader(guard.lines())
    row_number = blank_lines = 0
    try:
        for fields in reader:
            guard.record_done()
            if not fields:
                # A blank line is not a record (see Record's docstring), but it is read: it
                # counts toward a budget, so a file of newlines ends in a second, not minutes.
                blank_lines += 1
                if blank_lines > max_blank_lines:
                    raise UploadRejected(
                        "TooManyBlankLines",
                        f"more than {max_blank_lines} blank lines (before {guard.where()})",
                    )
                continue
            if len(fields) > max_fields:
                guard.reject_fields(str(len(fields)))
            if guard.in_header:
                if not header_matches(fields):
                    raise UploadRejected(
                        "MissingHeader",
                        f"first record must be the header {','.join(HEADER)}",
                    )
                guard.in_header = False
                continue
            row_number += 1
            guard.next_row = row_number + 1
            yield Record(row_number, fields)
    except UnicodeDecodeError as exc:
        raise UploadRejected(
            "UndecodableBytes", f"file is not valid UTF-8 (first bad byte in {guard.where()})"
        ) from exc
    except csv.Error as exc:
        raise UploadRejected(
            "MalformedCsv", f"CSV parse error after data row {row_number}: {exc}"
        ) from exc
    if guard.in_header:
        raise UploadRejected("MissingHeader", "file is empty; a header row is required")
