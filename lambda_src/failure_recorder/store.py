"""Upsert of normalised failure items, and each row's history of attempts."""

from __future__ import annotations

import re
from typing import Any

KEY_NAMES = ("upload_id", "failure_id")
#: The list of a row's failed attempts, oldest first, stored on its failure item (so it
#: expires with it), and the ids of the dead letters already in it (a redelivered dead
#: letter is not listed twice).
ATTEMPTS = "attempts"
ATTEMPT_IDS = "attempt_ids"
#: The model step's words for the attempt that failed last ("on attempt 1 of 1").
_ATTEMPT = re.compile(r"\battempt (\d+) of (\d+)\b")


def upsert_failure(table: Any, item: dict[str, Any]) -> None:
    """Write ``item`` so that a replay of the same failure converges on one item.

    UpdateItem (not PutItem) keeps attributes other writers own, e.g. the viewer's
    ``retried_at``/``retry_count``, and ``first_recorded_at`` keeps the first sighting.
    """
    key = {name: item[name] for name in KEY_NAMES}
    fields = {name: value for name, value in item.items() if name not in KEY_NAMES}
    names = {f"#a{index}": name for index, name in enumerate(fields)}
    values = {f":v{index}": value for index, value in enumerate(fields.values())}
    assignments = [f"#a{index} = :v{index}" for index in range(len(fields))]
    names["#first"] = "first_recorded_at"
    values[":first"] = item["recorded_at"]
    assignments.append("#first = if_not_exists(#first, :first)")
    table.update_item(
        Key=key,
        UpdateExpression="SET " + ", ".join(assignments),
        ExpressionAttributeNames=names,
        ExpressionAttributeValues=values,
    )


def attempt_entry(item: dict[str, Any], generation: int) -> dict[str, Any]:
    """What the history keeps of one failed attempt: codes, ids and times, never a value.

    ``generation`` is the replay generation the attempt ran under (0: the upload itself,
    1, 2, ...: an operator's retries); ``attempt``/``of`` the model step's attempt count
    when its reason names one (a transient failure's last attempt)."""
    entry: dict[str, Any] = {
        "generation": generation,
        "error_code": str(item.get("error_code") or "Unknown"),
        "recorded_at": str(item["recorded_at"]),
    }
    if item.get("request_id"):
        entry["request_id"] = str(item["request_id"])
    found = _ATTEMPT.search(str(item.get("reason") or ""))
    if found:
        entry["attempt"], entry["of"] = int(found.group(1)), int(found.group(2))
    return entry


def append_attempt(table: Any, item: dict[str, Any], generation: int) -> bool:
    """Add this failure to its row's history once (keyed on its dead-letter id, else its
    message id). False when it is listed already (a redelivered or re-sent dead letter)."""
    entry_id = str(item.get("dead_letter_id") or item.get("message_id") or item["recorded_at"])
    try:
        table.update_item(
            Key={name: item[name] for name in KEY_NAMES},
            UpdateExpression=(
                "SET #attempts = list_append(if_not_exists(#attempts, :empty), :entry) ADD #ids :id"
            ),
            ConditionExpression="attribute_not_exists(#ids) OR NOT contains(#ids, :one)",
            ExpressionAttributeNames={"#attempts": ATTEMPTS, "#ids": ATTEMPT_IDS},
            ExpressionAttributeValues={
                ":empty": [],
                ":entry": [attempt_entry(item, generation)],
                ":id": {entry_id},
                ":one": entry_id,
            },
        )
    except table.meta.client.exceptions.ConditionalCheckFailedException:
        return False
    return True
