"""Streaming CSV decoding: bytes in, numbered records out, memory flat in file size."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .validation import HEADER, header_matches

# Reading in 64 KiB chunks keeps memory flat whatever the object size.
CHUNK_BYTES = 64 * 1024


class UploadRejected(Exception):
    """The whole upload is unusable; recorded as failure "upload" and summarised as rejected."""

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
    lines is still one row, and blank lines are skipped without being numbered.
    """

    row_number: int
    fields: list[str]


def iter_records(chunks: Iterable[bytes], max_bytes: int) -> Iterator[Record]:
    """Decode UTF-8 (optional BOM, CRLF or LF), check the header, yield data records.

    Raises UploadRejected with error_code MissingHeader (empty file or wrong header),
    UndecodableBytes (invalid UTF-8), MalformedCsv (e.g. a field over the csv module's
    131,072-character limit) or FileTooLarge (more than ``max_bytes`` bytes read).
    """
    raw = _ChunkReader(chunks, max_bytes)
    # newline="" hands CR/LF untouched to the csv module, which needs them to parse
    # quoted fields that contain line breaks.
    text = io.TextIOWrapper(
        io.BufferedReader(raw, CHUNK_BYTES), encoding="utf-8-sig", errors="strict", newline=""
    )
    reader = csv.reader(text)
    row_number = 0
    header_seen = False
    try:
        for fields in reader:
            if not fields:
                continue  # A blank line is not a record; see Record's docstring.
            if not header_seen:
                if not header_matches(fields):
                    raise UploadRejected(
                        "MissingHeader",
                        f"first record must be the header {','.join(HEADER)}",
                    )
                header_seen = True
                continue
            row_number += 1
            yield Record(row_number, fields)
    except UnicodeDecodeError as exc:
        where = f"data row {row_number + 1}" if header_seen else "the header"
        raise UploadRejected(
            "UndecodableBytes", f"file is not valid UTF-8 (first bad byte in {where})"
        ) from exc
    except csv.Error as exc:
        raise UploadRejected(
            "MalformedCsv", f"CSV parse error after data row {row_number}: {exc}"
        ) from exc
    if not header_seen:
        raise UploadRejected("MissingHeader", "file is empty; a header row is required")
