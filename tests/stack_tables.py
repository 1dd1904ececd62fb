"""moto tables laid out exactly as the stacks define them: one place for every test's tables.

The layouts are read from the stacks' committed template snapshots
(``tests/infra/__snapshots__``), not written again here:

- they are the stacks' own definitions: the snapshot tests synthesize the stacks and fail
  when a template, a table's keys, indexes or TTL included, differs from its snapshot;
- reading them needs neither jsii nor ``cdk.out``, so the moto tests stay a tier of their
  own, runnable before any synth (``cdk.out`` is only built by ``make synth``, with pip);
- ``constructs_lib.defaults`` holds the secure props, but the key attributes, the
  ``OpenUploads`` index and the TTL attributes are arguments in ``stack.py``, so a copy
  of them would be needed beside it; the template has all of it in CloudFormation's own
  spelling, which is what ``CreateTable`` takes.

Usage::

    create_stack_table(session, "ProspectUploader/FailuresTable", "prospect-failures")
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

SNAPSHOTS = Path(__file__).resolve().parent / "infra" / "__snapshots__"
#: The template of each stack the tables come from, by stack name.
TEMPLATES = {
    "ProspectUploader": SNAPSHOTS / "test_prospect_uploader_stack/test_stack_matches_snapshot.json",
    # One IdempotentModelStep with the table it makes itself (no `table` prop).
    "IdempotentModelStepDemo": SNAPSHOTS
    / "test_snapshot_and_compliance/test_demo_stack_matches_snapshot.json",
}
#: The model step's own idempotency table, as ``IdempotentModelStep`` creates it.
MODEL_STEP_TABLE = "IdempotentModelStepDemo/Classify/IdempotencyTable"
#: The Prospect Uploader's tables.
PROSPECT_IDEMPOTENCY_TABLE = "ProspectUploader/IdempotencyTable"
FAILURES_TABLE = "ProspectUploader/FailuresTable"
PROSPECTS_TABLE = "ProspectUploader/ProspectsTable"
ROWS_TABLE = "ProspectUploader/RowsTable"
UPLOADS_TABLE = "ProspectUploader/UploadsTable"
UPLOAD_ROWS_TABLE = "ProspectUploader/UploadRowsTable"


@functools.cache
def _template(stack: str) -> dict[str, Any]:
    path = TEMPLATES.get(stack)
    if path is None:
        raise KeyError(f"no template snapshot for stack {stack!r}; known: {sorted(TEMPLATES)}")
    return json.loads(path.read_text(encoding="utf-8"))


def tables(stack: str) -> dict[str, dict[str, Any]]:
    """``construct path -> Properties`` of every DynamoDB table of ``stack``'s template."""
    found = {}
    for resource in _template(stack)["Resources"].values():
        if resource["Type"] == "AWS::DynamoDB::Table":
            path = resource.get("Metadata", {}).get("aws:cdk:path", "")
            found[path.removesuffix("/Resource")] = resource["Properties"]
    return found


def table_properties(construct_path: str) -> dict[str, Any]:
    """The template properties of the table at ``construct_path`` (``Stack/Construct``)."""
    stack = construct_path.split("/", 1)[0]
    found = tables(stack)
    if construct_path not in found:
        raise KeyError(f"{construct_path!r} is not a table of {stack}: {sorted(found)}")
    return found[construct_path]


def create_table_request(construct_path: str, name: str) -> dict[str, Any]:
    """``CreateTable`` parameters for the table at ``construct_path``, named ``name``."""
    props = table_properties(construct_path)
    request: dict[str, Any] = {
        "TableName": name,
        "KeySchema": props["KeySchema"],
        "AttributeDefinitions": props["AttributeDefinitions"],
        "BillingMode": props.get("BillingMode", "PAY_PER_REQUEST"),
    }
    if props.get("GlobalSecondaryIndexes"):
        request["GlobalSecondaryIndexes"] = [
            {key: index[key] for key in ("IndexName", "KeySchema", "Projection")}
            for index in props["GlobalSecondaryIndexes"]
        ]
    return request


def create_stack_table(session: Any, construct_path: str, name: str) -> Any:
    """Create the table at ``construct_path`` in moto as ``name``, with its TTL, and return
    its boto3 ``Table`` resource. ``session`` is a boto3 session inside ``mock_aws``."""
    create_stack_table_with(session.client("dynamodb"), construct_path, name)
    return session.resource("dynamodb").Table(name)


def create_stack_table_with(client: Any, construct_path: str, name: str) -> None:
    """Create the table at ``construct_path`` in moto as ``name``, with its TTL, through
    ``client`` (a DynamoDB client inside ``mock_aws``; moto's tables belong to the account,
    not to a client, so a client made once for the run serves)."""
    client.create_table(**create_table_request(construct_path, name))
    ttl = table_properties(construct_path).get("TimeToLiveSpecification")
    if ttl and ttl.get("Enabled"):
        client.update_time_to_live(
            TableName=name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl["AttributeName"]},
        )
