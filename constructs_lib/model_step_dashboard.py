"""ModelStepDashboard: one CloudWatch dashboard for one or more model steps."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from aws_cdk import Duration, Token
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_lambda as lambda_
from constructs import Construct, Node

from . import defaults
from ._validation import PropValidationError, check_duration_range
from .model_prices import ModelPrice

#: CloudWatch dashboards are 24 grid units wide; three graphs of 8 fill a row.
_GRAPH_WIDTH = 8
_GRAPH_HEIGHT = 6
#: The period range a graph allows here: a minute (the queues' resolution) to a day.
PERIOD_RANGE = (Duration.minutes(1), Duration.days(1))

#: The runbook page, in the repository's ``docs/`` directory.
RUNBOOK_PAGE = "operations.md"
#: Each alarm the library puts on a step (by construct id) -> the anchor of its entry in
#: docs/operations.md and what it means, in a few words. ``tests/infra`` checks that every
#: alarm of a step has one and that each anchor is a heading of the page.
RUNBOOK_ENTRIES: Mapping[str, tuple[str, str]] = {
    "SentToDlqAlarm": (
        "senttodlqalarm-eventbridge-gave-up-delivering-to-the-buffer-queue",
        "EventBridge gave up delivering to the buffer queue",
    ),
    "FailedToBeSentToDlqAlarm": (
        "failedtobesenttodlqalarm-events-were-lost",
        "events were lost",
    ),
    "DeadLetterMessagesAlarm": (
        "deadlettermessagesalarm-and-deadletterreceivedalarm-a-message-reached-the-dlq",
        "messages wait on the DLQ",
    ),
    "DeadLetterReceivedAlarm": (
        "deadlettermessagesalarm-and-deadletterreceivedalarm-a-message-reached-the-dlq",
        "a message reached the DLQ",
    ),
    "RedriveQueueAlarm": (
        "redrivequeuealarm-a-row-ran-out-of-receives",
        "a row ran out of receives",
    ),
    "ConfigurationErrorsAlarm": (
        "configurationerrorsalarm-configuration-errors",
        "the deployment refuses the step's own table, queue or secret",
    ),
    "BufferAgeAlarm": (
        "bufferagealarm-rows-are-waiting-behind-the-cap",
        "rows are waiting behind the cap",
    ),
    "ResultEventsUncertainAlarm": (
        "resulteventsuncertainalarm-a-result-event-may-be-missing",
        "a result event may be missing",
    ),
    "OldestOpenBatchAlarm": (
        "oldestopenbatchalarm-a-message-batch-is-not-being-collected",
        "a Message Batch is not being collected",
    ),
    "BatchLostAlarm": (
        "batchlostalarm-a-message-batch-was-lost",
        "a Message Batch was lost",
    ),
}
#: Where an alarm without an entry of its own links: the table of a step's alarms.
RUNBOOK_FALLBACK_ANCHOR = "the-alarms-of-one-idempotentmodelstep"
#: The Logs Insights query of the failures-by-code widget: the runtime's structured log
#: lines of a dead letter (``error_code``, once per key, as ``NonRetryableFailures``
#: counts) and of a transient failure (its code in ``error_type``, once per failed
#: delivery, as ``TransientFailures`` counts), counted by outcome and code.
FAILURES_BY_CODE_QUERY = (
    "fields coalesce(error_code, error_type) as code",
    'filter outcome = "dead_lettered" or outcome = "retry"',
    "stats count(*) as failures by outcome, code",
    "sort failures desc",
    "limit 50",
)


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
    """One CloudWatch dashboard with rows of widgets per model step.

    For each step, in order:

    - **Model requests**: billed ``ModelRequests``, ``DuplicatesSuppressed``,
      ``RateLimited``, ``TransientFailures`` and ``NonRetryableFailures`` (the runtime's
      EMF metrics, Sum per ``period``);
    - **Queues**: the DLQ's depth, the buffer queue's depth (both Maximum) and the age of
      its oldest row (seconds, right axis);
    - **Tokens**: ``InputTokens``, ``OutputTokens``, ``CacheWriteInputTokens`` and
      ``CacheReadInputTokens`` of billed answers (Sum): a cache that stopped hitting shows
      as writes where reads were;
    - **Failures by error code**: a Logs Insights table over the log group of every
      function of the step: dead letters (``error_code``) and transient failures (their
      code, ``error_type``), counted by outcome and code. The runtime's metrics carry no
      code (one ``service`` dimension), its structured log lines do;
    - **Prompt cache**: the share of prompt tokens read from and written to the cache (%,
      metric math over the four token metrics);
    - **Cost per period**: US dollars per ``period``, metric math over the four token
      metrics at the step's ``model_price`` (its cache writes at its ``prompt_cache`` TTL,
      less the batch discount under batch delivery), at the rates up to the model's
      long-context threshold (a prompt over it costs more). A step without a known price
      gets a text widget saying the cost is omitted and why;
    - **Lambda**, one graph per function of the step (every ``lambda_.Function`` in its
      construct tree: the step's function, which also runs the batch ticks): ``Errors``
      and ``Throttles`` (Sum) and ``Duration`` p50 and p99 (ms, right axis);
    - **Message Batches** (batch delivery only): ``OldestOpenBatchAgeSeconds`` (Maximum, 0
      when no batch is open) and ``OpenBatches`` (Maximum), ``BatchesLost`` and
      ``RowsStaged`` (Sum);
    - **Alarms**: the state of every alarm in the step's ``alarms``;
    - **Runbook**: for each alarm, its entry in the repository's ``docs/operations.md``
      (:data:`RUNBOOK_ENTRIES`).

    Each graph of a step metric uses the step's own ``metric_*()`` method where it has one,
    so the dashboard graphs exactly what the step alarms on. The widgets that read more than
    :class:`DashboardStep` (functions, price, delivery) find it on ``IdempotentModelStep``
    and are left out for a step without it. Add more with :meth:`add_widgets`.

    Example::

        ModelStepDashboard(self, "Dashboard", steps=[classify, outreach],
                           docs_url="https://github.com/<owner>/<repo>/blob/main/docs")

    :param steps: the steps to show (``IdempotentModelStep`` or any :class:`DashboardStep`),
        at least one; each gets its own rows. Required.
    :param period: the period of every graph, 1 minute to 1 day, default 5 minutes.
    :param dashboard_name: default: none, CloudFormation generates a unique name.
    :param docs_url: the ``http(s)://`` URL of the library's ``docs/`` directory, e.g.
        ``https://github.com/<owner>/<repo>/blob/main/docs``: the runbook widget links each
        alarm to ``<docs_url>/operations.md#<anchor>``. Default None: the library publishes
        no docs URL, so each entry is named as ``docs/operations.md#<anchor>`` (the file in
        the library's repository), not linked.

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
        docs_url: str | None = None,
    ) -> None:
        super().__init__(scope, id)
        owner = f"ModelStepDashboard '{self.node.path}'"
        if not steps:
            raise PropValidationError(f"{owner}: steps must name at least one step, got []")
        check_duration_range(owner, "period", period, *PERIOD_RANGE)
        check_docs_url(owner, docs_url)
        #: The steps shown, in order.
        self.steps = list(steps)
        #: The URL of the ``docs/`` directory the runbook widget links to; None: not linked.
        self.docs_url = docs_url.rstrip("/") if docs_url is not None else None
        #: The CloudWatch dashboard.
        self.dashboard = cloudwatch.Dashboard(
            self,
            "Dashboard",
            dashboard_name=dashboard_name,
            default_interval=defaults.DEFAULT_DASHBOARD_INTERVAL,
        )
        for step in self.steps:
            self.dashboard.add_widgets(*step_widgets(step, period, docs_url=self.docs_url))

    def add_widgets(self, *widgets: cloudwatch.IWidget) -> None:
        """Add a row of widgets below the steps' rows."""
        self.dashboard.add_widgets(*widgets)


def check_docs_url(owner: str, docs_url: str | None) -> None:
    """Raise unless ``docs_url`` is None or an ``http(s)://`` URL (a token is taken as is)."""
    if docs_url is None or (isinstance(docs_url, str) and Token.is_unresolved(docs_url)):
        return
    if not isinstance(docs_url, str) or not docs_url.startswith(("https://", "http://")):
        raise PropValidationError(
            f"{owner}: docs_url must be None or the https:// URL of the library's docs/ "
            f"directory (e.g. https://github.com/<owner>/<repo>/blob/main/docs), got "
            f"{docs_url!r}"
        )


def step_widgets(
    step: DashboardStep, period: Duration, *, docs_url: str | None = None
) -> list[cloudwatch.IWidget]:
    """The widgets of one step's rows: requests, queues, tokens; failures by code, prompt
    cache, cost; each function's Lambda metrics (and the batches under batch delivery); its
    alarms' states and their runbook entries (linked under ``docs_url``)."""
    path = step.node.path
    functions = step_functions(step)
    widgets: list[cloudwatch.IWidget] = [
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
    ]
    if functions:
        widgets.append(failures_by_code_widget(functions))
    widgets.append(prompt_cache_widget(step, period))
    widgets.append(cost_widget(step, period))
    widgets.extend(lambda_widget(step, function, period) for function in functions)
    if getattr(getattr(step, "delivery", None), "is_batch", False):
        widgets.append(batch_widget(step, period))
    widgets.append(
        cloudwatch.AlarmStatusWidget(
            title="Alarms", alarms=list(step.alarms), width=24, height=_GRAPH_HEIGHT // 2
        )
    )
    widgets.append(runbook_widget(step, docs_url))
    return widgets


def step_functions(step: DashboardStep) -> list[lambda_.Function]:
    """Every Lambda function in the step's construct tree, in construct order."""
    return [child for child in step.node.find_all() if isinstance(child, lambda_.Function)]


def failures_by_code_widget(functions: Sequence[lambda_.Function]) -> cloudwatch.IWidget:
    """Failures by outcome and error code, from the functions' structured logs."""
    return cloudwatch.LogQueryWidget(
        title="Failures by error code (dead letters: error_code; transient: error_type)",
        log_group_names=[function.log_group.log_group_name for function in functions],
        query_lines=list(FAILURES_BY_CODE_QUERY),
        view=cloudwatch.LogQueryVisualizationType.TABLE,
        width=_GRAPH_WIDTH,
        height=_GRAPH_HEIGHT,
    )


def _token_metrics(step: DashboardStep, period: Duration) -> dict[str, cloudwatch.IMetric]:
    """The four token metrics by metric-math id (Sum per ``period``)."""
    return {
        "tin": step.metric_input_tokens(period),
        "tout": step.metric_output_tokens(period),
        "tcw": step.metric_cache_write_input_tokens(period),
        "tcr": step.metric_cache_read_input_tokens(period),
    }


def prompt_cache_widget(step: DashboardStep, period: Duration) -> cloudwatch.IWidget:
    """The share of prompt tokens (uncached input + cache writes + cache reads) read from
    and written to the prompt cache, per period."""
    tokens = _token_metrics(step, period)
    prompt = "(FILL(tin,0)+FILL(tcw,0)+FILL(tcr,0))"
    using = {key: tokens[key] for key in ("tin", "tcw", "tcr")}
    return cloudwatch.GraphWidget(
        title="Prompt cache: % of prompt tokens read from and written to the cache",
        left=[
            cloudwatch.MathExpression(
                expression=f"100*FILL(tcr,0)/{prompt}",
                using_metrics=using,
                label="Read from cache (%)",
                period=period,
            ),
            cloudwatch.MathExpression(
                expression=f"100*FILL(tcw,0)/{prompt}",
                using_metrics=using,
                label="Written to cache (%)",
                period=period,
            ),
        ],
        left_y_axis=cloudwatch.YAxisProps(min=0, max=100, label="%", show_units=False),
        width=_GRAPH_WIDTH,
        height=_GRAPH_HEIGHT,
    )


def _rate(value: float) -> str:
    """A rate as metric math reads it: a plain decimal, never an exponent."""
    return f"{value:.9f}".rstrip("0").rstrip(".") or "0"


def cost_expression(price: ModelPrice, prompt_cache: str, batch: bool) -> str:
    """Dollars per period of the four token metrics at ``price``, as the runtime prices a
    request below the long-context threshold (``model_step.request_cost``): cache writes at
    the ``prompt_cache`` TTL (``"1h"``, else the 5-minute rate), less the batch discount."""
    write = price.cache_write_1h if prompt_cache == "1h" else price.cache_write_5m
    discount = f"*{_rate(1 - price.batch_discount)}" if batch else ""
    return (
        f"(FILL(tin,0)*{_rate(price.input)}+FILL(tout,0)*{_rate(price.output)}"
        f"+FILL(tcw,0)*{_rate(write)}+FILL(tcr,0)*{_rate(price.cache_read)})"
        f"{discount}/1000000"
    )


def cost_widget(step: DashboardStep, period: Duration) -> cloudwatch.IWidget:
    """Cost per period from the token metrics at the step's price, or a text widget saying
    why it is omitted."""
    price = getattr(step, "model_price", None)
    model = getattr(step, "model_id", None)
    known = isinstance(model, str) and not Token.is_unresolved(model)
    whose = f"`{model}`" if known else "its"
    if not isinstance(price, ModelPrice):
        return cloudwatch.TextWidget(
            markdown=(
                "#### Cost per period: omitted\n\n"
                f"No price is known for {whose} model (the model catalogue has none, or "
                "`model_prices` sets it to null), so no dollar figure is guessed. Give the "
                "step's `model_prices` a row for it to graph the cost here."
            ),
            width=_GRAPH_WIDTH,
            height=_GRAPH_HEIGHT,
        )
    cache = getattr(getattr(step, "prompt_cache", None), "value", "5m")
    batch = bool(getattr(getattr(step, "delivery", None), "is_batch", False))
    notes = [f"cache writes at the {cache} rate" if cache != "off" else "no cache writes"]
    if batch:
        notes.append(f"batch: {_rate(price.batch_discount * 100)}% off")
    if price.long_context_threshold_tokens is not None:
        notes.append(f"prompts over {price.long_context_threshold_tokens:,} tokens cost more")
    return cloudwatch.GraphWidget(
        title=f"Cost per {period.to_human_string()} (USD, from the token metrics)",
        left=[
            cloudwatch.MathExpression(
                expression=cost_expression(price, str(cache), batch),
                using_metrics=_token_metrics(step, period),
                label=f"Cost (USD): {whose.strip('`')} list prices; {'; '.join(notes)}",
                period=period,
            )
        ],
        left_y_axis=cloudwatch.YAxisProps(min=0, label="USD", show_units=False),
        width=_GRAPH_WIDTH,
        height=_GRAPH_HEIGHT,
    )


def lambda_widget(
    step: DashboardStep, function: lambda_.Function, period: Duration
) -> cloudwatch.IWidget:
    """Errors, throttles (Sum) and duration p50/p99 of one function (all its versions and
    aliases: the ``FunctionName`` dimension alone)."""
    name = function.node.path.removeprefix(f"{step.node.path}/")
    return cloudwatch.GraphWidget(
        title=f"Lambda {name}: errors, throttles, duration p50/p99",
        left=[
            function.metric_errors(period=period, statistic="Sum", label="Errors"),
            function.metric_throttles(period=period, statistic="Sum", label="Throttles"),
        ],
        right=[
            function.metric_duration(period=period, statistic="p50", label="Duration p50 (ms)"),
            function.metric_duration(period=period, statistic="p99", label="Duration p99 (ms)"),
        ],
        left_y_axis=cloudwatch.YAxisProps(min=0, label="count", show_units=False),
        right_y_axis=cloudwatch.YAxisProps(min=0, label="ms", show_units=False),
        width=_GRAPH_WIDTH,
        height=_GRAPH_HEIGHT,
    )


def batch_widget(step: DashboardStep, period: Duration) -> cloudwatch.IWidget:
    """Batch delivery: the oldest open batch's age, the batches open, batches lost and rows
    staged, all from the runtime's EMF metrics (the ticks emit the first three, staging the
    last)."""
    batched: Any = step  # IdempotentModelStep under batch delivery: the two metrics alarmed on
    oldest = batched.metric_oldest_open_batch_age(period)
    lost = batched.metric_batches_lost(period)
    open_batches = batched.metric_open_batches(period)
    base = step.metric_model_requests(period)
    staged = cloudwatch.Metric(
        namespace=base.namespace,
        metric_name="RowsStaged",
        dimensions_map=base.dimensions,
        statistic="Sum",
        period=period,
        label="Rows staged",
    )
    return cloudwatch.GraphWidget(
        title="Batches: oldest open (s, 0 = none open), open, lost, rows staged",
        left=[oldest.with_(label="Oldest open batch (s)")],
        right=[open_batches.with_(label="Batches open"), lost.with_(label="Batches lost"), staged],
        left_y_axis=cloudwatch.YAxisProps(min=0, label="s", show_units=False),
        right_y_axis=cloudwatch.YAxisProps(min=0, label="count", show_units=False),
        width=_GRAPH_WIDTH,
        height=_GRAPH_HEIGHT,
    )


def runbook_link(alarm_id: str, docs_url: str | None) -> str:
    """One alarm's runbook line: its entry in docs/operations.md, linked under
    ``docs_url`` (else named as a repository path)."""
    anchor, summary = RUNBOOK_ENTRIES.get(
        alarm_id, (RUNBOOK_FALLBACK_ANCHOR, "no entry of its own")
    )
    if docs_url is None:
        return f"- `{alarm_id}`: {summary} (`docs/{RUNBOOK_PAGE}#{anchor}`)"
    return f"- `{alarm_id}`: [{summary}]({docs_url}/{RUNBOOK_PAGE}#{anchor})"


def runbook_widget(step: DashboardStep, docs_url: str | None) -> cloudwatch.IWidget:
    """What to do when each of the step's alarms fires: a line per alarm."""
    lines = [runbook_link(alarm.node.id, docs_url) for alarm in step.alarms]
    where = "" if docs_url is not None else " (docs/ of the library's repository)"
    markdown = "\n".join(
        [f"#### Runbook: what to do when an alarm fires, in {RUNBOOK_PAGE}{where}", "", *lines]
    )
    # A grid unit holds about two lines of text.
    return cloudwatch.TextWidget(markdown=markdown, width=24, height=2 + (len(lines) + 1) // 2)


__all__ = [
    "RUNBOOK_ENTRIES",
    "DashboardStep",
    "ModelStepDashboard",
    "check_docs_url",
    "cost_expression",
    "step_functions",
    "step_widgets",
]
