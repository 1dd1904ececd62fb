"""ModelStepDashboard: one CloudWatch dashboard for one or more model steps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct, Node

from . import defaults
from ._validation import PropValidationError, check_duration_range

#: CloudWatch dashboards are 24 grid units wide; three graphs of 8 fill a row.
_GRAPH_WIDTH = 8
_GRAPH_HEIGHT = 6
#: The period range a graph allows here: a minute (the queues' resolution) to a day.
PERIOD_RANGE = (Duration.minutes(1), Duration.days(1))


class DashboardStep(Protocol):
    """What a dashboard row reads of a step: its construct path, its alarms and the metrics
    it graphs. ``IdempotentModelStep`` is one; so is any construct of yours with these.

    A protocol here, not an import of ``IdempotentModelStep``: the step builds its own
    dashboard (``dashboard=True``), so the dashboard module must not depend on the step's.
    """

    @property
    def node(self) -> Node:
        """The construct's node (the row's title is its path)."""
        ...

    @property
    def alarms(self) -> Sequence[cloudwatch.IAlarm]:
        """The alarms whose states the row shows."""
        ...

    def metric_model_requests(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Billed model requests."""
        ...

    def metric_duplicates_suppressed(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Deliveries answered from a stored outcome."""
        ...

    def metric_rate_limited(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Rate-limited model requests."""
        ...

    def metric_transient_failures(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Failures a retry may fix."""
        ...

    def metric_non_retryable_failures(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Failures dead-lettered at once."""
        ...

    def metric_dead_letter_visible(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Messages waiting in the dead-letter queue."""
        ...

    def metric_buffer_depth(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Rows waiting in the buffer queue."""
        ...

    def metric_buffer_age(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Age of the oldest buffered row, in seconds."""
        ...

    def metric_input_tokens(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Input tokens of billed answers."""
        ...

    def metric_output_tokens(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Output tokens of billed answers."""
        ...

    def metric_cache_write_input_tokens(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Input tokens written to the prompt cache."""
        ...

    def metric_cache_read_input_tokens(self, period: Duration | None = None) -> cloudwatch.Metric:
        """Input tokens read from the prompt cache."""
        ...


class ModelStepDashboard(Construct):
    """One CloudWatch dashboard with a row of widgets per model step.

    For each step, in order:

    - **Model requests**: billed ``ModelRequests``, ``DuplicatesSuppressed``,
      ``RateLimited``, ``TransientFailures`` and ``NonRetryableFailures`` (the runtime's
      EMF metrics, Sum per ``period``);
    - **Queues**: the DLQ's depth, the buffer queue's depth (both Maximum) and the age of
      its oldest row (seconds, right axis);
    - **Tokens**: ``InputTokens``, ``OutputTokens``, ``CacheWriteInputTokens`` and
      ``CacheReadInputTokens`` of billed answers (Sum): a cache that stopped hitting shows
      as writes where reads were;
    - **Alarms**: the state of every alarm in the step's ``alarms``.

    Each widget's metric comes from the step's own ``metric_*()`` method, so the dashboard
    graphs exactly what the step alarms on. Add more with :meth:`add_widgets`.

    Example::

        ModelStepDashboard(self, "Dashboard", steps=[classify, outreach])

    :param steps: the steps to show (``IdempotentModelStep`` or any :class:`DashboardStep`),
        at least one; each gets its own row. Required.
    :param period: the period of every graph, 1 minute to 1 day, default 5 minutes.
    :param dashboard_name: default: none, CloudFormation generates a unique name.

    The dashboard opens on the last 3 hours (``DEFAULT_DASHBOARD_INTERVAL``).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        steps: Sequence[DashboardStep],
        period: Duration = defaults.DEFAULT_DASHBOARD_PERIOD,
        dashboard_name: str | None = None,
    ) -> None:
        super().__init__(scope, id)
        owner = f"ModelStepDashboard '{self.node.path}'"
        if not steps:
            raise PropValidationError(f"{owner}: steps must name at least one step, got []")
        check_duration_range(owner, "period", period, *PERIOD_RANGE)
        #: The steps shown, in order.
        self.steps = list(steps)
        #: The CloudWatch dashboard.
        self.dashboard = cloudwatch.Dashboard(
            self,
            "Dashboard",
            dashboard_name=dashboard_name,
            default_interval=defaults.DEFAULT_DASHBOARD_INTERVAL,
        )
        for step in self.steps:
            self.dashboard.add_widgets(*step_widgets(step, period))

    def add_widgets(self, *widgets: cloudwatch.IWidget) -> None:
        """Add a row of widgets below the steps' rows."""
        self.dashboard.add_widgets(*widgets)


def step_widgets(step: DashboardStep, period: Duration) -> list[cloudwatch.IWidget]:
    """The widgets of one step's row: requests, queues, tokens, then its alarms' states."""
    path = step.node.path
    return [
        cloudwatch.TextWidget(markdown=f"### Model step `{path}`", width=24, height=1),
        cloudwatch.GraphWidget(
            title="Model requests and failures",
            left=[
                step.metric_model_requests(period),
                step.metric_duplicates_suppressed(period),
                step.metric_rate_limited(period),
                step.metric_transient_failures(period),
                step.metric_non_retryable_failures(period),
            ],
            width=_GRAPH_WIDTH,
            height=_GRAPH_HEIGHT,
        ),
        cloudwatch.GraphWidget(
            title="Queues: DLQ and buffer depth, buffer age",
            left=[
                step.metric_dead_letter_visible(period).with_(label="DLQ depth"),
                step.metric_buffer_depth(period).with_(label="Buffer depth"),
            ],
            right=[step.metric_buffer_age(period).with_(label="Oldest buffered row (s)")],
            width=_GRAPH_WIDTH,
            height=_GRAPH_HEIGHT,
        ),
        cloudwatch.GraphWidget(
            title="Tokens: input, output, prompt cache writes and reads",
            left=[
                step.metric_input_tokens(period),
                step.metric_output_tokens(period),
                step.metric_cache_write_input_tokens(period),
                step.metric_cache_read_input_tokens(period),
            ],
            width=_GRAPH_WIDTH,
            height=_GRAPH_HEIGHT,
        ),
        cloudwatch.AlarmStatusWidget(
            title="Alarms", alarms=list(step.alarms), width=24, height=_GRAPH_HEIGHT // 2
        ),
    ]


__all__ = ["DashboardStep", "ModelStepDashboard", "step_widgets"]
