"""EventBusV2: a typed wrapper around an EventBridge Custom Event Bus (AWS::EventsV2::EventBus).

aws-cdk-lib has only the L1 (``aws_eventsv2.CfnEventBus``). This construct gives it
the two attributes other constructs need and a least-privilege publish grant, so
an :class:`~constructs_lib.IdempotentModelStep` can subscribe to it and a producer
can publish to it without hand-written IAM.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Arn, ArnFormat, Fn, Names, Token
from aws_cdk import aws_eventsv2 as eventsv2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from ._validation import PropValidationError, check_int_range

#: ``Name`` must start with a letter or digit, then letters, digits, ``.``, ``-``
#: or ``_``, at most 256 characters. 64 keeps it readable in the console.
_NAME_MAX_LENGTH = 64


class EventBusV2Base(Construct):
    """What a step and a producer need from a v2 bus: its ARN, its name, a publish grant.

    Implemented by :class:`EventBusV2` (a bus this stack creates) and by
    :meth:`EventBusV2.from_event_bus_arn` (a bus created elsewhere).
    """

    #: The bus ARN (``arn:aws:events:<region>:<account>:event-busv2/<name>/<id>``).
    event_bus_arn: str
    #: The bus name.
    event_bus_name: str

    def grant_put_events_to(
        self,
        grantee: iam.IGrantable,
        *,
        sources: Sequence[str],
        detail_types: Sequence[str],
    ) -> iam.Grant:
        """Let ``grantee`` publish with ``PutEvents``, only the given sources and detail types.

        Grants ``events:PutEvents`` on this bus's ARN, conditioned on the
        ``events:source`` and ``events:detail-type`` keys the service supplies on
        PutEvents, so a compromised producer cannot publish another kind of event
        onto the bus. No ``PutRawEvents`` (a different payload shape) and no
        ``DescribeEventBus``.

        :param sources: the ``Source`` values the grantee may publish; at least one.
        :param detail_types: the ``DetailType`` values; at least one.
        """
        if not sources or not detail_types:
            raise PropValidationError(
                f"EventBusV2 '{self.node.path}': grant_put_events_to needs at least one "
                f"source and one detail type, got sources={list(sources)!r} "
                f"detail_types={list(detail_types)!r}"
            )
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["events:PutEvents"],
            resource_arns=[self.event_bus_arn],
            conditions={
                "StringEquals": {
                    "events:source": list(sources),
                    "events:detail-type": list(detail_types),
                }
            },
        )


class EventBusV2(EventBusV2Base):
    """An EventBridge Custom Event Bus (v2): publish-side deduplication, subscribers.

    Unlike a classic bus, a v2 bus accepts ``SystemMetadata.DeduplicationId`` on
    each ``PutEvents`` entry and drops a repeat within 300 seconds (answering
    ``SuccessCode: DEDUPLICATED``). Consumers attach ``AWS::EventsV2::Subscriber``
    resources instead of rules; pass this bus as ``event_bus`` to
    :class:`~constructs_lib.IdempotentModelStep` and it subscribes for you::

        bus = EventBusV2(self, "RowBus")
        bus.grant_put_events_to(splitter, sources=["prospect-uploader"],
                                detail_types=["Prospect Row Validated"])
        IdempotentModelStep(self, "Classify", event_bus=bus, ...)

    Attributes: ``event_bus_arn``, ``event_bus_name`` and ``resource`` (the L1).

    :param description: default: none.
    :param retention_days: days events are kept on the bus for replay, 1-365.
        Default: the service default (none set).
    :param encryption_key: a customer managed KMS key. Default: an AWS owned key.
        With a key, its policy must allow ``events.amazonaws.com``.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        description: str | None = None,
        retention_days: int | None = None,
        encryption_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, id)
        owner = f"EventBusV2 '{self.node.path}'"
        if retention_days is not None:
            check_int_range(owner, "retention_days", retention_days, 1, 365)
        # CloudFormation requires a Name; derive it from the construct path (as
        # CDK does for a classic EventBus), never from user input, so two stacks
        # deploy side by side and the name is stable across deploys.
        name = Names.unique_resource_name(
            self, max_length=_NAME_MAX_LENGTH, separator="-", allowed_special_characters="-_."
        )
        self.resource = eventsv2.CfnEventBus(
            self,
            "Resource",
            name=name,
            description=description,
            storage_configuration=eventsv2.CfnEventBus.StorageConfigurationProperty(
                retention_period_in_days=retention_days
            )
            if retention_days is not None
            else None,
            encryption_configuration=eventsv2.CfnEventBus.EncryptionConfigurationProperty(
                kms_key_identifier=encryption_key.key_arn
            )
            if encryption_key is not None
            else None,
        )
        #: The bus ARN (``arn:aws:events:<region>:<account>:event-busv2/<name>/<id>``).
        #: It carries a service-generated id, so it is only known after deploy.
        self.event_bus_arn: str = self.resource.attr_event_bus_arn
        #: The bus name.
        self.event_bus_name: str = name

    @staticmethod
    def from_event_bus_arn(scope: Construct, id: str, event_bus_arn: str) -> EventBusV2Base:
        """A v2 bus created elsewhere (another stack or account), by its ARN.

        A step subscribes to it like to its own bus. The subscriber must live in
        the subscriber's account; a bus in another account must share itself
        (AWS RAM or its resource policy) with that account.
        """
        return _ImportedEventBusV2(scope, id, event_bus_arn)


class _ImportedEventBusV2(EventBusV2Base):
    def __init__(self, scope: Construct, id: str, event_bus_arn: str) -> None:
        super().__init__(scope, id)
        if not Token.is_unresolved(event_bus_arn) and ":event-busv2/" not in event_bus_arn:
            raise PropValidationError(
                f"EventBusV2.from_event_bus_arn '{self.node.path}': event_bus_arn must be a "
                f"v2 bus ARN (arn:aws:events:<region>:<account>:event-busv2/<name>/<id>), "
                f"got {event_bus_arn!r}"
            )
        self.event_bus_arn = event_bus_arn
        # The resource is "event-busv2/<name>/<id>": the name is its second part.
        resource_name = Arn.split(event_bus_arn, ArnFormat.SLASH_RESOURCE_NAME).resource_name
        self.event_bus_name = Fn.select(0, Fn.split("/", resource_name or ""))


__all__ = ["EventBusV2", "EventBusV2Base"]
