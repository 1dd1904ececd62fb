"""The settings a lab step runs with: read from the synthesized template, and two variants.

Everything is read from ``cdk.out`` (the realtime model step of the Prospect Uploader): the
function timeout, the buffer and redrive queues' visibility timeout, redrive counts,
retention and maximum message size, ``MAX_ATTEMPTS``, ``MAX_EVENT_AGE_SECONDS`` and the key's
memory lifetime ``IDEMPOTENCY_EXPIRES_AFTER_SECONDS``.

Two variants a schedule runs on:

- :meth:`QueueSettings.for_the_lab`: the template's settings with ``max_event_age`` cut to
  :data:`LAB_MAX_EVENT_AGE` (a valid setting: shorter is always allowed), so a schedule of a
  few virtual hours reaches the end of the rate-limit and redrive windows. The queues keep
  the template's 14-day retention and the key its template lifetime.
- :meth:`QueueSettings.short_lived`: ``max_event_age`` of one hour and queues that keep a
  message :data:`SHORT_RETENTION` seconds, with the key's memory lifetime built the way the
  template builds its own: the template's lifetime minus its ``max_event_age`` and its
  retention is the construct's margin, and the short lifetime is ``max_event_age`` +
  retention + that margin (never below ``max_event_age``, the construct's older floor). A
  schedule of a few virtual days then crosses several lifetimes.

The dead-letter queue's maximum message size is :data:`DLQ_MAX_MESSAGE_BYTES` (256 KiB):
SQS's documented default is 1 MiB today, but a step may be given an existing DLQ made
before that, and the runtime assumes 256 KiB (``dead_letter.MAX_MESSAGE_BYTES``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

#: The lab's ``max_event_age`` on the template variant.
LAB_MAX_EVENT_AGE = 4 * 3600
#: The short-lived variant's ``max_event_age``.
SHORT_MAX_EVENT_AGE = 3600
#: The short-lived variant's queue retention: six hours, no shorter than the longest hold the
#: runtime itself allows for (Lambda async's 6 h), so the lifetime rule has one reading.
SHORT_RETENTION = 6 * 3600
#: SQS's documented default ``MaximumMessageSize`` (botocore's SQS model, CreateQueue).
SQS_DEFAULT_MAX_MESSAGE_BYTES = 1_048_576
#: SQS's documented default ``MessageRetentionPeriod``.
SQS_DEFAULT_RETENTION = 345_600
#: The lab DLQ's ``MaximumMessageSize``: see the module docstring.
DLQ_MAX_MESSAGE_BYTES = 262_144


@dataclass(frozen=True)
class QueueSettings:
    """A step's queue and function settings, as a synthesized template has them."""

    function_timeout: int
    visibility_timeout: int
    buffer_max_receive_count: int
    redrive_visibility_timeout: int
    redrive_max_receive_count: int
    max_attempts: int
    max_event_age: int
    #: The key's memory lifetime (``IDEMPOTENCY_EXPIRES_AFTER_SECONDS``).
    expires_after: int
    buffer_retention: int = SQS_DEFAULT_RETENTION
    redrive_retention: int = SQS_DEFAULT_RETENTION
    buffer_max_message_bytes: int = SQS_DEFAULT_MAX_MESSAGE_BYTES
    redrive_max_message_bytes: int = SQS_DEFAULT_MAX_MESSAGE_BYTES
    dlq_retention: int = SQS_DEFAULT_RETENTION
    dlq_max_message_bytes: int = DLQ_MAX_MESSAGE_BYTES
    #: ``template`` or ``short``.
    variant: str = "template"

    @classmethod
    def from_template(cls, template: dict[str, Any]) -> QueueSettings:
        """The settings of the realtime model step in ``template``: the function whose
        environment names a redrive queue and no batch delivery (the Prospect stack also
        has a Message Batches step), and its buffer, redrive and dead-letter queues."""
        resources = template["Resources"]
        [(function, env)] = [
            (resource["Properties"], variables)
            for resource in resources.values()
            if resource["Type"] == "AWS::Lambda::Function"
            and "REDRIVE_QUEUE_ARN"
            in (variables := resource["Properties"].get("Environment", {}).get("Variables", {}))
            and variables.get("MODEL_DELIVERY", "realtime") == "realtime"
        ]
        buffer = resources[env["BUFFER_QUEUE_URL"]["Ref"]]["Properties"]
        redrive = resources[env["REDRIVE_QUEUE_ARN"]["Fn::GetAtt"][0]]["Properties"]
        dlq = resources[redrive["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]]
        return cls(
            function_timeout=int(function["Timeout"]),
            visibility_timeout=int(buffer["VisibilityTimeout"]),
            buffer_max_receive_count=int(buffer["RedrivePolicy"]["maxReceiveCount"]),
            redrive_visibility_timeout=int(redrive["VisibilityTimeout"]),
            redrive_max_receive_count=int(redrive["RedrivePolicy"]["maxReceiveCount"]),
            max_attempts=int(env["MAX_ATTEMPTS"]),
            max_event_age=int(env["MAX_EVENT_AGE_SECONDS"]),
            expires_after=int(env["IDEMPOTENCY_EXPIRES_AFTER_SECONDS"]),
            buffer_retention=_retention(buffer),
            redrive_retention=_retention(redrive),
            buffer_max_message_bytes=_max_bytes(buffer),
            redrive_max_message_bytes=_max_bytes(redrive),
            dlq_retention=_retention(dlq["Properties"]),
        )

    @property
    def lifetime_margin(self) -> int:
        """What the key's lifetime keeps beyond ``max_event_age`` and the longer queue
        retention (negative when the lifetime does not outlive the queues)."""
        retention = max(self.buffer_retention, self.redrive_retention)
        return self.expires_after - self.max_event_age - retention

    def for_the_lab(self) -> QueueSettings:
        """The template variant (see the module docstring)."""
        return replace(self, max_event_age=min(self.max_event_age, LAB_MAX_EVENT_AGE))

    def short_lived(self) -> QueueSettings:
        """The short-lived variant (see the module docstring)."""
        margin = self.lifetime_margin
        lifetime = max(SHORT_MAX_EVENT_AGE, SHORT_MAX_EVENT_AGE + SHORT_RETENTION + margin)
        return replace(
            self,
            max_event_age=SHORT_MAX_EVENT_AGE,
            buffer_retention=SHORT_RETENTION,
            redrive_retention=SHORT_RETENTION,
            expires_after=lifetime,
            variant="short",
        )

    @property
    def dead_letter_path(self) -> int:
        """Seconds the redrive policies take at most to move a copy to the DLQ from its first
        receive: every receive of the buffer queue, then of the redrive queue, each after a
        visibility timeout (the runtime's retry spacing is shorter)."""
        return (
            self.buffer_max_receive_count * self.visibility_timeout
            + self.redrive_max_receive_count * self.redrive_visibility_timeout
        )

    @property
    def longest_retention(self) -> int:
        return max(self.buffer_retention, self.redrive_retention)


def _retention(properties: dict[str, Any]) -> int:
    return int(properties.get("MessageRetentionPeriod", SQS_DEFAULT_RETENTION))


def _max_bytes(properties: dict[str, Any]) -> int:
    return int(properties.get("MaximumMessageSize", SQS_DEFAULT_MAX_MESSAGE_BYTES))
