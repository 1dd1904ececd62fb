"""The kinds of ``FailuresTable`` item: who writes each, and which the viewer may retry.

``docs/contract.md`` §7. Standard library only.
"""

from __future__ import annotations

#: A row the model step dead-lettered (the failure recorder): the one kind the viewer
#: re-publishes, as a new replay generation.
KIND_MODEL = "model"
#: A concurrent duplicate of a row that gave up on an in-progress record (the recorder);
#: kept apart so it never hides the row's own failure. Not retried.
KIND_DUPLICATE = "duplicate"
#: A whole upload that was rejected (the splitter), or an upload-level event that was
#: dead-lettered (the recorder).
KIND_UPLOAD = "upload"
#: An invalid CSV row (the splitter): fix the file and upload it again.
KIND_VALIDATION = "validation"
#: The splitter's summary item of an upload; never listed as a failure.
KIND_SUMMARY = "summary"
#: A dead letter of any other event, or of no recognised shape (the recorder).
KIND_OTHER = "other"
