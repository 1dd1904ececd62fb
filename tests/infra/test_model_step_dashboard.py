"""ModelStepDashboard: every widget's metric is one the runtime or AWS really emits.

A misspelt metric name, namespace or dimension shows an empty graph forever, and nothing
else would ever notice. So the synthesized dashboard body is parsed, and each metric is
checked against its source of truth:

- ``IdempotentModelStep`` metrics: the names the runtime's ``delivery_log.py`` passes to
  its EMF calls (read from its syntax tree), in the namespace and with the one ``service``
  dimension that the step's function gets in its environment;
- ``AWS/SQS``: a metric SQS publishes, with ``QueueName`` of a queue of the template;
- ``ProspectUploader``: a name of ``prospect_contract.metrics`` (which the ledger writes),
  with ``UploadsTable`` = the uploads table the ledger's functions are configured with;
- ``AWS/Lambda``: ``Errors``, ``Throttles`` and ``Duration`` of a function of the template,
  with ``FunctionName`` alone;
- metric math (prompt cache share, cost): only over metrics that pass the checks above, and
  the cost is the runtime's own arithmetic (``model_step.request_cost``);
- log query widgets: over the log groups of functions of the template;
- alarm widgets: alarms of the template, and every alarm of each step is shown, with a
  runbook line whose anchor is a heading of docs/operations.md.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_events as events
from aws_cdk.assertions import Template
from prospect_contract import metrics as upload_metrics

from constructs_lib import EventBusV2, ModelDelivery, ModelStepDashboard, PropValidationError
from constructs_lib.model_prices import PRICE_TABLE, request_cost
from constructs_lib.model_step_dashboard import (
    RUNBOOK_ENTRIES,
    RUNBOOK_FALLBACK_ANCHOR,
    cost_expression,
)

from .conftest import NO_BUNDLING, REPO, make_step, new_app, synth, unvalidated_app

DELIVERY_LOG = REPO / "lambda_src" / "model_step" / "delivery_log.py"
#: The batch tick emits its two metrics here (names in module constants).
BATCH = REPO / "lambda_src" / "model_step" / "batch.py"
OPERATIONS = REPO / "docs" / "operations.md"
#: Lambda's function metrics the dashboard graphs (dimension FunctionName only).
LAMBDA_METRICS = frozenset({"Errors", "Throttles", "Duration"})
DOCS_URL = "https://github.com/example/idempotent-model-step/blob/main/docs"
#: Metrics SQS publishes for every queue (Amazon SQS Developer Guide, "Available
#: CloudWatch metrics for Amazon SQS"), dimension QueueName only.
SQS_METRICS = frozenset(
    {
        "ApproximateAgeOfOldestMessage",
        "ApproximateNumberOfMessagesDelayed",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesVisible",
        "NumberOfEmptyReceives",
        "NumberOfMessagesDeleted",
        "NumberOfMessagesReceived",
        "NumberOfMessagesSent",
        "SentMessageSize",
    }
)
_TOKEN = re.compile(r"@@(Ref|GetAtt):([^@]+)@@")


def emitted_runtime_metrics(*paths: Path) -> set[str]:
    """Every metric name the runtime passes to ``_count`` or ``add_metric``: a literal, or
    a module-level constant of the same file (``batch.py``'s ``OLDEST_OPEN_BATCH_METRIC``)."""
    names = set()
    for path in paths or (DELIVERY_LOG, BATCH):
        tree = ast.parse(path.read_text())
        constants = {
            node.targets[0].id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
        }
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in {"_count", "add_metric"}
                and node.args
            ):
                continue
            first = node.args[0]
            if isinstance(first, ast.Constant):
                names.add(first.value)
            elif isinstance(first, ast.Name) and first.id in constants:
                names.add(constants[first.id])
    return names


def github_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings (outside code fences): lower case,
    punctuation dropped, spaces to hyphens, -1, -2, ... on repeats."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _placeholder(part: Any) -> str:
    if isinstance(part, str):
        return part
    if "Ref" in part:
        return f"@@Ref:{part['Ref']}@@"
    logical, attribute = part["Fn::GetAtt"]
    return f"@@GetAtt:{logical}.{attribute}@@"


def dashboard_bodies(template: dict) -> dict[str, dict]:
    """Each dashboard's body, with every Ref / GetAtt left as ``@@Ref:Id@@`` text."""
    bodies = {}
    for logical, resource in template["Resources"].items():
        if resource["Type"] != "AWS::CloudWatch::Dashboard":
            continue
        body = resource["Properties"]["DashboardBody"]
        text = body if isinstance(body, str) else "".join(map(_placeholder, body["Fn::Join"][1]))
        bodies[logical] = json.loads(text)
    return bodies


def graph_metrics(body: dict) -> Iterator[tuple[str, str, dict[str, str]]]:
    """(namespace, name, dimensions) of every metric of every graph widget (the metrics a
    math expression uses included; the expression rows themselves have none)."""
    for widget in body["widgets"]:
        for row in widget["properties"].get("metrics", []):
            fields = [field for field in row if not isinstance(field, dict)]
            if not fields:  # [{"expression": ..., "label": ...}]
                continue
            namespace, name, *pairs = fields
            yield namespace, name, dict(zip(pairs[::2], pairs[1::2], strict=True))


def alarm_arns(body: dict) -> list[str]:
    return [
        arn
        for widget in body["widgets"]
        if widget["type"] == "alarm"
        for arn in widget["properties"]["alarms"]
    ]


def expressions(body: dict) -> list[dict[str, Any]]:
    """The options of every metric math row (``expression``, ``label``, ...)."""
    return [
        row[0]
        for widget in body["widgets"]
        for row in widget["properties"].get("metrics", [])
        if len(row) == 1 and "expression" in row[0]
    ]


def widgets_of(body: dict, type_: str) -> list[dict[str, Any]]:
    return [widget["properties"] for widget in body["widgets"] if widget["type"] == type_]


def ref_targets(text: str) -> list[str]:
    return [target for _, target in _TOKEN.findall(text)]


def functions(template: dict) -> dict[str, dict[str, Any]]:
    return {
        logical: resource["Properties"].get("Environment", {}).get("Variables", {})
        for logical, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Lambda::Function"
    }


def of_type(template: dict, type_: str) -> set[str]:
    return {k for k, r in template["Resources"].items() if r["Type"] == type_}


def check_metric_truth(template: dict) -> list[tuple[str, str, dict[str, str]]]:
    """Assert every graphed metric of every dashboard is really emitted; return them."""
    runtime_names = emitted_runtime_metrics()
    runtime_services = {
        (env["POWERTOOLS_METRICS_NAMESPACE"], env["POWERTOOLS_SERVICE_NAME"])
        for env in functions(template).values()
        if "IDEMPOTENCY_RECORD_PREFIX" in env
    }
    ledger_tables = {
        env["UPLOADS_TABLE_NAME"]["Ref"]
        for env in functions(template).values()
        if "UPLOADS_TABLE_NAME" in env
    }
    queues = of_type(template, "AWS::SQS::Queue")
    lambdas = of_type(template, "AWS::Lambda::Function")
    log_groups = {
        resource["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
        for logical, resource in template["Resources"].items()
        if logical in lambdas
    }
    seen = []
    for body in dashboard_bodies(template).values():
        for widget in widgets_of(body, "log"):
            sources = re.findall(r"SOURCE '([^']*)'", widget["query"])
            assert sources and {ref_targets(s)[0] for s in sources} <= log_groups, sources
        for namespace, name, dimensions in graph_metrics(body):
            seen.append((namespace, name, dimensions))
            if namespace == "AWS/Lambda":
                assert name in LAMBDA_METRICS, name
                assert list(dimensions) == ["FunctionName"], dimensions
                kind, target = _TOKEN.fullmatch(dimensions["FunctionName"]).groups()
                assert kind == "Ref" and target in lambdas
            elif namespace == "AWS/SQS":
                assert name in SQS_METRICS, name
                assert list(dimensions) == ["QueueName"], dimensions
                kind, target = _TOKEN.fullmatch(dimensions["QueueName"]).groups()
                assert kind == "GetAtt" and target.removesuffix(".QueueName") in queues
            elif namespace == upload_metrics.NAMESPACE:
                assert name in upload_metrics.METRIC_NAMES, name
                assert list(dimensions) == [upload_metrics.DIMENSION], dimensions
                kind, target = _TOKEN.fullmatch(dimensions[upload_metrics.DIMENSION]).groups()
                assert kind == "Ref" and target in ledger_tables
            else:
                assert name in runtime_names, f"{name} is never emitted by the runtime"
                assert list(dimensions) == ["service"], dimensions
                assert (namespace, dimensions["service"]) in runtime_services
    return seen


def alarm_ids(arns: list[str]) -> list[str]:
    ids = []
    for arn in arns:
        kind, target = _TOKEN.fullmatch(arn).groups()
        assert kind == "GetAtt" and target.endswith(".Arn"), arn
        ids.append(target.removesuffix(".Arn"))
    return ids


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Three steps (default bus with ``dashboard=True``, a custom classic bus, a v2 bus)
    and one ModelStepDashboard of all three."""
    app = new_app(tmp_path_factory, "dashboard")
    stack = cdk.Stack(app, "Watched")
    custom = events.EventBus(stack, "Bus")
    v2 = EventBusV2(stack, "BusV2")
    own = make_step(stack, "Own", dashboard=True)
    classic = make_step(stack, "Classic", event_bus=custom)
    modern = make_step(stack, "Modern", event_bus=v2)
    ModelStepDashboard(stack, "All", steps=[own, classic, modern])
    # A dashboard with one misspelt metric, to show the check would catch it.
    wrong = cdk.Stack(app, "Misspelt")
    step = make_step(wrong)
    right = step.metric_model_requests()
    misspelt = cloudwatch.Metric(
        namespace=right.namespace, metric_name="ModelRequest", dimensions_map=right.dimensions
    )
    cloudwatch.Dashboard(wrong, "Board").add_widgets(cloudwatch.GraphWidget(left=[misspelt]))
    # Batch delivery with its own dashboard; a step with result events; one without a
    # price; and one dashboard of the three, linking to a docs URL.
    batched = cdk.Stack(app, "Batched")
    batch = make_step(batched, "Batch", delivery=ModelDelivery.batch(), dashboard=True)
    results = make_step(batched, "Results", result_bus=events.EventBus(batched, "Bus"))
    unpriced = make_step(batched, "Unpriced", model_prices={"claude-haiku-5-5": None})
    ModelStepDashboard(batched, "Linked", steps=[batch, results, unpriced], docs_url=DOCS_URL)
    return synth(app).templates


@pytest.fixture(scope="module")
def watched(templates: dict[str, dict]) -> dict:
    return templates["Watched"]


@pytest.fixture(scope="module")
def batched(templates: dict[str, dict]) -> dict:
    return templates["Batched"]


def body_of(template: dict, prefix: str) -> dict:
    [body] = [b for k, b in dashboard_bodies(template).items() if k.startswith(prefix)]
    return body


def step_rows(body: dict) -> dict[str, list[dict[str, Any]]]:
    """The widgets of each step, by the step's path (its header text widget opens them)."""
    rows: dict[str, list[dict[str, Any]]] = {}
    current = None
    for widget in body["widgets"]:
        header = re.fullmatch(r"### Model step `(.+)`", widget["properties"].get("markdown", ""))
        if header:
            current = rows.setdefault(header.group(1), [])
        elif current is not None:
            current.append(widget)
    return rows


def test_every_dashboard_metric_is_emitted_by_the_runtime_or_sqs(watched):
    # GIVEN two dashboards (one step's own, one of three steps)  WHEN their bodies are read
    # THEN every metric is one the runtime or SQS emits, for a resource of the template
    seen = check_metric_truth(watched)
    assert len(dashboard_bodies(watched)) == 2
    assert {name for namespace, name, _ in seen if namespace == "IdempotentModelStep"} == {
        "ModelRequests", "DuplicatesSuppressed", "RateLimited", "TransientFailures",
        "NonRetryableFailures", "InputTokens", "OutputTokens", "CacheWriteInputTokens",
        "CacheReadInputTokens",
    }  # fmt: skip
    assert {name for namespace, name, _ in seen if namespace == "AWS/SQS"} == {
        "ApproximateNumberOfMessagesVisible",
        "ApproximateAgeOfOldestMessage",
    }
    assert {name for namespace, name, _ in seen if namespace == "AWS/Lambda"} == LAMBDA_METRICS


def test_each_step_row_graphs_its_own_queues_and_service(watched):
    # GIVEN the dashboard of three steps  THEN each step's buffer queue and DLQ are graphed,
    # and each step's service dimension, once per step
    [body] = [b for k, b in dashboard_bodies(watched).items() if k.startswith("All")]
    metrics = list(graph_metrics(body))
    services = {d["service"] for ns, _, d in metrics if ns == "IdempotentModelStep"}
    assert services == {"Watched/Own", "Watched/Classic", "Watched/Modern"}
    queues = {
        _TOKEN.fullmatch(d["QueueName"]).group(2).removesuffix(".QueueName")
        for ns, _, d in metrics
        if ns == "AWS/SQS"
    }
    step_queues = {
        q for q in of_type(watched, "AWS::SQS::Queue") if "Buffer" in q or "DeadLetter" in q
    }
    assert queues == step_queues and len(queues) == 6


def test_the_alarm_widgets_show_every_alarm_of_each_step(watched):
    # GIVEN the dashboards  THEN their alarm widgets name alarms of the template, and the
    # three-step dashboard shows every alarm there is (all alarms belong to the steps)
    bodies = dashboard_bodies(watched)
    [body] = [b for k, b in bodies.items() if k.startswith("All")]
    assert sorted(alarm_ids(alarm_arns(body))) == sorted(of_type(watched, "AWS::CloudWatch::Alarm"))
    [own] = [b for k, b in bodies.items() if k.startswith("Own")]
    assert all(a.startswith("Own") for a in alarm_ids(alarm_arns(own)))


def test_the_check_catches_a_misspelt_metric(templates):
    # GIVEN a dashboard graphing "ModelRequest" (the runtime emits "ModelRequests")
    # WHEN checked  THEN it fails, naming the metric
    with pytest.raises(AssertionError, match="ModelRequest is never emitted"):
        check_metric_truth(templates["Misspelt"])


def test_the_dashboard_has_no_hard_coded_name(watched):
    for logical in of_type(watched, "AWS::CloudWatch::Dashboard"):
        assert "DashboardName" not in watched["Resources"][logical]["Properties"]


def test_the_prospect_dashboard_shows_the_step_and_the_uploads(prospect):
    # GIVEN the Prospect Uploader  WHEN synthesized  THEN it deploys one dashboard whose
    # metrics are all really emitted, including the ledger's own per-upload counts
    template = prospect.templates["ProspectUploader"]
    assert len(dashboard_bodies(template)) == 1
    names = {(namespace, name) for namespace, name, _ in check_metric_truth(template)}
    assert {(upload_metrics.NAMESPACE, name) for name in upload_metrics.METRIC_NAMES} <= names
    assert ("IdempotentModelStep", "ModelRequests") in names
    [body] = dashboard_bodies(template).values()
    assert sorted(alarm_ids(alarm_arns(body))) == sorted(
        of_type(template, "AWS::CloudWatch::Alarm")
    )


def test_a_dashboard_of_no_steps_fails_at_synth_naming_the_prop():
    stack = cdk.Stack(unvalidated_app(context=NO_BUNDLING), "Empty")
    with pytest.raises(PropValidationError, match=r"'Empty/Dash': steps must name at least"):
        ModelStepDashboard(stack, "Dash", steps=[])


def test_a_period_out_of_range_fails_at_synth_naming_the_prop():
    stack = cdk.Stack(unvalidated_app(context=NO_BUNDLING), "Period")
    step = make_step(stack)
    with pytest.raises(PropValidationError, match=r"period must be between 1 minute and 1 day"):
        ModelStepDashboard(stack, "Dash", steps=[step], period=cdk.Duration.seconds(10))


def test_dashboard_prop_must_be_a_bool():
    stack = cdk.Stack(unvalidated_app(context=NO_BUNDLING), "Bool")
    with pytest.raises(PropValidationError, match=r"dashboard must be True or False, got 'yes'"):
        make_step(stack, dashboard="yes")


# -- issue 36 item 5: a dashboard an operator can act on ---------------------------------


def test_every_function_of_every_step_has_errors_throttles_and_duration(watched, batched):
    # GIVEN steps on three buses and under batch delivery  WHEN the dashboards are read
    # THEN each function of the template (each belongs to a step) has a graph of its
    # Errors and Throttles (Sum) and its Duration p50 and p99, in the row of its step
    for template, prefix in ((watched, "All"), (batched, "Linked")):
        check_metric_truth(template)
        body = body_of(template, prefix)
        graphed: dict[str, set[tuple[str, str]]] = {}
        for widget in widgets_of(body, "metric"):
            for row in widget["metrics"]:
                if row[0] == "AWS/Lambda":
                    target = _TOKEN.fullmatch(row[3]).group(2)
                    graphed.setdefault(target, set()).add((row[1], row[4]["stat"]))
        want = {("Errors", "Sum"), ("Throttles", "Sum"), ("Duration", "p50"), ("Duration", "p99")}
        assert graphed == dict.fromkeys(of_type(template, "AWS::Lambda::Function"), want)
    titles = [w["title"] for w in widgets_of(body_of(batched, "Linked"), "metric")]
    assert titles.count("Lambda Function: errors, throttles, duration p50/p99") == 3


def test_failures_by_error_code_come_from_each_steps_log_group(watched):
    # GIVEN three steps  THEN each step's row has one Logs Insights table over its own
    # function's log group, counting dead letters by error_code and transient failures by
    # their code (error_type), as the runtime's structured log lines carry them
    rows = step_rows(body_of(watched, "All"))
    assert set(rows) == {"Watched/Own", "Watched/Classic", "Watched/Modern"}
    for path, widgets in rows.items():
        [query] = [w["properties"] for w in widgets if w["type"] == "log"]
        [source] = ref_targets(query["query"])
        function = path.split("/")[1] + "Function"
        assert source.startswith(function + "LogGroup")
        assert query["view"] == "table"
        for part in ("error_code", "error_type", '"dead_lettered"', '"retry"', "by outcome"):
            assert part in query["query"]


def test_the_failure_log_fields_are_the_ones_the_runtime_writes():
    # The query reads outcome, error_code and error_type: delivery_log.py writes exactly
    # these keys on a dead letter ("dead_lettered") and a transient failure ("retry").
    source = DELIVERY_LOG.read_text()
    assert '"outcome": "dead_lettered"' in source and '"outcome": "retry"' in source
    assert '"error_code": result["error_code"]' in source
    assert '"error_type": code' in source


def test_batch_rows_graph_the_oldest_open_batch_and_realtime_rows_do_not(batched):
    # GIVEN a batch step (its own dashboard, and the linked one) and two realtime steps
    # THEN only the batch step's rows graph OldestOpenBatchAgeSeconds and OpenBatches
    # (Maximum), BatchesLost and RowsStaged, and its own dashboard shows its batch alarms too
    rows = step_rows(body_of(batched, "Linked"))
    for path, widgets in rows.items():
        names = {
            (row[1], row[-1].get("stat"))
            for w in widgets
            if w["type"] == "metric"
            for row in w["properties"]["metrics"]
            if row[0] == "IdempotentModelStep"
        }
        batch = {("OldestOpenBatchAgeSeconds", "Maximum"), ("BatchesLost", "Sum")}
        batch |= {("RowsStaged", "Sum"), ("OpenBatches", "Maximum")}
        assert (batch <= names) is (path == "Batched/Batch"), path
    own = body_of(batched, "BatchDashboard")
    ids = alarm_ids(alarm_arns(own))
    assert any(a.startswith("BatchOldestOpenBatchAlarm") for a in ids)
    assert any(a.startswith("BatchBatchLostAlarm") for a in ids)
    assert "Batches: oldest open" in json.dumps(own)


def _evaluate(expression: str, values: dict[str, float]) -> float:
    """A cost expression with FILL(x,0) replaced by the values, as CloudWatch computes it."""
    text = re.sub(r"FILL\((\w+),0\)", lambda m: repr(values.get(m.group(1), 0)), expression)
    assert re.fullmatch(r"[0-9.+*/() e-]+", text), text
    return float(eval(text))  # digits and operators only, checked above


@pytest.mark.parametrize("cache", ["5m", "1h"])
@pytest.mark.parametrize("batch", [False, True])
def test_the_cost_expression_is_the_runtimes_arithmetic(cache, batch):
    # GIVEN the catalogue's price of the default model and one request's usage below the
    # long-context threshold  WHEN priced by the dashboard's expression and by the
    # runtime's request_cost  THEN both say the same dollars
    price = PRICE_TABLE["claude-haiku-5-5"]
    usage = {
        "input_tokens": 1234,
        "output_tokens": 56,
        "cache_creation_input_tokens": 2048,
        "cache_read_input_tokens": 4096,
    }
    runtime = request_cost().StepPrice.from_json(price.for_step())
    expected = runtime.cost_usd(usage, prompt_cache=cache, batch=batch)
    values = {
        "tin": usage["input_tokens"],
        "tout": usage["output_tokens"],
        "tcw": usage["cache_creation_input_tokens"],
        "tcr": usage["cache_read_input_tokens"],
    }
    assert _evaluate(cost_expression(price, cache, batch), values) == pytest.approx(expected)


def test_cost_is_graphed_where_a_price_is_known_and_omitted_where_not(batched):
    # GIVEN a batch step and a realtime step at the catalogue's price, and a step whose
    # price is set to null  THEN the first two graph cost per period (the batch one at the
    # batch discount) and the third says it is omitted, naming its model
    rows = step_rows(body_of(batched, "Linked"))
    price = PRICE_TABLE["claude-haiku-5-5"]
    for path, batch in (("Batched/Batch", True), ("Batched/Results", False)):
        body = {"widgets": rows[path]}
        [cost] = [e for e in expressions(body) if e["label"].startswith("Cost (USD)")]
        assert cost["expression"] == cost_expression(price, "5m", batch)
        assert ("batch: 50% off" in cost["label"]) is batch
    unpriced = {"widgets": rows["Batched/Unpriced"]}
    assert not [e for e in expressions(unpriced) if e["label"].startswith("Cost")]
    [text] = [w["markdown"] for w in widgets_of(unpriced, "text") if "Cost" in w["markdown"]]
    assert "omitted" in text and "`claude-haiku-5-5`" in text


def test_the_prompt_cache_share_is_graphed_for_every_step(watched):
    rows = step_rows(body_of(watched, "All"))
    for widgets in rows.values():
        labels = {e["label"] for e in expressions({"widgets": widgets})}
        assert {"Read from cache (%)", "Written to cache (%)"} <= labels


def test_every_alarm_of_every_step_has_a_runbook_link_to_a_heading(watched, batched):
    # GIVEN steps with every kind of alarm (realtime, result_bus, batch)  THEN each alarm
    # of each step has an entry of its own in RUNBOOK_ENTRIES, its anchor is a heading of
    # docs/operations.md, and the step's runbook widget has its line (a link under
    # docs_url, else the repository path)
    anchors = github_anchors(OPERATIONS.read_text(encoding="utf-8"))
    assert RUNBOOK_FALLBACK_ANCHOR in anchors
    for anchor, _ in RUNBOOK_ENTRIES.values():
        assert anchor in anchors, anchor
    alarm_kinds = set()
    for template, prefix, url in ((watched, "All", None), (batched, "Linked", DOCS_URL)):
        resources = template["Resources"]
        for path, widgets in step_rows(body_of(template, prefix)).items():
            [runbook] = [
                w["properties"]["markdown"]
                for w in widgets
                if "Runbook" in w["properties"].get("markdown", "")
            ]
            [status] = [w["properties"] for w in widgets if w["type"] == "alarm"]
            step_id = path.split("/")[1]
            for logical in alarm_ids(status["alarms"]):
                path_of = resources[logical]["Metadata"]["aws:cdk:path"]
                alarm_id = path_of.removeprefix(f"{path}/").split("/")[0]
                assert logical.startswith(step_id + alarm_id)
                assert alarm_id in RUNBOOK_ENTRIES, f"{alarm_id} has no runbook entry"
                anchor = RUNBOOK_ENTRIES[alarm_id][0]
                if url is None:
                    assert f"`{alarm_id}`: " in runbook
                    assert f"(`docs/operations.md#{anchor}`)" in runbook
                else:
                    assert f"]({url}/operations.md#{anchor})" in runbook
                alarm_kinds.add(alarm_id)
    assert alarm_kinds == set(RUNBOOK_ENTRIES), "a runbook entry no step's alarm uses"


def test_the_dashboards_are_in_the_template(batched):
    # Template assertions: the linked dashboard, the batch step's own, nothing named.
    template = Template.from_json(batched)
    template.resource_count_is("AWS::CloudWatch::Dashboard", 2)
    for resource in template.find_resources("AWS::CloudWatch::Dashboard").values():
        assert "DashboardName" not in resource["Properties"]


@pytest.mark.parametrize("bad", ["ftp://example.com/docs", "docs/", "", 42])
def test_a_bad_docs_url_fails_at_synth_naming_the_prop(bad):
    stack = cdk.Stack(unvalidated_app(context=NO_BUNDLING), "Docs")
    step = make_step(stack)
    with pytest.raises(PropValidationError, match=r"'Docs/Dash': docs_url must be None or the"):
        ModelStepDashboard(stack, "Dash", steps=[step], docs_url=bad)
