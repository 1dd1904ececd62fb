"""Reading the cloud assembly: settings come from cdk.out, and its absence is explained."""

from __future__ import annotations

import json

import pytest

from constructs_lib.local_engine.assembly import (
    CloudAssembly,
    load_assembly,
    rate_seconds,
    short_path,
)
from constructs_lib.local_engine.environment import environment_union
from constructs_lib.local_engine.errors import (
    AssemblyError,
    AssemblyNotFoundError,
    EnvironmentConflictError,
)
from constructs_lib.local_engine.intrinsics import PhysicalResource, Resolver


def test_lambda_retry_attempts_come_from_the_template(assembly):
    template = json.loads(assembly.source.read_text())
    configs = {
        body["Properties"]["FunctionName"]["Ref"]: body["Properties"]
        for body in template["Resources"].values()
        if body["Type"] == "AWS::Lambda::EventInvokeConfig"
    }
    splitter = next(spec for spec in assembly.functions() if spec.display_name == "Splitter")
    assert splitter.retry_attempts == configs[splitter.logical_id]["MaximumRetryAttempts"]
    assert (
        splitter.max_event_age_seconds == configs[splitter.logical_id]["MaximumEventAgeInSeconds"]
    )
    assert (
        splitter.on_failure
        == configs[splitter.logical_id]["DestinationConfig"]["OnFailure"]["Destination"]
    )
    step = assembly.model_step_function()
    assert step.display_name == "Classify/Function"
    assert step.handler == "prospect_classifier.handler.handler"
    assert step.timeout_seconds == template["Resources"][step.logical_id]["Properties"]["Timeout"]


def test_rules_targets_and_event_source_mappings(assembly):
    rules = {rule.display_name: rule for rule in assembly.rules()}
    assert set(rules) >= {"SplitterRule", "UploadAlertRule", "UploadCompletedAlertRule"}
    assert rules["SplitterRule"].event_bus is None  # the default bus
    # The sweeper's fixed-rate rule has no event pattern: it is not routed.
    assert not any(name.startswith("UploadSweeper") for name in rules)
    # Rows ride the v2 RowBus by default: Classify subscribes rather than having a rule.
    assert "Classify/Rule" not in rules
    subscribers = {s.display_name: s for s in assembly.subscribers()}
    # The step's concurrency cap: subscriber -> buffer queue -> mapping (batch 1) -> function.
    assert subscribers["Classify/Subscriber"].target_type == "AWS::SQS::Queue"
    assert subscribers["Classify/Subscriber"].on_failure_arn is not None
    alert_target = rules["UploadAlertRule"].targets[0]
    assert alert_target.resource_type == "AWS::SNS::Topic"
    assert "InputTemplate" in alert_target.input_transformer
    # Keyed by function and queue: the classifier reads its buffer and its redrive queue.
    mappings = {
        (
            assembly.function(m.function_logical_id).handler,
            short_path(assembly.resources[m.source_logical_id].path),
        ): m
        for m in assembly.event_source_mappings()
    }
    recorder = mappings["failure_recorder.handler.handler", "FailureQueue"]
    assert recorder.batch_size == 10 and recorder.report_batch_item_failures
    assert recorder.max_concurrency is None
    step = mappings["prospect_classifier.handler.handler", "Classify/BufferQueue"]
    assert step.batch_size == 1 and step.report_batch_item_failures
    assert step.max_concurrency == 10
    redrive = mappings["prospect_classifier.handler.handler", "Classify/RedriveQueue"]
    assert redrive.batch_size == 1 and redrive.report_batch_item_failures
    assert redrive.max_concurrency == 2
    # The Message Batches step (issue 19, context delivery=auto): many rows a delivery,
    # after a batching window.
    batch = mappings["prospect_classifier.handler.handler", "ClassifyBatch/BufferQueue"]
    assert batch.batch_size == 10_000 and batch.max_batching_window_seconds == 300
    assert len(mappings) == 5
    assert assembly.upload_bucket().path.endswith("/UploadBucket/Resource")


def test_scheduled_rules_and_their_constant_input(assembly):
    scheduled = {rule.display_name: rule for rule in assembly.scheduled_rules()}
    assert set(scheduled) == {"UploadSweepRule", "ClassifyBatch/BatchTickRule"}
    sweep, tick = scheduled["UploadSweepRule"], scheduled["ClassifyBatch/BatchTickRule"]
    assert (sweep.period_seconds, tick.period_seconds) == (900, 60)
    [target] = tick.targets
    assert target.resource_type == "AWS::Lambda::Function"
    assert assembly.function(str(target.resource_logical_id)).is_batch
    assert target.input == '{"model_step_batch":"tick"}'
    assert sweep.targets[0].input is None  # EventBridge's own "Scheduled Event"


@pytest.mark.parametrize(
    ("expression", "seconds"),
    [
        ("rate(1 minute)", 60),
        ("rate(15 minutes)", 900),
        ("rate(2 hours)", 7200),
        ("cron(0 * * * ? *)", None),
    ],
)
def test_rate_expressions(expression, seconds):
    assert rate_seconds(expression) == seconds


def test_a_malformed_rate_is_refused():
    with pytest.raises(AssemblyError, match="unsupported schedule expression"):
        rate_seconds("rate(soon)")


def test_missing_cdk_out_tells_the_user_to_synth(tmp_path):
    with pytest.raises(AssemblyNotFoundError, match="make synth"):
        load_assembly(tmp_path / "nowhere", "ProspectUploader")
    with pytest.raises(AssemblyNotFoundError, match="make synth"):
        load_assembly(tmp_path, "ProspectUploader")  # a directory without the template


def _template(**environments: dict) -> dict:
    resources = {}
    for name, variables in environments.items():
        resources[name] = {
            "Type": "AWS::Lambda::Function",
            "Properties": {"Handler": "m.handler", "Environment": {"Variables": variables}},
            "Metadata": {"aws:cdk:path": f"S/{name}/Resource"},
        }
    resources["Table"] = {"Type": "AWS::DynamoDB::Table", "Properties": {}}
    return {"Resources": resources}


def _resolver(assembly: CloudAssembly) -> Resolver:
    physical = {
        lid: PhysicalResource(lid, spec.resource_type, f"local-{lid}")
        for lid, spec in assembly.resources.items()
    }
    return Resolver(physical, stack_name="S")


def test_environment_union_resolves_refs_and_refuses_conflicts(tmp_path):
    ok = CloudAssembly(
        "S",
        _template(
            A={"TABLE": {"Ref": "Table"}, "POWERTOOLS_SERVICE_NAME": "a"},
            B={"TABLE": {"Ref": "Table"}, "POWERTOOLS_SERVICE_NAME": "b", "IDEMPOTENCY_KEY": "k"},
        ),
        tmp_path,
    )
    merged = environment_union(ok.functions(), _resolver(ok))
    assert merged["TABLE"] == "local-Table"
    assert merged["POWERTOOLS_SERVICE_NAME"] == "b"  # the model step's value is kept

    clash = CloudAssembly("S", _template(A={"MODE": "x"}, B={"MODE": "y"}), tmp_path)
    with pytest.raises(EnvironmentConflictError, match="MODE"):
        environment_union(clash.functions(), _resolver(clash))
