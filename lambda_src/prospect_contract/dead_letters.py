"""What the pipeline's dead-letter queue (``FailureQueue``) receives, and from whom.

``docs/contract.md`` §6 describes each message shape. The failure recorder reads these
names; the senders are AWS services and the model step, which spells its own (this module
is what the Prospect functions rely on, not a copy the runtime imports).
Standard library only.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

# -- message attributes of an EventBridge rule's DLQ message (the body is the event)
RULE_ARN = "RULE_ARN"
TARGET_ARN = "TARGET_ARN"
ERROR_CODE = "ERROR_CODE"
ERROR_MESSAGE = "ERROR_MESSAGE"

# -- the model step's own dead letter (the body is the event): ERROR_CODE and
# ERROR_MESSAGE as above, plus
REQUEST_ID = "REQUEST_ID"  # the model API's request id, when it answered
DEAD_LETTER_ID = "DEAD_LETTER_ID"  # the same id as the body's ``dead_letter.id``

# -- a Lambda function DLQ (not an on-failure destination) spells its attributes so
LAMBDA_ERROR_CODE = "ErrorCode"
LAMBDA_ERROR_MESSAGE = "ErrorMessage"
LAMBDA_REQUEST_ID = "RequestID"

# -- a Lambda on-failure destination's record (the event is inside it)
ON_FAILURE_CONTEXT = "requestContext"
ON_FAILURE_PAYLOAD = "requestPayload"
ON_FAILURE_RESPONSE = "responsePayload"

#: The top-level body member the model step adds to the original event of its dead letters.
DEAD_LETTER_MEMBER = "dead_letter"


class PayloadOmitted(TypedDict):
    """``dead_letter.payload_omitted``: the body was cut to fit the queue. ``fields`` are
    the members left out (``detail.<name>``; never the event's ids nor the business key),
    ``bytes`` and ``sha256`` describe the full body the model step could not send."""

    fields: list[str]
    bytes: int
    sha256: str


class DeadLetterMember(TypedDict):
    """``body["dead_letter"]``: ``id`` (64 lowercase hex) is stable per dead-lettered
    record, so every DLQ message for one key carries the same id. ``record``: the key's
    idempotency record, on a ``ResultEventUndeliverable`` dead letter (its redrive publishes
    that record's result). ``payload_omitted``: see :class:`PayloadOmitted`."""

    id: str
    error_code: str
    record: NotRequired[str]
    payload_omitted: NotRequired[PayloadOmitted]


#: The marker member of a body cut to fit its queue.
PAYLOAD_OMITTED = "payload_omitted"


#: The code of a row the classify step's buffer queue gave up on after its last receive:
#: sent by the model step as ``ERROR_CODE``, or given by the recorder to a message that
#: SQS redrove with no error attributes. Transient: a retry may well succeed.
RECEIVES_EXHAUSTED = "ReceivesExhausted"
#: A JSON object body of no shape above (for example the v2 bus's own dead-letter record).
UNRECOGNISED_DEAD_LETTER = "UnrecognisedDeadLetter"
#: A body that is not a JSON object.
UNPARSEABLE_DEAD_LETTER = "UnparseableDeadLetter"
