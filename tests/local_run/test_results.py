"""The local run's independent row count."""

from __future__ import annotations

from constructs_lib.prospect_uploader.local_run.results import count_csv_rows


def test_a_file_that_is_not_utf8_has_no_row_count(tmp_path):
    # GIVEN a CSV with a byte that is not UTF-8  WHEN counted  THEN None, not an exception
    # (its except clause named codecs.CodecRegistryError, which does not exist: mypy found it)
    path = tmp_path / "latin1.csv"
    path.write_bytes(b"name,email\nJos\xe9,jose@example.com\n")
    assert count_csv_rows(path) is None


def test_blank_records_and_the_header_are_not_rows(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("name,email\n\nAda,ada@example.com\n\nBo,bo@example.com\n", encoding="utf-8")
    assert count_csv_rows(path) == 2
