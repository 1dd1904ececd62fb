"""Alarms the library creates: one shape, "it happened at least once", everywhere."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import jsii
from aws_cdk import Annotations, Duration, IAspect, Stack, Token
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_events as events
from constructs import Construct, IConstruct


def is_default_bus(bus: events.IEventBus | None) -> bool:
    """True for no bus (the default) or a bus literally named ``default``."""
    if bus is None:
        return True
    name = bus.event_bus_name
    return not Token.is_unresolved(name) and name == "default"


def events_rule_metric(
    rule: events.IRule,
    metric_name: str,
    event_bus: events.IEventBus | None = None,
    period: Duration | None = None,
) -> cloudwatch.Metric:
    """An ``AWS/Events`` metric of one rule (Sum, default 1 minute).

    ``RuleName`` alone means the DEFAULT bus; a rule on a custom bus publishes
    with ``EventBusName`` too, and an alarm without it never fires.
    """
    dimensions = {"RuleName": rule.rule_name}
    if event_bus is not None and not is_default_bus(event_bus):
        dimensions["EventBusName"] = event_bus.event_bus_name
    return cloudwatch.Metric(
        namespace="AWS/Events",
        metric_name=metric_name,
        dimensions_map=dimensions,
        statistic="Sum",
        period=period or Duration.minutes(1),
    )


def occurrence_alarm(
    scope: Construct, id: str, metric: cloudwatch.IMetric, description: str
) -> cloudwatch.Alarm:
    """Alarm when ``metric`` is at least 1 in one period.

    Missing data is not breaching: EventBridge and Lambda error metrics are only
    published when non-zero, so silence means healthy.
    """
    return cloudwatch.Alarm(
        scope,
        id,
        metric=metric,
        threshold=1,
        evaluation_periods=1,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        alarm_description=description,
    )


def events_v2_subscriber_metric(
    event_bus_arn: str,
    subscriber_arn: str,
    metric_name: str,
    period: Duration | None = None,
) -> cloudwatch.Metric:
    """An ``AWS/EventsV2`` metric of one subscriber (Sum, default 1 minute).

    Subscriber metrics carry two dimensions, ``EventBus`` and ``Subscriber``, each
    holding the resource ARN (EventBridge user guide, "Observability for the
    Custom Event Bus").
    """
    return cloudwatch.Metric(
        namespace="AWS/EventsV2",
        metric_name=metric_name,
        dimensions_map={"EventBus": event_bus_arn, "Subscriber": subscriber_arn},
        statistic="Sum",
        period=period or Duration.minutes(1),
    )


def threshold_alarm(
    scope: Construct,
    id: str,
    metric: cloudwatch.IMetric,
    threshold: float,
    description: str,
) -> cloudwatch.Alarm:
    """Alarm when ``metric`` reaches ``threshold`` in one period; missing data is not breaching.

    An SQS queue that saw no activity for six hours stops publishing its metrics,
    and an empty buffer is healthy, so silence must not page anyone.
    """
    return cloudwatch.Alarm(
        scope,
        id,
        metric=metric,
        threshold=threshold,
        evaluation_periods=1,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        alarm_description=description,
    )


def has_alarm_action(alarm: cloudwatch.Alarm) -> bool:
    """True when ``alarm`` notifies someone when it fires (an alarm action; OK and
    insufficient-data actions do not count). Read from its template, so call it at synth."""
    cfn = cast(cloudwatch.CfnAlarm, alarm.node.default_child)
    return bool(Stack.of(alarm).resolve(cfn.alarm_actions))


@jsii.implements(IAspect)
class NobodyNotified:
    """At synth, warn on ``owner`` when some of its ``alarms`` have no alarm action.

    Added with ``Aspects.of(owner).add(...)`` in the owner's constructor: aspects run at
    synth, after every action the caller adds later. ``warning_id`` is the annotation id a
    caller acknowledges (``Annotations.of(owner).acknowledge_warning(warning_id, reason)``);
    ``message(silent, total)`` says how many of how many alarms notify nobody.
    """

    def __init__(
        self,
        owner: Construct,
        alarms: Sequence[cloudwatch.Alarm],
        warning_id: str,
        message: Callable[[int, int], str],
    ) -> None:
        self._owner = owner
        self._alarms = alarms
        self._warning_id = warning_id
        self._message = message

    def visit(self, node: IConstruct) -> None:
        """Act on the owner only (an aspect visits every child too)."""
        if node is not self._owner:
            return
        silent = [alarm for alarm in self._alarms if not has_alarm_action(alarm)]
        if silent:
            Annotations.of(self._owner).add_warning_v2(
                self._warning_id, self._message(len(silent), len(self._alarms))
            )
