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
- alarm widgets: alarms of the template, and every alarm of each step is shown.
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
from prospect_contract import metrics as upload_metrics

from constructs_lib import EventBusV2, ModelStepDashboard, PropValidationError

from .conftest import REPO, make_step, new_app, synth

DELIVERY_LOG = REPO / "lambda_src" / "model_step" / "delivery_log.py"
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


def emitted_runtime_metrics(path: Path = DELIVERY_LOG) -> set[str]:
    """Every literal metric name the runtime passes to ``_count`` or ``add_metric``."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in {"_count", "add_metric"}
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.add(node.args[0].value)
    return names


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
    """(namespace, name, dimensions) of every metric of every graph widget."""
    for widget in body["widgets"]:
        for row in widget["properties"].get("metrics", []):
            fields = [field for field in row if not isinstance(field, dict)]
            namespace, name, *pairs = fields
            yield namespace, name, dict(zip(pairs[::2], pairs[1::2], strict=True))


def alarm_arns(body: dict) -> list[str]:
    return [
        arn
        for widget in body["widgets"]
        if widget["type"] == "alarm"
        for arn in widget["properties"]["alarms"]
    ]


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
    seen = []
    for body in dashboard_bodies(template).values():
        for namespace, name, dimensions in graph_metrics(body):
            seen.append((namespace, name, dimensions))
            if namespace == "AWS/SQS":
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
    return synth(app).templates


@pytest.fixture(scope="module")
def watched(templates: dict[str, dict]) -> dict:
    return templates["Watched"]


def test_every_dashboard_metric_is_emitted_by_the_runtime_or_sqs(watched):
    # GIVEN two dashboards (one step's own, one of three steps)  WHEN their bodies are read
    # THEN every metric is one the runtime or SQS emits, for a resource of the template
    seen = check_metric_truth(watched)
    assert len(dashboard_bodies(watched)) == 2
    assert {name for namespace, name, _ in seen if namespace != "AWS/SQS"} == {
        "ModelRequests", "DuplicatesSuppressed", "RateLimited", "TransientFailures",
        "NonRetryableFailures", "InputTokens", "OutputTokens", "CacheWriteInputTokens",
        "CacheReadInputTokens",
    }  # fmt: skip
    assert {name for namespace, name, _ in seen if namespace == "AWS/SQS"} == {
        "ApproximateNumberOfMessagesVisible",
        "ApproximateAgeOfOldestMessage",
    }


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
    stack = cdk.Stack(cdk.App(), "Empty")
    with pytest.raises(PropValidationError, match=r"'Empty/Dash': steps must name at least"):
        ModelStepDashboard(stack, "Dash", steps=[])


def test_a_period_out_of_range_fails_at_synth_naming_the_prop():
    stack = cdk.Stack(cdk.App(), "Period")
    step = make_step(stack)
    with pytest.raises(PropValidationError, match=r"period must be between 1 minute and 1 day"):
        ModelStepDashboard(stack, "Dash", steps=[step], period=cdk.Duration.seconds(10))


def test_dashboard_prop_must_be_a_bool():
    stack = cdk.Stack(cdk.App(), "Bool")
    with pytest.raises(PropValidationError, match=r"dashboard must be True or False, got 'yes'"):
        make_step(stack, dashboard="yes")
