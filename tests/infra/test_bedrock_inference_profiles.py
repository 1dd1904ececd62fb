"""ModelProvider.BEDROCK: foundation-model ids, inference profiles and their grants (issues 22
and 32).

One app, synthesized once under cdk-nag's AwsSolutions checks (an unacknowledged finding
would fail the synth): a step per kind of model id (every profile prefix AWS defines), in a
stack with a resolved region and account, and one in an environment-agnostic stack. The ids
are the ones AWS publishes (the model catalogue's): ``anthropic.claude-haiku-5-5``, no
``-v1:0``.
"""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_events as events
from aws_cdk import cx_api
from cdk_nag import AwsSolutionsChecks

from constructs_lib import IdempotentModelStep, ModelProvider, Thinking
from constructs_lib.bedrock_models import GEOGRAPHY_REGIONS
from constructs_lib.model_fit import UNPUBLISHED_ID_WARNING

from .conftest import new_app, stack_messages, synth, unvalidated_app

ACCOUNT = "123456789012"
MODEL = "anthropic.claude-haiku-5-5"
STEPS = {
    "Foundation": MODEL,
    "Us": f"us.{MODEL}",
    "Eu": f"eu.{MODEL}",
    "Apac": f"apac.{MODEL}",
    "Jp": f"jp.{MODEL}",
    "Au": f"au.{MODEL}",
    "UsGov": f"us-gov.{MODEL}",
    "Global": f"global.{MODEL}",
}
#: aws-cdk's aws-bedrock-alpha ``CrossRegionInferenceProfileRegion`` documented lists.
DOCUMENTED = {
    "apac": {
        "ap-northeast-1", "ap-northeast-2", "ap-northeast-3", "ap-south-1", "ap-south-2",
        "ap-southeast-1", "ap-southeast-2", "ap-southeast-3", "ap-southeast-4",
        "ap-southeast-5", "ap-southeast-7", "ap-east-2", "me-central-1",
    },
    "jp": {"ap-northeast-1", "ap-northeast-3"},
    "au": {"ap-southeast-2", "ap-southeast-4"},
    "us-gov": {"us-gov-east-1", "us-gov-west-1"},
}  # fmt: skip


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
        thinking=Thinking.DISABLED,
    )


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> tuple[cdk.Stack, dict[str, dict]]:
    """The ``Profiles`` stack and every template of its app."""
    app = new_app(tmp_path_factory, "bedrock")
    stack = cdk.Stack(app, "Profiles", env=cdk.Environment(account=ACCOUNT, region="us-east-1"))
    for step_id, model_id in STEPS.items():
        bedrock_step(stack, step_id, model_id)
    bedrock_step(cdk.Stack(app, "Agnostic"), "Us", f"us.{MODEL}")
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return stack, synth(app).templates


@pytest.fixture(scope="module")
def templates(profiles) -> dict[str, dict]:
    return profiles[1]


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


@pytest.mark.parametrize("step_id", ["Us", "Eu", "Apac", "Jp", "Au", "UsGov"])
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


@pytest.mark.parametrize("prefix", sorted(DOCUMENTED))
def test_each_profile_is_granted_on_every_region_aws_cdk_documents_for_it(templates, prefix):
    step_id = next(step for step, model_id in STEPS.items() if model_id == f"{prefix}.{MODEL}")
    _, model = invoke_statements(templates["Profiles"], step_id)
    granted = {partitioned(r).split(":")[3] for r in resources(model)}
    assert granted == DOCUMENTED[prefix]


def test_an_id_not_published_for_the_model_is_granted_with_a_warning_naming_model_id(profiles):
    # us-gov. is a profile prefix AWS defines, but the catalogue lists no us-gov profile of
    # Haiku 5.5: granted all the same (never refused, as above), and synth says so.
    # (read from the fixture's synth: Annotations.from_stack would synthesize the app again)
    warnings = stack_messages(
        profiles[0], cx_api.SynthesisMessageLevel.WARNING, UNPUBLISHED_ID_WARNING
    )
    assert [path for path, _ in warnings] == ["/Profiles/UsGov"]  # us., jp., ...: listed
    text = warnings[0][1]
    assert "model_id 'us-gov.anthropic.claude-haiku-5-5'" in text


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
    app_module.build_app(unvalidated_app(context=context, outdir=str(outdir))).synth()
    return json.loads((outdir / "ProspectUploader.template.json").read_text())


def test_the_reference_app_on_bedrock_has_no_secret_and_grants_the_us_profile(
    prospect_bedrock,
):
    template = prospect_bedrock["Resources"].values()
    assert not [r for r in template if r["Type"] == "AWS::SecretsManager::Secret"]
    # Classify (realtime) and, since issue 37, ClassifyBatch (Bedrock batch inference).
    steps = [
        r["Properties"]["Environment"]["Variables"]
        for r in template
        if r["Type"] == "AWS::Lambda::Function"
        and r["Properties"].get("Environment", {}).get("Variables", {}).get("MODEL_PROVIDER")
    ]
    assert len(steps) == 2
    [variables] = [v for v in steps if "MODEL_DELIVERY" not in v]
    assert variables["MODEL_PROVIDER"] == "bedrock"
    # The id AWS publishes (issue 32: the old default ended in "-v1:0", a ValidationException).
    assert variables["MODEL_ID"] == "us.anthropic.claude-haiku-5-5"
    assert variables["THINKING"] == "disabled"
    # Priced as the model it names on Bedrock, Haiku 5.5: $0.10 / $0.50 per million tokens.
    rates = json.loads(variables["MODEL_RATES"])
    assert (rates["input"], rates["output"], rates["cache_read"]) == (0.1, 0.5, 0.01)
    assert "ANTHROPIC_API_KEY_SECRET_ARN" not in variables
    invoke = [
        statement
        for k, r in prospect_bedrock["Resources"].items()
        if r["Type"] == "AWS::IAM::Policy" and k.startswith("ClassifyFunction")
        for statement in r["Properties"]["PolicyDocument"]["Statement"]
        if statement["Action"] == "bedrock:InvokeModel"
    ]
    assert len(invoke) == 2
    assert len(resources(invoke[1])) == len(GEOGRAPHY_REGIONS["us"])


def test_the_reference_app_on_bedrock_sends_large_auto_uploads_by_bedrock_batch(
    prospect_bedrock,
):
    # Issue 37: under Bedrock, delivery=auto (the default) has the batch step, on Bedrock
    # batch inference, and the splitter marks an upload of batch_min_rows rows for it.
    resources = prospect_bedrock["Resources"]
    [batch] = [
        r["Properties"]["Environment"]["Variables"]
        for k, r in resources.items()
        if k.startswith("ClassifyBatchFunction") and r["Type"] == "AWS::Lambda::Function"
    ]
    assert (batch["MODEL_PROVIDER"], batch["MODEL_DELIVERY"]) == ("bedrock", "batch")
    assert "BATCH_ROLE_ARN" in batch and "BATCH_BUCKET_NAME" in batch
    [splitter] = [
        r["Properties"]["Environment"]["Variables"]
        for k, r in resources.items()
        if k.startswith("Splitter") and r["Type"] == "AWS::Lambda::Function"
    ]
    assert splitter["DELIVERY"] == "auto"


def test_the_reference_app_prices_the_bedrock_model_it_calls(tmp_path):
    # An Opus profile is priced as Opus (five times Haiku 4.5), never as the default model.
    import app as app_module

    context = {
        "aws:cdk:bundling-stacks": [],
        "model_provider": "bedrock",
        "bedrock_model_id": "global.anthropic.claude-opus-4-5-20251101-v1:0",
    }
    app_module.build_app(unvalidated_app(context=context, outdir=str(tmp_path))).synth()
    template = json.loads((tmp_path / "ProspectUploader.template.json").read_text())
    variables = [
        r["Properties"]["Environment"]["Variables"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function"
        and "MODEL_PRICE" in r["Properties"].get("Environment", {}).get("Variables", {})
    ]
    assert {json.loads(v["MODEL_PRICE"])["input"] for v in variables} == {5.0}
    steps = [v for v in variables if "MODEL_RATES" in v]
    assert [json.loads(step["MODEL_RATES"])["output"] for step in steps] == [25.0, 25.0]


def test_the_reference_app_takes_batch_delivery_on_bedrock(tmp_path):
    import app as app_module

    context = {"aws:cdk:bundling-stacks": [], "model_provider": "bedrock", "delivery": "batch"}
    app_module.build_app(unvalidated_app(context=context, outdir=str(tmp_path))).synth()
    template = json.loads((tmp_path / "ProspectUploader.template.json").read_text())
    roles = [k for k, r in template["Resources"].items() if r["Type"] == "AWS::IAM::Role"]
    assert [k for k in roles if k.startswith("ClassifyBatchBedrockBatchJobRole")]
