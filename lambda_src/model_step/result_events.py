"""Result events: each key's terminal outcome, published at most once on the step's result bus.

With ``RESULT_BUS_ARN`` set, a key's stored result becomes one event:

- ``detail-type`` :data:`COMPLETED` or :data:`DEAD_LETTERED`;
- ``source``: ``RESULT_EVENT_SOURCE``, the step's construct path;
- ``detail``: ``{"key": "<the key's record id>", "result": {...}, "replay_generation": n}``
  (the last only when present). ``result`` holds :data:`COMPLETED_FIELDS` or
  :data:`DEAD_LETTERED_FIELDS`: the request id and usage, or the error code, but never the
  model's raw answer text nor an error message (which may quote a row).
- Data only when asked (``RESULT_FIELDS``, issue 34): ``label``; ``parsed``
  (``parse_answer``'s value, free text a subscriber would see); ``key``, which adds
  ``"key_parts": [business key parts]`` (an email, if the key is one). Every subscriber of
  the bus sees what an event carries, so by default it carries ids, not data.

At most once per key and terminal outcome: the publish is an idempotent hand-off under its own
record (suffix ``#result-event``), like the DLQ's, so a duplicate delivery replays the
hand-off and publishes nothing, and an operator's retry (a new record key) publishes once
more. A kill between PutEvents and that record is reconciled through an intent written
before the publish (:mod:`.result_hand_off`). On a v2 bus each entry also carries
``SystemMetadata.DeduplicationId``: the key's record id. A publish that fails raises
:class:`~.errors.ResultEventError`, ``uncertain`` when the bus may have taken the event
(a read timeout, a connection closed after the request went out): the hand-off record is
released and the delivery is retried, and its stored result replays, so a retry never calls
the model. The ``events`` and ``eventbridgev2`` clients make one HTTP attempt per call
(:data:`CLIENT_CONFIG`): botocore's own retry after a timeout would be a hidden resend.

Example::

    publisher = ResultPublisher(bus_arn, "classic", "Stack/Classify", clients)
    publisher.publish(stored_result, deduplication_id=record_id)
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError

from .config import DEFAULT_RESULT_FIELDS
from .errors import ResultEventError
from .outcome import StepResult

#: The hand-off record's suffix, after the step's record prefix.
RESULT_EVENT_SUFFIX = "#result-event"
COMPLETED = "Model Step Completed"
DEAD_LETTERED = "Model Step Dead Lettered"
DETAIL_TYPES = (COMPLETED, DEAD_LETTERED)
#: The result fields a "Model Step Completed" event carries (each only when stored).
COMPLETED_FIELDS = (
    "status",
    "label",
    "parsed",
    "request_id",
    "usage",
    "model",
    "prompt_version",
    "stop_reason",
    "completed_at",
    # Message Batches delivery (issue 19): where the answer came from.
    "delivery",
    "batch_id",
    # Issue 32: what the request cost, at the price it was billed at.
    "cost_usd",
)
#: The result fields a "Model Step Dead Lettered" event carries.
DEAD_LETTERED_FIELDS = (
    "status",
    "error_code",
    "request_id",
    "model",
    "prompt_version",
    "dead_letter_id",
    # Message Batches delivery (issue 19).
    "delivery",
    "batch_id",
)
BusKind = Literal["classic", "v2"]
BUS_KINDS: tuple[BusKind, ...] = ("classic", "v2")
#: Result fields carried only when ``RESULT_FIELDS`` names them (``key`` is ``key_parts``,
#: beside ``result``); every other field of the two tuples above is an id, a code or usage.
OPTIONAL_RESULT_FIELDS = frozenset({"label", "parsed"})
#: PutEvents error codes worth sending again (EventBridge's own guidance).
RETRYABLE_ERROR_CODES = frozenset({"ThrottlingException", "InternalFailure"})
#: Sends of one entry within one delivery; after that the delivery itself is retried.
PUT_ATTEMPTS = 3
#: An event is at most 256 KB; a larger ``parsed`` value is left out (``parsed_omitted``).
MAX_DETAIL_BYTES = 200_000
#: DeduplicationId is at most 128 characters; a longer record id is sent as its SHA-256.
MAX_DEDUPLICATION_ID = 128
#: The result bus clients: one HTTP attempt per call (the publisher re-sends throttled
#: entries itself, and botocore's retry after a timeout would publish again unseen), and
#: short timeouts, so a v2 re-send ends well inside the bus's deduplication window.
#: ``total_max_attempts``, not ``max_attempts``: botocore reads ``max_attempts`` as retries
#: AFTER the first attempt, so ``{"max_attempts": 1}`` still sends twice.
CLIENT_CONFIG = Config(
    retries={"total_max_attempts": 1, "mode": "standard"}, connect_timeout=5, read_timeout=10
)
#: The services of the result bus clients.
CLIENT_SERVICES = ("events", "eventbridgev2")


def result_detail(
    result: StepResult, record_id: str, optional: frozenset[str] = DEFAULT_RESULT_FIELDS
) -> dict[str, Any]:
    """The event detail of a stored result: ``key`` is the key's ``record_id``; the optional
    fields (``label``, ``parsed``, ``key`` as ``key_parts``) only when ``optional`` names
    them."""
    fields = COMPLETED_FIELDS if result["status"] == "completed" else DEAD_LETTERED_FIELDS
    stored: Mapping[str, Any] = result
    detail: dict[str, Any] = {
        "key": record_id,
        "result": {
            name: stored[name]
            for name in fields
            if name in stored and (name not in OPTIONAL_RESULT_FIELDS or name in optional)
        },
    }
    if "key" in optional and result["key"] is not None:
        detail["key_parts"] = result["key"]
    if "replay_generation" in result:
        detail["replay_generation"] = result["replay_generation"]
    if len(json.dumps(detail, default=str).encode()) > MAX_DETAIL_BYTES:
        detail["result"].pop("parsed", None)
        detail["result"]["parsed_omitted"] = True
    return detail


def detail_type(result: StepResult) -> str:
    return COMPLETED if result["status"] == "completed" else DEAD_LETTERED


def deduplication_id(record_id: str) -> str:
    """The v2 ``DeduplicationId`` of a key: its record id, or that id's SHA-256 if too long."""
    if len(record_id) <= MAX_DEDUPLICATION_ID:
        return record_id
    return hashlib.sha256(record_id.encode()).hexdigest()


class ResultPublisher:
    """Puts one result event on a classic bus (``events``) or a v2 bus (``eventbridgev2``)."""

    def __init__(
        self,
        bus_arn: str,
        kind: BusKind,
        source: str,
        client: Callable[[str], Any],
        sleep: Callable[[float], None] = time.sleep,
        optional: frozenset[str] = DEFAULT_RESULT_FIELDS,
    ) -> None:
        """``client(service_name)`` returns a boto3 client; it is called on first publish.
        ``optional``: the optional fields events carry (``RESULT_FIELDS``), default the
        label only."""
        self._optional = optional
        self._bus_arn = bus_arn
        #: ``classic`` or ``v2``.
        self.kind: BusKind = kind
        self._kind = kind
        self._source = source
        self._client = client
        self._sleep = sleep

    def publish(self, result: StepResult, record_id: str) -> str:
        """Publish ``result`` and return the event id. Retries throttles and internal failures
        (:data:`PUT_ATTEMPTS` sends); raises :class:`ResultEventError` otherwise."""
        entry: dict[str, Any] = {
            "Source": self._source,
            "DetailType": detail_type(result),
            # Sorted: a replayed result (stored sorted) sends the same text as the fresh one.
            "Detail": json.dumps(
                result_detail(result, record_id, self._optional), default=str, sort_keys=True
            ),
        }
        if self._kind == "v2":
            entry["SystemMetadata"] = {"DeduplicationId": deduplication_id(record_id)}
        else:
            entry["EventBusName"] = self._bus_arn
        code = message = ""
        for attempt in range(PUT_ATTEMPTS):
            try:
                answer = self._put(entry)
            except Exception as exc:
                raise ResultEventError(
                    f"could not publish {entry['DetailType']!r}: {type(exc).__name__}",
                    uncertain=may_have_been_accepted(exc),
                ) from exc
            if not answer.get("ErrorCode"):
                return str(answer.get("EventId") or "")
            code, message = str(answer["ErrorCode"]), str(answer.get("ErrorMessage") or "")
            if code not in RETRYABLE_ERROR_CODES:
                break
            if attempt + 1 < PUT_ATTEMPTS:
                self._sleep(0.1 * 2**attempt)
        raise ResultEventError(f"{entry['DetailType']!r} not accepted: {code}: {message[:200]}")

    def _put(self, entry: dict[str, Any]) -> Mapping[str, Any]:
        if self._kind == "v2":
            response = self._client("eventbridgev2").put_events(
                EventBusArn=self._bus_arn, Entries=[entry]
            )
        else:
            response = self._client("events").put_events(Entries=[entry])
        [answer] = response.get("Entries") or [{"ErrorCode": "NoEntryInAnswer"}]
        return dict(answer)


def may_have_been_accepted(exc: BaseException) -> bool:
    """False when the bus certainly did not take the event: it answered with an error
    (``ClientError``), or botocore failed before a request went out (no connection, bad
    parameters, no credentials). True otherwise: a timeout or a connection closed after the
    request was sent, or an error this module does not know."""
    if isinstance(exc, ClientError):
        return False
    if isinstance(exc, HTTPClientError):
        return True  # sent, and no valid answer read: ReadTimeoutError, ConnectionClosedError
    return not isinstance(exc, BotoCoreError)
