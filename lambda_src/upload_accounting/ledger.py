"""The upload ledger: counts each row once and closes each upload exactly once.

Two tables:

- uploads (pk ``upload_id``): the item the viewer shows and the completion event is built
  from. GSI ``OpenUploads`` (pk ``sweep_shard``, sk ``sweep_after`` N) is sparse: only
  uploads whose completion event is not yet published are in it, so the sweeper reads
  open uploads, never the whole table.
- upload rows (pk ``upload_id``, sk ``row_number`` N): one marker per accounted row.
  The marker's conditional Put and the counter update are one transaction, so a row is
  counted once whatever its deliveries, and never lost between the two writes. The marker
  also lists the keys whose billed requests and tokens are counted (``counted_keys``, the
  outcomes' ``key_record_id``): each key's totals are added once, by the transaction that
  adds its id (:mod:`.increments`).

Closing is a conditional status change (``classifying`` -> ``completed`` / ``incomplete``,
``splitting`` -> ``rejected``): only one writer wins it. The event is then published under
a short lease and marked sent; a publisher that dies in between leaves the upload in the
index, and the caller's retry or the sweeper publishes it once the lease lapses.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from enum import Enum
from typing import TYPE_CHECKING, Any

import boto3
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError
from prospect_contract.events import UPLOAD_COMPLETED, UPLOAD_COUNTERS, UploadCompletedDetail
from prospect_contract.metrics import write_closed_upload
from prospect_contract.put_events import ClassicBus, detail_json, send_batch
from prospect_contract.upload_status import LAST_ACTIVITY

from .config import LedgerSettings
from .errors import SummaryPublishError
from .increments import delivery_increments, key_increments
from .summary import BATCH_IDS, summary_detail

if TYPE_CHECKING:
    # The model step's outcome type, for type checkers only: this package is bundled into
    # functions that do not ship model_step (the recorder, the sweeper).
    from model_step.outcome import Outcome

logger = logging.getLogger(__name__)

SPLITTING = "splitting"
CLASSIFYING = "classifying"
COMPLETED = "completed"
INCOMPLETE = "incomplete"
REJECTED = "rejected"
CLOSED = (COMPLETED, INCOMPLETE, REJECTED)

OPEN_INDEX = "OpenUploads"
OPEN_SHARD = "open"
#: How long one publisher holds the right to publish the completion event.
PUBLISH_LEASE_SECONDS = 120
#: Message Batches delivery (issue 19): ``summary.BATCH_IDS``, the string set of the batches
#: that answered an upload's rows (``batches`` in the summary is its size). One id per
#: Message Batch of up to ``BATCH_MAX_REQUESTS`` rows, about 40 bytes each: far from
#: DynamoDB's 400 KB item limit.
ERROR_CODE_MAX_CHARS = 100
#: The row marker's string set of the keys whose billed totals are counted (issue 31).
COUNTED_KEYS = "counted_keys"
#: Issue 36: a row the recorder counted from the model step's own dead letter, before the
#: step reported it with its key's billed totals: the marker's flag, and the upload's count
#: of such rows. An upload closes only when none is left (the sweeper closes it anyway at
#: its deadline), so its summary counts every billed request.
AWAITING_REPORT = "awaiting_report"
AWAITING_REPORTS = "awaiting_reports"
_TRANSACTION_ATTEMPTS = 5

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


class RowAccounted(Enum):
    """What ``row_classified``/``row_failed`` did."""

    COUNTED = "counted"  # first outcome of this row
    DUPLICATE = "duplicate"  # the row was already accounted for; counters only
    RECLASSIFIED = "reclassified"  # an operator retry turned a failed row into a label
    UNKNOWN_UPLOAD = "unknown_upload"  # no upload item (e.g. uploaded before the ledger)


def utc_now_iso(now: float) -> str:
    return (
        datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def batch_id_of(outcome: Outcome | Mapping[str, Any] | None) -> str | None:
    """The Message Batch that answered this delivery (issue 19), if one did."""
    result = (outcome or {}).get("result") or {}
    batch_id = result.get("batch_id") if result.get("delivery") == "batch" else None
    return str(batch_id) if batch_id else None


def _av(value: Any) -> dict[str, Any]:
    return _serializer.serialize(value)


def _plain_item(item: Mapping[str, Any]) -> dict[str, Any]:
    return {name: _deserializer.deserialize(value) for name, value in item.items()}


class _Update:
    """Builds one UpdateExpression with generated placeholder names."""

    def __init__(self) -> None:
        self.sets: list[str] = []
        self.adds: list[str] = []
        self.removes: list[str] = []
        self.names: dict[str, str] = {}
        self.values: dict[str, dict[str, Any]] = {}

    def name(self, attribute: str) -> str:
        placeholder = f"#n{len(self.names)}"
        self.names[placeholder] = attribute
        return placeholder

    def value(self, value: Any) -> str:
        placeholder = f":v{len(self.values)}"
        self.values[placeholder] = _av(value)
        return placeholder

    def set(self, attribute: str, value: Any) -> _Update:
        self.sets.append(f"{self.name(attribute)} = {self.value(value)}")
        return self

    def add(self, attribute: str, amount: int) -> _Update:
        self.adds.append(f"{self.name(attribute)} {self.value(amount)}")
        return self

    def add_to_set(self, attribute: str, member: str) -> _Update:
        """``ADD attribute {member}`` (a string set: adding a member twice keeps one)."""
        self.adds.append(f"{self.name(attribute)} {self.placeholder({'SS': [member]})}")
        return self

    def placeholder(self, attribute_value: dict[str, Any]) -> str:
        """A placeholder for an already typed attribute value."""
        placeholder = f":v{len(self.values)}"
        self.values[placeholder] = attribute_value
        return placeholder

    def increment_in_map(self, map_attribute: str, key: str) -> _Update:
        path = f"{self.name(map_attribute)}.{self.name(key)}"
        self.sets.append(f"{path} = if_not_exists({path}, {self.value(0)}) + {self.value(1)}")
        return self

    def remove(self, attribute: str) -> _Update:
        self.removes.append(self.name(attribute))
        return self

    def expression(self) -> str:
        parts = []
        if self.sets:
            parts.append("SET " + ", ".join(self.sets))
        if self.adds:
            parts.append("ADD " + ", ".join(self.adds))
        if self.removes:
            parts.append("REMOVE " + ", ".join(self.removes))
        return " ".join(parts)

    def request(self, condition: str | None = None) -> dict[str, Any]:
        request: dict[str, Any] = {
            "UpdateExpression": self.expression(),
            "ExpressionAttributeNames": self.names,
        }
        if self.values:
            request["ExpressionAttributeValues"] = self.values
        if condition:
            request["ConditionExpression"] = condition
        return request


class UploadLedger:
    """Per-upload accounting over the uploads and upload-rows tables.

    Every method is safe to call again with the same arguments (a retried Lambda does):
    ``begin`` and ``split_finished`` are conditional, rows are counted once, and the
    completion event is published once.
    """

    def __init__(
        self,
        settings: LedgerSettings,
        *,
        dynamodb: Any,
        events: Any,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self._dynamodb = dynamodb
        self._events = events
        self._clock = clock
        self._sleep = sleep

    @classmethod
    def from_environment(cls, session: boto3.session.Session | None = None) -> UploadLedger:
        """A ledger with clients from ``session`` (default: a new one) and env settings."""
        session = session or boto3.session.Session()
        return cls(
            LedgerSettings.from_env(),
            dynamodb=session.client("dynamodb"),
            events=session.client("events"),
        )

    # ------------------------------------------------------------------ splitter
    def begin(self, upload_id: str, *, bucket: str, key: str) -> bool:
        """Open the upload (status ``splitting``). False when it was already open (a
        re-run of the splitter keeps the counts it already has)."""
        now = self._clock()
        item = {
            "upload_id": upload_id,
            "status": SPLITTING,
            "bucket": bucket,
            "key": key,
            "created_at": utc_now_iso(now),
            "classified": {},
            "failed": {},
            **dict.fromkeys(UPLOAD_COUNTERS, 0),
            "sweep_shard": OPEN_SHARD,
            "sweep_after": int(
                now + self.settings.split_deadline_seconds + self.settings.deadline_seconds
            ),
            "expires_at": self._expires_at(now),
        }
        try:
            self._dynamodb.put_item(
                TableName=self.settings.uploads_table_name,
                Item={name: _av(value) for name, value in item.items()},
                ConditionExpression="attribute_not_exists(upload_id)",
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def split_finished(
        self,
        upload_id: str,
        *,
        rows: int,
        valid: int,
        invalid: int,
        deduplicated: int = 0,
        rejected_reason: str | None = None,
        bucket: str = "",
        key: str = "",
        delivery: str | None = None,
    ) -> None:
        """Record the split's counts. A rejected upload (``rejected_reason``) closes at
        once with status ``rejected``; otherwise the upload moves to ``classifying`` and
        completes as soon as every valid row is accounted for (maybe right here).
        ``delivery`` (``realtime`` or ``batch``, issue 19): how its valid rows were sent."""
        now = self._clock()
        update = _Update()
        for name, value in (("rows", rows), ("valid", valid), ("invalid", invalid)):
            update.set(name, int(value))
        update.set("deduplicated", int(deduplicated))
        if delivery is not None:
            update.set("delivery", delivery)
        update.set("split_finished_at", utc_now_iso(now))
        status = update.name("status")
        splitting = update.value(SPLITTING)
        if rejected_reason is None:
            update.set("status", CLASSIFYING)
            update.set("sweep_after", int(now + self.settings.deadline_seconds))
            condition = f"{status} = {splitting}"
        else:
            # A rejection may come without begin() (e.g. an event naming no object).
            update.set("status", REJECTED).set("reason", rejected_reason[:1000])
            update.set("completed_at", utc_now_iso(now)).set("sweep_after", int(now))
            update.set("sweep_shard", OPEN_SHARD).set("expires_at", self._expires_at(now))
            for name, default in (("bucket", bucket), ("key", key), ("created_at", None)):
                placeholder = update.name(name)
                fallback = update.value(default if default is not None else utc_now_iso(now))
                update.sets.append(f"{placeholder} = if_not_exists({placeholder}, {fallback})")
            for name in ("classified", "failed"):
                placeholder = update.name(name)
                update.sets.append(
                    f"{placeholder} = if_not_exists({placeholder}, {update.value({})})"
                )
            for name in UPLOAD_COUNTERS:
                if name != "deduplicated":
                    update.add(name, 0)
            condition = f"attribute_not_exists(upload_id) OR {status} = {splitting}"
        # False when already past splitting: a retried splitter. Fall through, idempotently.
        self._update_upload(upload_id, update, condition)
        if rejected_reason is None:
            self._complete_if_accounted(upload_id)
        else:
            self._publish_if_due(upload_id)

    # ------------------------------------------------------------------ rows
    def row_classified(
        self,
        upload_id: str,
        row_number: int,
        label: str,
        outcome: Mapping[str, Any] | None = None,
    ) -> RowAccounted:
        """Count one classified row (once) plus this delivery's counters."""
        return self._account_row(upload_id, row_number, "classified", label, outcome)

    def row_failed(
        self,
        upload_id: str,
        row_number: int,
        error_code: str,
        outcome: Mapping[str, Any] | None = None,
        *,
        step_reports: bool = False,
    ) -> RowAccounted:
        """Count one failed row (once) under ``error_code`` plus this delivery's counters.

        The failure recorder calls it without ``outcome`` (a dead letter is no delivery).
        ``step_reports`` (default False): the model step sent this dead letter itself and
        reports the row's outcome with its key's billed totals (``record_outcome``) right
        after; the row is counted now, but the upload is closed by that report, so its
        summary never misses the requests of its last failed row (issue 36). Should the
        report never come, the sweeper closes the upload at its deadline.
        """
        code = (error_code or "Unknown")[:ERROR_CODE_MAX_CHARS]
        return self._account_row(
            upload_id, row_number, "failed", code, outcome, complete=not step_reports
        )

    def record_delivery(self, upload_id: str, outcome: Mapping[str, Any]) -> None:
        """Counters of a delivery that settled no row (rate limited, retry later)."""
        self._add_counters(upload_id, delivery_increments(outcome), batch_id_of(outcome))

    def record_outcome(self, event: Mapping[str, Any], outcome: Outcome) -> None:
        """The classify step's ``on_outcome`` hook (contract §3), for row events."""
        detail = event.get("detail")
        if not isinstance(detail, Mapping):
            return
        upload_id, row_number = detail.get("upload_id"), detail.get("row_number")
        if not isinstance(upload_id, str) or not upload_id or not _is_row_number(row_number):
            logger.warning("outcome without upload_id/row_number; not accounted")
            return
        result = outcome.get("result")
        row = int(row_number)
        if result is not None and result["status"] == "completed" and result.get("label"):
            self.row_classified(upload_id, row, str(result.get("label")), outcome)
        elif result is not None and result["status"] == "dead_lettered":
            code = outcome.get("error_code") or result["error_code"] or "Unknown"
            self.row_failed(upload_id, row, str(code), outcome)
        else:
            self.record_delivery(upload_id, outcome)

    # ------------------------------------------------------------------ sweeper
    def sweep(self) -> dict[str, str]:
        """Close uploads past their deadline and publish any unpublished completion."""
        now = self._clock()
        swept: dict[str, str] = {}
        for upload_id in self._due_uploads(now):
            item = self._get_upload(upload_id)
            if item is None:
                continue
            status = item.get("status")
            if status in CLOSED:
                swept[upload_id] = "published" if self._publish_if_due(upload_id) else "leased"
            elif self._complete_if_accounted(upload_id, item, at_deadline=True):
                swept[upload_id] = COMPLETED
            elif self._close_incomplete(item, now):
                swept[upload_id] = INCOMPLETE
        return swept

    # ------------------------------------------------------------------ internals
    def _expires_at(self, now: float) -> int:
        return int(now + self.settings.retention_days * 86400)

    def _account_row(
        self,
        upload_id: str,
        row_number: int,
        kind: str,
        name: str,
        outcome: Mapping[str, Any] | None,
        complete: bool = True,
    ) -> RowAccounted:
        now = self._clock()
        key_id, billed = key_increments(outcome)
        increments = _summed(delivery_increments(outcome), billed)
        marker: dict[str, Any] = {
            "upload_id": upload_id,
            "row_number": int(row_number),
            "outcome": kind,
            ("label" if kind == "classified" else "error_code"): name,
            "via": "delivery" if outcome is not None else "dead-letter",
            "recorded_at": utc_now_iso(now),
            "expires_at": self._expires_at(now),
        }
        if key_id is not None:
            marker[COUNTED_KEYS] = {key_id}
        update = _Update().increment_in_map(kind, name).add(f"{kind}_total", 1)
        if not complete:
            marker[AWAITING_REPORT] = True
            update.add(AWAITING_REPORTS, 1)
        for counter, amount in increments.items():
            update.add(counter, amount)
        _add_batch_id(update, outcome)
        reasons = self._transact(
            [
                {
                    "Put": {
                        "TableName": self.settings.upload_rows_table_name,
                        "Item": {k: _av(v) for k, v in marker.items()},
                        "ConditionExpression": "attribute_not_exists(row_number)",
                    }
                },
                self._upload_update(upload_id, update),
            ]
        )
        if reasons is None:
            if complete:
                self._complete_if_accounted(upload_id)
            return RowAccounted.COUNTED
        if reasons[1] == "ConditionalCheckFailed":
            logger.warning("no upload item for %s; row %s not accounted", upload_id, row_number)
            return RowAccounted.UNKNOWN_UPLOAD
        accounted = self._account_known_row(upload_id, int(row_number), kind, name, outcome, now)
        if outcome is not None:
            # A step's report of a row the recorder counted first closes the upload once its
            # key's totals are in (``_account_known_row`` counted them off, AWAITING_REPORTS).
            self._complete_if_accounted(upload_id)
        return accounted

    def _reported(self, upload_id: str, row_number: int) -> None:
        """Clear the row's ``AWAITING_REPORT`` flag and count it off its upload, once (one
        transaction, conditional on the flag); nothing when the row was not waiting."""
        marker_update = _Update().remove(AWAITING_REPORT)
        condition = f"attribute_exists({marker_update.name(AWAITING_REPORT)})"
        self._update_marker_and_upload(
            upload_id,
            row_number,
            marker_update.request(condition),
            _Update().add(AWAITING_REPORTS, -1),
        )

    def _account_known_row(
        self,
        upload_id: str,
        row_number: int,
        kind: str,
        name: str,
        outcome: Mapping[str, Any] | None,
        now: float,
    ) -> RowAccounted:
        existing = self._get_marker(upload_id, row_number)
        if outcome is not None and existing is not None and existing.get(AWAITING_REPORT):
            # The step's report of a row counted from its dead letter: no longer awaited.
            self._reported(upload_id, row_number)
        key_id, billed = key_increments(outcome)
        increments = delivery_increments(outcome)
        if key_id is None:
            increments = _summed(increments, billed)  # an older step's: per delivery
            billed = {}
        elif key_id in set((existing or {}).get(COUNTED_KEYS) or ()):
            billed = {}  # this key's totals are counted already
        if existing and kind == "classified" and existing.get("outcome") == "failed":
            # An operator retry succeeded: move the row from failed[code] to classified.
            totals = _summed(increments, billed)
            if self._reclassify(
                upload_id, row_number, name, existing, totals, key_id, now, outcome
            ):
                return RowAccounted.RECLASSIFIED
        first_report = (
            existing is not None
            and outcome is not None
            and existing.get("via") == "dead-letter"
            and kind == existing.get("outcome")
        )
        if outcome is not None and not first_report:
            increments["duplicates_suppressed"] = 1
        if key_id is not None and billed:
            if self._count_key(upload_id, row_number, key_id, _summed(increments, billed)):
                return RowAccounted.DUPLICATE
        self._add_counters(upload_id, increments, batch_id_of(outcome))
        return RowAccounted.DUPLICATE

    def _reclassify(
        self,
        upload_id: str,
        row_number: int,
        label: str,
        existing: Mapping[str, Any],
        increments: Mapping[str, int],
        key_id: str | None,
        now: float,
        outcome: Mapping[str, Any] | None = None,
    ) -> bool:
        """Move a failed row to ``label`` (an operator retry succeeded), adding
        ``increments`` and, with ``key_id``, the key's id to the marker: one transaction,
        conditional on the row still being failed (and the key not yet counted)."""
        old_code = str(existing.get("error_code") or "Unknown")
        marker_update = _Update().set("outcome", "classified").set("label", label)
        marker_update.set("reclassified_at", utc_now_iso(now)).remove("error_code")
        condition = f"{marker_update.name('outcome')} = {marker_update.value('failed')}"
        if key_id is not None:
            condition += " AND " + _not_counted(marker_update, key_id)
            marker_update.add_to_set(COUNTED_KEYS, key_id)
        update = _Update().increment_in_map("classified", label).add("classified_total", 1)
        failed_path = f"{update.name('failed')}.{update.name(old_code)}"
        update.sets.append(f"{failed_path} = {failed_path} - {update.value(1)}")
        update.add("failed_total", -1)
        for counter, amount in increments.items():
            update.add(counter, amount)
        _add_batch_id(update, outcome)
        return self._update_marker_and_upload(
            upload_id, row_number, marker_update.request(condition), update
        )

    def _count_key(
        self, upload_id: str, row_number: int, key_id: str, increments: Mapping[str, int]
    ) -> bool:
        """Add a key's billed totals (with this delivery's counters) to its upload and its id
        to the row's marker, in one transaction conditional on the id being new. False when
        another report of the key counted it first (nothing written)."""
        marker_update = _Update()
        condition = _not_counted(marker_update, key_id)
        marker_update.add_to_set(COUNTED_KEYS, key_id)
        update = _Update()
        for counter, amount in increments.items():
            update.add(counter, amount)
        return self._update_marker_and_upload(
            upload_id, row_number, marker_update.request(condition), update
        )

    def _update_marker_and_upload(
        self, upload_id: str, row_number: int, marker_request: dict[str, Any], update: _Update
    ) -> bool:
        """Update the row's marker and its upload in one transaction; False when a
        condition did not hold (nothing written)."""
        reasons = self._transact(
            [
                {
                    "Update": {
                        "TableName": self.settings.upload_rows_table_name,
                        "Key": {"upload_id": _av(upload_id), "row_number": _av(row_number)},
                        **marker_request,
                    }
                },
                self._upload_update(upload_id, update),
            ]
        )
        return reasons is None

    def _upload_update(self, upload_id: str, update: _Update) -> dict[str, Any]:
        # Each write to the counts is activity: an open upload without any is stalled.
        update.set(LAST_ACTIVITY, utc_now_iso(self._clock()))
        return {
            "Update": {
                "TableName": self.settings.uploads_table_name,
                "Key": {"upload_id": _av(upload_id)},
                **update.request("attribute_exists(upload_id)"),
            }
        }

    def _transact(self, items: list[dict[str, Any]]) -> list[str] | None:
        """Run a transaction; None on success, else the cancellation reason codes.

        Concurrent deliveries of one upload touch the same upload item, so a
        TransactionConflict is expected under load: retried with jitter.
        """
        for attempt in range(1, _TRANSACTION_ATTEMPTS + 1):
            try:
                self._dynamodb.transact_write_items(TransactItems=items)
                return None
            except ClientError as exc:
                if _code(exc) != "TransactionCanceledException":
                    raise
                reasons = [
                    str(reason.get("Code") or "None")
                    for reason in exc.response.get("CancellationReasons", [])
                ]
                if "ConditionalCheckFailed" in reasons:
                    return reasons + ["None"] * (len(items) - len(reasons))
                if attempt == _TRANSACTION_ATTEMPTS:
                    raise
                time.sleep(random.uniform(0, 0.05 * 2**attempt))  # spreads conflicting writers
        raise AssertionError("unreachable")

    def _add_counters(
        self, upload_id: str, increments: Mapping[str, int], batch_id: str | None = None
    ) -> None:
        if not increments and batch_id is None:
            return
        update = _Update()
        for counter, amount in increments.items():
            update.add(counter, amount)
        if batch_id is not None:
            update.add_to_set(BATCH_IDS, batch_id)
        update.set(LAST_ACTIVITY, utc_now_iso(self._clock()))
        if self._update_upload(upload_id, update, "attribute_exists(upload_id)") is None:
            logger.warning("no upload item for %s; delivery counters dropped", upload_id)

    def _get_upload(self, upload_id: str) -> dict[str, Any] | None:
        response = self._dynamodb.get_item(
            TableName=self.settings.uploads_table_name,
            Key={"upload_id": _av(upload_id)},
            ConsistentRead=True,
        )
        return _plain_item(response["Item"]) if "Item" in response else None

    def _get_marker(self, upload_id: str, row_number: int) -> dict[str, Any] | None:
        response = self._dynamodb.get_item(
            TableName=self.settings.upload_rows_table_name,
            Key={"upload_id": _av(upload_id), "row_number": _av(row_number)},
            ConsistentRead=True,
        )
        return _plain_item(response["Item"]) if "Item" in response else None

    def _complete_if_accounted(
        self, upload_id: str, item: dict[str, Any] | None = None, *, at_deadline: bool = False
    ) -> bool:
        item = item if item is not None else self._get_upload(upload_id)
        if item is None or item.get("status") != CLASSIFYING or item.get("valid") is None:
            return False
        if int(item.get(AWAITING_REPORTS) or 0) > 0 and not at_deadline:
            return False  # a step's report, with its billed totals, is still on its way
        accounted = int(item.get("classified_total") or 0) + int(item.get("failed_total") or 0)
        if accounted < int(item["valid"]):
            return False
        now = self._clock()
        update = _Update().set("status", COMPLETED).set("completed_at", utc_now_iso(now))
        update.set("missing", 0).set("sweep_after", int(now + PUBLISH_LEASE_SECONDS))
        # Counts only grow, so "complete when read" stays true: the status is the race.
        if self._conditional_status_change(upload_id, update, CLASSIFYING):
            self._publish_if_due(upload_id)
            return True
        return False

    def _close_incomplete(self, item: dict[str, Any], now: float) -> bool:
        upload_id = str(item["upload_id"])
        if int(item.get("sweep_after") or 0) > now:
            return False
        update = _Update().set("status", INCOMPLETE).set("completed_at", utc_now_iso(now))
        update.set("sweep_after", int(now + PUBLISH_LEASE_SECONDS))
        if item.get("valid") is None:
            update.set("missing", None)
            update.set("reason", "the split did not finish before the deadline")
        else:
            accounted = int(item.get("classified_total") or 0) + int(item.get("failed_total") or 0)
            update.set("missing", max(int(item["valid"]) - accounted, 0))
        if self._conditional_status_change(upload_id, update, str(item["status"]), item):
            self._publish_if_due(upload_id)
            return True
        return False

    def _conditional_status_change(
        self,
        upload_id: str,
        update: _Update,
        expected: str,
        seen: dict[str, Any] | None = None,
    ) -> bool:
        condition = f"{update.name('status')} = {update.value(expected)}"
        if seen is not None:
            # missing was computed from these counts: a row that arrived since wins.
            for name in ("classified_total", "failed_total"):
                condition += f" AND {update.name(name)} = {update.value(int(seen.get(name) or 0))}"
        return self._update_upload(upload_id, update, condition) is not None

    def _update_upload(
        self, upload_id: str, update: _Update, condition: str, **request: Any
    ) -> dict[str, Any] | None:
        """A conditional UpdateItem on the upload item: its response, or None when the
        condition did not hold (another writer got there first, or there is no item)."""
        try:
            return dict(
                self._dynamodb.update_item(
                    TableName=self.settings.uploads_table_name,
                    Key={"upload_id": _av(upload_id)},
                    **request,
                    **update.request(condition),
                )
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return None
            raise

    def _publish_if_due(self, upload_id: str) -> bool:
        """Publish the completion event under a lease; True when this call published."""
        now = self._clock()
        update = _Update().set("publish_lease_until", int(now + PUBLISH_LEASE_SECONDS))
        status, lease, published = (
            update.name("status"),
            update.name("publish_lease_until"),
            update.name("summary_published_at"),
        )
        closed = ", ".join(update.value(value) for value in CLOSED)
        condition = (
            f"{status} IN ({closed}) AND attribute_not_exists({published}) AND "
            f"(attribute_not_exists({lease}) OR {lease} < {update.value(int(now))})"
        )
        response = self._update_upload(upload_id, update, condition, ReturnValues="ALL_NEW")
        if response is None:
            return False
        detail = summary_detail(
            _plain_item(response["Attributes"]), self.settings.model_price, self._clock()
        )
        self._put_completed_event(detail)
        write_closed_upload(self.settings.uploads_table_name, detail, self._clock())
        done = _Update().set("summary_published_at", utc_now_iso(self._clock()))
        done.remove("sweep_shard").remove("publish_lease_until")
        self._dynamodb.update_item(
            TableName=self.settings.uploads_table_name,
            Key={"upload_id": _av(upload_id)},
            **done.request(),
        )
        return True

    def _put_completed_event(self, detail: UploadCompletedDetail) -> None:
        """One PutEvents entry, its throttles re-sent; raises when it was not accepted."""
        bus = ClassicBus(self._events, self.settings.event_bus_name, self.settings.event_source)
        entry = bus.entry(UPLOAD_COMPLETED, detail_json(detail), None)
        result = send_batch(bus, [entry], sleep=self._sleep)
        if result.call_error is not None:
            raise result.call_error
        if result.failures:
            [failure] = result.failures
            raise SummaryPublishError(
                f"{UPLOAD_COMPLETED} for {detail['upload_id']} not accepted: {failure.describe()}",
                [(failure.error_code, failure.error_message)],
            )

    def _due_uploads(self, now: float) -> list[str]:
        upload_ids: list[str] = []
        request: dict[str, Any] = {
            "TableName": self.settings.uploads_table_name,
            "IndexName": OPEN_INDEX,
            "KeyConditionExpression": "sweep_shard = :open AND sweep_after <= :now",
            "ExpressionAttributeValues": {":open": _av(OPEN_SHARD), ":now": _av(int(now))},
        }
        while True:
            response = self._dynamodb.query(**request)
            upload_ids += [item["upload_id"]["S"] for item in response.get("Items", [])]
            if "LastEvaluatedKey" not in response:
                return upload_ids
            request["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def _add_batch_id(update: _Update, outcome: Mapping[str, Any] | None) -> None:
    """Message Batches delivery (issue 19): the batch that answered joins the upload's set."""
    batch_id = batch_id_of(outcome)
    if batch_id is not None:
        update.add_to_set(BATCH_IDS, batch_id)


def _summed(*parts: Mapping[str, int]) -> dict[str, int]:
    total: dict[str, int] = {}
    for part in parts:
        for name, amount in part.items():
            total[name] = total.get(name, 0) + amount
    return total


def _not_counted(update: _Update, key_id: str) -> str:
    """The condition that ``key_id`` is not yet in the marker's :data:`COUNTED_KEYS`."""
    return f"NOT contains({update.name(COUNTED_KEYS)}, {update.value(key_id)})"


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _is_row_number(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
