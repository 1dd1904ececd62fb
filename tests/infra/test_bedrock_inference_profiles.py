"""ModelProvider.BEDROCK: foundation-model ids, inference profiles and their grants (issue 22).

One app, synthesized once under cdk-nag's AwsSolutions checks (an unacknowledged finding
would fail the synth): a step per kind of model id, in a stack with a resolved region and
account, and one in an environment-agnostic stack.
"""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_events as events
from cdk_nag import AwsSolutionsChecks

from constructs_lib import IdempotentModelStep, ModelProvider
from constructs_lib.bedrock_models import GEOGRAPHY_REGIONS

from .conftest import new_app, synth

ACCOUNT = "123456789012"
MODEL = "anthropic.claude-haiku-5-5-v1:0"
STEPS = {
    "Foundation": MODEL,
    "Us": f"us.{MODEL}",
    "Eu": f"eu.{MODEL}",
    "Apac": f"apac.{MODEL}",
    "Global": f"global.{MODEL}",
}


def bedrock_step(stack: cdk.Stack, step_id: str, model_id: str) -> IdempotentModelStep:
    """A step on Bedrock: no secret is made (the conftest's step props make one)."""
    return IdempotentModelStep(
        stack,
        step_id,
        event_pattern=events.EventPattern(source=["test.source"]),
        idempotency_key="[upload_id, row_number]",
        prompt_version="v1",
        system_prompt="Answer hot, warm or cold.",
        model_provider=ModelProvider.BEDROCK,
        model_id=model_id,
    )


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    app = new_app(tmp_path_factory, "bedrock")
    stack = cdk.Stack(app, "Profiles", env=cdk.Environment(account=ACCOUNT, region="us-east-1"))
    for step_id, model_id in STEPS.items():
        bedrock_step(stack, step_id, model_id)
    bedrock_step(cdk.Stack(app, "Agnostic"), "Us", f"us.{MODEL}")
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return synth(app).templates


def invoke_statements(template: dict, step_id: str) -> list[dict]:
    policy = next(
        resource
        for logical_id, resource in template["Resources"].items()
        if logical_id.startswith(f"{step_id}FunctionServiceRoleDefaultPolicy")
    )
    return [
        statement
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Action"] == "bedrock:InvokeModel"
    ]


def resources(statement: dict) -> list:
    found = statement["Resource"]
    return found if isinstance(found, list) else [found]


def partitioned(arn: dict | str) -> str:
    """An ARN written as ``{"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ...]]}``,
    with the partition as ``aws``."""
    if isinstance(arn, str):
        return arn
    parts = arn["Fn::Join"][1]
    return "".join("aws" if part == {"Ref": "AWS::Partition"} else part for part in parts)


def test_a_foundation_model_id_is_granted_on_the_model_in_the_stacks_region(templates):
    [statement] = invoke_statements(templates["Profiles"], "Foundation")
    assert [partitioned(r) for r in resources(statement)] == [
        f"arn:aws:bedrock:us-east-1::foundation-model/{MODEL}"
    ]
    assert "Condition" not in statement


@pytest.mark.parametrize("step_id", ["Us", "Eu", "Apac"])
def test_a_geographic_profile_is_granted_on_the_profile_and_the_model_in_its_regions(
    templates, step_id
):
    profile_id = STEPS[step_id]
    profile_arn = f"arn:aws:bedrock:us-east-1:{ACCOUNT}:inference-profile/{profile_id}"
    profile, model = invoke_statements(templates["Profiles"], step_id)

    assert [partitioned(r) for r in resources(profile)] == [profile_arn]
    regions = GEOGRAPHY_REGIONS[profile_id.split(".", 1)[0]]
    assert [partitioned(r) for r in resources(model)] == [
        f"arn:aws:bedrock:{region}::foundation-model/{MODEL}" for region in regions
    ]
    # The model only through this profile: never invoked directly, in any region.
    [(key, value)] = model["Condition"]["StringEquals"].items()
    assert (key, partitioned(value)) == ("bedrock:InferenceProfileArn", profile_arn)


def test_the_global_profile_is_granted_on_the_model_in_any_region_through_the_profile(templates):
    profile, model = invoke_statements(templates["Profiles"], "Global")
    profile_arn = f"arn:aws:bedrock:us-east-1:{ACCOUNT}:inference-profile/global.{MODEL}"
    assert [partitioned(r) for r in resources(profile)] == [profile_arn]
    assert [partitioned(r) for r in resources(model)] == [
        f"arn:aws:bedrock:*::foundation-model/{MODEL}"
    ]
    [(key, value)] = model["Condition"]["StringEquals"].items()
    assert (key, partitioned(value)) == ("bedrock:InferenceProfileArn", profile_arn)


def test_no_bedrock_statement_has_a_wildcard_action(templates):
    for step_id in STEPS:
        for statement in invoke_statements(templates["Profiles"], step_id):
            assert statement["Action"] == "bedrock:InvokeModel"


def test_an_environment_agnostic_stack_grants_the_profile_in_its_own_region(templates):
    profile, model = invoke_statements(templates["Agnostic"], "Us")
    [arn] = resources(profile)
    text = json.dumps(arn)
    assert '{"Ref": "AWS::Region"}' in text and '{"Ref": "AWS::AccountId"}' in text
    assert text.endswith(f':inference-profile/us.{MODEL}"]]}}')
    # The destination regions are the geography's, whatever region the stack deploys to.
    assert len(resources(model)) == len(GEOGRAPHY_REGIONS["us"])


def test_the_runtime_gets_the_id_as_given(templates):
    functions = [
        resource["Properties"]
        for logical_id, resource in templates["Profiles"]["Resources"].items()
        if resource["Type"] == "AWS::Lambda::Function" and logical_id.startswith("Global")
    ]
    [variables] = [f["Environment"]["Variables"] for f in functions]
    assert (variables["MODEL_PROVIDER"], variables["MODEL_ID"]) == ("bedrock", f"global.{MODEL}")


@pytest.fixture(scope="module")
def prospect_bedrock(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """app.py with ``-c model_provider=bedrock``, under its own cdk-nag checks."""
    import app as app_module

    outdir = tmp_path_factory.mktemp("prospect-bedrock")
    context = {"aws:cdk:bundling-stacks": [], "model_provider": "bedrock"}
    app_module.build_app(cdk.App(context=context, outdir=str(outdir))).synth()
    return json.loads((outdir / "ProspectUploader.template.json").read_text())


def test_the_reference_app_on_bedrock_has_no_secret_and_grants_the_us_profile(
    prospect_bedrock,
):
    template = prospect_bedrock["Resources"].values()
    assert not [r for r in template if r["Type"] == "AWS::SecretsManager::Secret"]
    [variables] = [
        r["Properties"]["Environment"]["Variables"]
        for r in template
        if r["Type"] == "AWS::Lambda::Function"
        and r["Properties"].get("Environment", {}).get("Variables", {}).get("MODEL_PROVIDER")
    ]
    assert variables["MODEL_PROVIDER"] == "bedrock"
    assert variables["MODEL_ID"] == f"us.{MODEL}"
    assert "ANTHROPIC_API_KEY_SECRET_ARN" not in variables
    invoke = [
        statement
        for r in template
        if r["Type"] == "AWS::IAM::Policy"
        for statement in r["Properties"]["PolicyDocument"]["Statement"]
        if statement["Action"] == "bedrock:InvokeModel"
    ]
    assert len(invoke) == 2
    assert len(resources(invoke[1])) == len(GEOGRAPHY_REGIONS["us"])


def test_the_reference_app_on_bedrock_sends_auto_uploads_realtime(prospect_bedrock):
    # Message Batches are the Claude API's: under Bedrock, delivery=auto (the default) has
    # no batch step, and the splitter marks no row for one.
    resources = prospect_bedrock["Resources"]
    assert not [k for k in resources if k.startswith("ClassifyBatch")]
    [splitter] = [
        r["Properties"]["Environment"]["Variables"]
        for k, r in resources.items()
        if k.startswith("Splitter") and r["Type"] == "AWS::Lambda::Function"
    ]
    assert splitter["DELIVERY"] == "realtime"


def test_the_reference_app_refuses_batch_delivery_on_bedrock():
    import app as app_module
    from constructs_lib import PropValidationError

    context = {"aws:cdk:bundling-stacks": [], "model_provider": "bedrock", "delivery": "batch"}
    with pytest.raises(
        PropValidationError, match=r"context delivery=batch needs model_provider=anthropic"
    ):
        app_module.build_app(cdk.App(context=context))
