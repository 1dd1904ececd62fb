"""Upsert of normalised failure items."""

from __future__ import annotations

from typing import Any

KEY_NAMES = ("upload_id", "failure_id")


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
