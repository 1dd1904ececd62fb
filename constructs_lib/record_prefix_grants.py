"""Grants on a shared idempotency table that reach one record prefix only (issue 34).

Several functions can share one table (Powertools prefixes each record id: a step's records
are ``<its construct path>#...``, the Prospect Uploader's splitter's
``prospect-splitter.split_upload#...``). A table-wide grant would let each of them read and
write the others' records: a batch step's staged rows hold prompts with row values, and a
writer of another step's records could plant an answer. So each function is granted its
actions on the table only for partition keys under its own prefix, with IAM's
``dynamodb:LeadingKeys`` condition (``ForAllValues:StringLike``: every key a request touches
must match).

``ForAllValues`` holds for a request that carries no partition key at all (a ``Scan``), so
only item actions (and ``Query``, whose key is a leading key) may be granted this way: a
``Scan`` grant would reach the whole table.

Example::

    grant_record_prefix(table, function, "Stack/Classify", "dynamodb:GetItem")
"""

from __future__ import annotations

from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam

#: The IAM condition key of the partition keys a DynamoDB request touches.
LEADING_KEYS = "dynamodb:LeadingKeys"
#: Actions that carry the partition key of every item they touch.
ITEM_ACTIONS = frozenset(
    {
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:BatchGetItem",
        "dynamodb:BatchWriteItem",
        "dynamodb:ConditionCheckItem",
        "dynamodb:Query",
    }
)
# IAM policy variables that stand for StringLike's special characters taken literally.
_LITERAL = {"$": "${$}", "*": "${*}", "?": "${?}"}


def prefix_pattern(prefix: str) -> str:
    """The ``StringLike`` pattern of every record id under ``prefix``: ``<prefix>#*``, the
    prefix's own ``*``, ``?`` and ``$`` taken literally."""
    literal = "".join(_LITERAL.get(character, character) for character in prefix)
    return f"{literal}#*"


def grant_record_prefix(
    table: dynamodb.ITable, grantee: iam.IGrantable, prefix: str, *actions: str
) -> iam.Grant:
    """Grant ``actions`` on ``table`` for items whose partition key starts with
    ``<prefix>#`` only; with a customer managed key, also what ``table.grant`` would grant
    on it. Raises ``ValueError`` for an action that is not an item action."""
    refused = sorted(set(actions) - ITEM_ACTIONS)
    if refused or not actions:
        raise ValueError(
            f"grant_record_prefix takes item actions only ({sorted(ITEM_ACTIONS)}), got "
            f"{refused or 'none'}: without a key, dynamodb:LeadingKeys would not limit them"
        )
    grant = iam.Grant.add_to_principal(
        grantee=grantee,
        actions=list(actions),
        resource_arns=[table.table_arn],
        conditions={"ForAllValues:StringLike": {LEADING_KEYS: [prefix_pattern(prefix)]}},
    )
    if table.encryption_key is not None:
        table.encryption_key.grant_encrypt_decrypt(grantee)
    return grant
