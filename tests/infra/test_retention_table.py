"""README's table of the stores that hold personal data, checked against the template.

Every bucket, table, queue and v2 bus of the Prospect Uploader must have a row, and each
row's retention must be what the synthesized template (and the environment its writers
read) really sets; so must the row of the tables' point-in-time recovery (issue 34). Log
groups are not in the table: they carry codes, lengths and ids only
(tests/local_run/test_personal_data.py proves it on a whole run). Rows that name no store
in backquotes are copies outside the template (the model provider's); their periods are
the provider's terms.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from constructs_lib.prospect_uploader.stack import CONTEXT_INTS
from lambda_src.model_step.batch_limits import RESULTS_KEPT_SECONDS

from .conftest import Synthesized
from .test_prospect_uploader_stack import props

README = Path(__file__).resolve().parents[2] / "README.md"
STACK = "ProspectUploader"
HEADER = "| store | holds | kept | context key |"
DAY = 86400
UNITS = {"day": DAY, "days": DAY, "hour": 3600, "hours": 3600}
STORE_TYPES = (
    "AWS::S3::Bucket",
    "AWS::DynamoDB::Table",
    "AWS::SQS::Queue",
    "AWS::EventsV2::EventBus",
)


def readme_rows() -> list[dict[str, object]]:
    """Each table row: its label (the first cell), its store names, its retention in seconds
    (None for a period in words), its context keys."""
    lines = README.read_text(encoding="utf-8").splitlines()
    start = lines.index(HEADER) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        store, _holds, kept, keys = (cell.strip() for cell in line.strip("|").split("|"))
        amounts = [int(n) for n in re.findall(r"\d+", kept)]
        units = set(re.findall(r"\b(days?|hours?)\b", kept))
        unit = units.pop() if len(units) == 1 else None
        rows.append(
            {
                "label": store,
                "stores": re.findall(r"`(\w+)`", store),
                "seconds": [amount * UNITS[unit] for amount in amounts] if unit else None,
                "keys": re.findall(r"`(\w+)`", keys),
            }
        )
    return rows


@pytest.fixture(scope="module")
def raw(prospect: Synthesized) -> dict:
    return prospect.templates[STACK]


def _env(raw: dict, function: str) -> dict[str, str]:
    return props(raw, f"/{function}/Resource")["Environment"]["Variables"]


def _ttl_days(raw: dict, table: str, writers: dict[str, str]) -> list[int]:
    """A table's retention: its TTL is on, and every writer sets the same days."""
    ttl = props(raw, f"{table}/Resource")["TimeToLiveSpecification"]
    assert ttl["Enabled"] is True, table
    days = {int(_env(raw, function)[variable]) for function, variable in writers.items()}
    assert len(days) == 1, (table, days)
    return [days.pop() * DAY]


def template_retention(raw: dict, store: str) -> list[int]:
    """What the template keeps ``store`` for, in seconds, in the README's order."""
    ledger = {
        f: "UPLOAD_RETENTION_DAYS"
        for f in ("Splitter", "Classify/Function", "FailureRecorder", "UploadSweeper")
    }
    if store == "UploadBucket":
        lifecycle = props(raw, "UploadBucket/Resource")["LifecycleConfiguration"]
        rules = {rule["Id"]: rule for rule in lifecycle["Rules"]}
        return [
            rules["ExpireUploads"]["ExpirationInDays"] * DAY,
            rules["ExpireReplacedUploads"]["NoncurrentVersionExpiration"]["NoncurrentDays"] * DAY,
        ]  # fmt: skip
    if store == "AccessLogsBucket":
        [rule] = props(raw, "AccessLogsBucket/Resource")["LifecycleConfiguration"]["Rules"]
        return [rule["ExpirationInDays"] * DAY]
    if store == "FailuresTable":
        writers = {f: "FAILURE_RETENTION_DAYS" for f in ("Splitter", "FailureRecorder")}
        return _ttl_days(raw, store, writers)
    if store == "RowsTable":
        # The splitter writes each row with the upload's retention (issue 18).
        # "/RowsTable": the path suffix would match UploadRowsTable too.
        [days] = _ttl_days(raw, "/RowsTable", {"Splitter": "ROW_RETENTION_DAYS"})
        upload = props(raw, "UploadBucket/Resource")["LifecycleConfiguration"]["Rules"]
        [expire] = [rule for rule in upload if rule["Id"] == "ExpireUploads"]
        assert days == expire["ExpirationInDays"] * DAY
        return [days]
    if store == "ProspectsTable":
        return _ttl_days(raw, store, {"Classify/Function": "PROSPECT_RETENTION_DAYS"})
    if store in ("UploadsTable", "UploadRowsTable"):
        return _ttl_days(raw, store, ledger)
    if store == "IdempotencyTable":
        ttl = props(raw, "IdempotencyTable/Resource")["TimeToLiveSpecification"]
        assert ttl == {"AttributeName": "expiration", "Enabled": True}
        expires = int(_env(raw, "Classify/Function")["IDEMPOTENCY_EXPIRES_AFTER_SECONDS"])
        # ClassifyBatch's staged rows and batches (issues 19, 33) live the key's memory
        # after their last write; a lost batch's item until its results are archived at the
        # provider (29 days after its creation), still looked at for late answers.
        batch = _env(raw, "ClassifyBatch/Function")
        assert int(batch["IDEMPOTENCY_EXPIRES_AFTER_SECONDS"]) == expires
        return [expires, int(RESULTS_KEPT_SECONDS)]
    if store.endswith("Queue"):
        step = next((s for s in ("ClassifyBatch", "Classify") if store.startswith(s)), None)
        path = store.replace(step, f"{step}/", 1) if step else store
        return [int(props(raw, f"{path}/Resource")["MessageRetentionPeriod"])]
    if store == "RowBus":
        storage = props(raw, "RowBus/Resource")["StorageConfiguration"]
        return [storage["RetentionPeriodInDays"] * DAY]
    raise AssertionError(f"README names a store the test does not know: {store}")


def test_every_row_of_the_readme_table_is_what_the_template_keeps(raw):
    rows = readme_rows()
    assert rows, "README has no retention table"
    for row in rows:
        for store in row["stores"]:
            assert template_retention(raw, store) == row["seconds"], store


def test_the_readme_table_names_every_store_of_the_template(raw):
    listed = {store for row in readme_rows() for store in row["stores"]}
    stores = set()
    for resource in raw["Resources"].values():
        if resource["Type"] in STORE_TYPES:
            path = resource["Metadata"]["aws:cdk:path"]
            # ProspectUploader/Classify/BufferQueue/Resource -> ClassifyBufferQueue
            stores.add("".join(path.split("/")[1:-1]))
    assert stores == listed


def test_the_context_keys_of_the_readme_table_exist_with_the_defaults_it_states():
    keys = {key for row in readme_rows() for key in row["keys"] if key != "expires_after"}
    assert keys <= set(CONTEXT_INTS) | {"point_in_time_recovery"}
    assert CONTEXT_INTS["upload_retention_days"][0] == 30


def test_the_point_in_time_recovery_row_is_every_table_s_period(raw):
    [row] = [r for r in readme_rows() if str(r["label"]).startswith("point-in-time recovery")]
    tables = [r for r in raw["Resources"].values() if r["Type"] == "AWS::DynamoDB::Table"]
    assert len(tables) == 6 and "six tables" in str(row["label"])
    for table in tables:
        spec = table["Properties"]["PointInTimeRecoverySpecification"]
        assert spec["PointInTimeRecoveryEnabled"] is True
        assert [spec["RecoveryPeriodInDays"] * DAY] == row["seconds"]
    assert row["keys"] == ["point_in_time_recovery"]


def test_rows_outside_the_template_are_the_provider_s_and_say_so():
    outside = [r for r in readme_rows() if not r["stores"] and not r["keys"]]
    # One row for both paths: a realtime prompt and a Message Batch's requests and results.
    assert [str(r["label"]) for r in outside] == ["the model provider"]
    lines = README.read_text(encoding="utf-8").splitlines()
    [line] = [x for x in lines if x.startswith("| the model provider |")]
    _store, holds, kept, _keys = (cell.strip() for cell in line.strip("|").split("|"))
    assert "each prompt" in holds and "Message Batch" in holds
    assert "deletes it after collection" in kept and "29 days" in kept
