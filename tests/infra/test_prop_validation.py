"""Every refused prop fails at synth with the prop, the value and what is allowed."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import Duration
from aws_cdk import aws_sqs as sqs

from constructs_lib import (
    ModelDelivery,
    ModelProvider,
    ModelStepHandler,
    PropValidationError,
    RetryBudget,
)

from .conftest import NO_BUNDLING, make_step, step_props, unvalidated_app


@pytest.fixture
def stack() -> cdk.Stack:
    return cdk.Stack(unvalidated_app(context=NO_BUNDLING), "Validation")


@pytest.mark.parametrize(
    "prop, value, message",
    [
        ("lambda_retry_attempts", 3, "lambda_retry_attempts must be between 0 and 2, got 3"),
        ("lambda_retry_attempts", -1, "lambda_retry_attempts must be between 0 and 2, got -1"),
        ("event_retry_attempts", 186, "event_retry_attempts must be between 0 and 185, got 186"),
        ("max_tokens", 0, "max_tokens must be between 1 and 128000, got 0"),
        ("max_concurrency", 0, "max_concurrency must be between 1 and 1000, got 0"),
        ("max_concurrency", 1001, "max_concurrency must be between 1 and 1000, got 1001"),
        ("max_concurrency", 2.5, "max_concurrency must be an integer between 1 and 1000, got 2.5"),
        (
            "api_key_max_age",
            Duration.hours(2),
            "api_key_max_age must be between 0 seconds and 1 hour, got 2 hours",
        ),
        ("memory_size", 64, "memory_size must be between 128 and 10240, got 64"),
        (
            "max_event_age",
            Duration.seconds(30),
            "max_event_age must be between 1 minute and 1 day, got 30 seconds",
        ),
        (
            "max_event_age",
            Duration.hours(25),
            "max_event_age must be between 1 minute and 1 day, got 1 day 1 hour",
        ),
        (
            "timeout",
            Duration.minutes(16),
            "timeout must be between 10 seconds and 15 minutes, got 16 minutes",
        ),
        (
            "expires_after",
            Duration.days(31),
            "expires_after must be between 1 minute and 30 days, got 31 days",
        ),
        ("prompt_version", " ", "prompt_version must be a non-empty string, got ' '"),
        ("system_prompt", "", "system_prompt must be a non-empty string, got ''"),
        ("model_id", "", "model_id must be a non-empty string, got ''"),
        ("idempotency_key", "", "idempotency_key must be a non-empty string, got ''"),
    ],
)
def test_out_of_range_prop_names_prop_value_and_range(stack, prop, value, message):
    with pytest.raises(PropValidationError, match=message):
        make_step(stack, **{prop: value})


def test_error_names_the_step(stack):
    with pytest.raises(PropValidationError, match=r"IdempotentModelStep 'Validation/Step'"):
        make_step(stack, lambda_retry_attempts=5)


def test_boolean_is_not_an_attempt_count(stack):
    with pytest.raises(PropValidationError, match="lambda_retry_attempts must be an integer"):
        make_step(stack, lambda_retry_attempts=True)


def test_idempotency_key_must_be_jmespath(stack):
    with pytest.raises(PropValidationError, match=r"idempotency_key must be a JMESPath"):
        make_step(stack, idempotency_key="[upload_id, ")


def test_idempotency_key_is_over_detail_already(stack):
    with pytest.raises(PropValidationError, match=r"not 'detail\.' paths"):
        make_step(stack, idempotency_key="[detail.upload_id, detail.row_number]")


def test_a_system_prompt_of_200_000_bytes_is_accepted(stack):
    make_step(stack, system_prompt="x" * 200_000)


def test_system_prompt_over_200_000_bytes_names_the_size_and_the_limit(stack):
    with pytest.raises(
        PropValidationError, match=r"system_prompt must be at most 200,000 bytes .* got 200,001"
    ):
        make_step(stack, system_prompt="x" * 200_001)


def test_system_prompt_file_over_the_limit_names_the_prop_and_the_file(stack, tmp_path):
    path = tmp_path / "prompt.txt"
    path.write_text("é" * 100_001)  # 200,002 bytes in UTF-8
    with pytest.raises(
        PropValidationError,
        match=r"system_prompt_file must be at most 200,000 bytes, got 200,002 bytes .*prompt\.txt",
    ):
        make_step(stack, system_prompt=None, system_prompt_file=path)


def test_system_prompt_file_missing(stack, tmp_path):
    with pytest.raises(PropValidationError, match=r"system_prompt_file must be a readable file"):
        make_step(stack, system_prompt=None, system_prompt_file=tmp_path / "nope.txt")


@pytest.mark.parametrize(("text", "given"), [("Answer.", "both"), (None, "neither")])
def test_exactly_one_of_system_prompt_and_its_file(stack, tmp_path, text, given):
    path = tmp_path / "prompt.txt"
    path.write_text("Answer hot.")
    with pytest.raises(PropValidationError, match=rf"exactly one of system_prompt .* got {given}"):
        make_step(stack, system_prompt=text, system_prompt_file=path if given == "both" else None)


def test_prompt_cache_must_be_a_prompt_cache(stack):
    with pytest.raises(PropValidationError, match=r"prompt_cache must be PromptCache\..* '5m'"):
        make_step(stack, prompt_cache="5m")


def test_expires_after_shorter_than_the_keys_longest_way_back_names_the_props(stack):
    """GIVEN max_event_age 24 h and the queues' 14-day retention, WHEN expires_after is one
    second short of 15 days and an hour, THEN synth fails naming both props and the minimum."""
    with pytest.raises(
        PropValidationError,
        match=r"expires_after must be at least 1,299,600 seconds .*got 1,299,599 seconds.*"
        r"max_event_age 1 day.*14 days retention",
    ):
        make_step(stack, expires_after=Duration.seconds(1_299_599))


def test_expires_after_follows_a_shorter_max_event_age(stack):
    """max_event_age 1 hour: 1 h + 14 days + 1 h is allowed, one second less is not."""
    with pytest.raises(PropValidationError, match=r"at least 1,216,800 seconds"):
        make_step(
            stack,
            max_event_age=Duration.hours(1),
            expires_after=Duration.seconds(1_216_799),
        )


def test_expires_after_covers_a_batch_too(stack):
    """Under batch delivery the minimum still comes from the queues' 14 days (a batch holds
    a row about 2 days), and the message says why."""
    with pytest.raises(PropValidationError, match=r"delivery=ModelDelivery.batch\(\)"):
        make_step(
            stack,
            delivery=ModelDelivery.batch(),
            expires_after=Duration.days(3),
        )


def test_fifo_dead_letter_queue_is_refused_with_the_reason(stack):
    fifo = sqs.Queue(stack, "Fifo", fifo=True)
    with pytest.raises(PropValidationError, match=r"must be a standard SQS queue.*FIFO"):
        make_step(stack, dead_letter_queue=fifo)


def test_anthropic_provider_needs_a_secret(stack):
    with pytest.raises(PropValidationError, match=r"api_key_secret is required"):
        make_step(stack, api_key_secret=None)


def test_bedrock_provider_refuses_a_secret(stack):
    with pytest.raises(PropValidationError, match=r"api_key_secret must not be set"):
        make_step(stack, model_provider=ModelProvider.BEDROCK)


def test_bedrock_needs_a_bedrock_model_id(stack):
    with pytest.raises(PropValidationError, match=r"model_id must be a Bedrock foundation-model"):
        make_step(stack, model_provider=ModelProvider.BEDROCK, api_key_secret=None)


@pytest.mark.parametrize(
    "model_id",
    [
        "claude-haiku-5-5",  # the Claude API's name, not Bedrock's
        "anthropic.",
        "us.claude-haiku-5-5-v1:0",
        "us.anthropic.",
        "ca.anthropic.claude-haiku-5-5-v1:0",  # no such geography prefix here
        "global.us.anthropic.claude-haiku-5-5-v1:0",
        "meta.llama3-70b-instruct-v1:0",
        "arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-haiku-5-5-v1:0",
        "US.anthropic.claude-haiku-5-5-v1:0",
    ],
)
def test_a_bad_bedrock_model_id_fails_at_synth_naming_the_prop_the_value_and_what_is_allowed(
    stack, model_id
):
    with pytest.raises(PropValidationError) as raised:
        make_step(stack, model_provider=ModelProvider.BEDROCK, api_key_secret=None,
                  model_id=model_id)  # fmt: skip
    message = str(raised.value)
    assert "model_id must be a Bedrock foundation-model id or inference-profile id" in message
    assert repr(model_id) in message
    assert "'anthropic.<model>'" in message
    assert "'<us|eu|apac|jp|au|us-gov|global>.anthropic.<model>'" in message


@pytest.mark.parametrize(
    "model_id",
    [
        "anthropic.claude-haiku-5-5-v1:0",
        "us.anthropic.claude-haiku-5-5-v1:0",
        "eu.anthropic.claude-sonnet-5-20260101-v1:0",
        "apac.anthropic.claude-haiku-5-5-v1:0",
        "global.anthropic.claude-opus-5-v1",
    ],
)
def test_foundation_model_and_inference_profile_ids_are_accepted(stack, model_id):
    step = make_step(stack, model_provider=ModelProvider.BEDROCK, api_key_secret=None,
                     model_id=model_id)  # fmt: skip
    assert step.function is not None


def test_environment_may_not_override_runtime_settings(stack):
    with pytest.raises(PropValidationError, match=r"environment may not set MODEL_ID;"):
        make_step(stack, environment={"MODEL_ID": "other", "MY_SETTING": "1"})


@pytest.mark.parametrize(
    "name",
    ["POWERTOOLS_IDEMPOTENCY_DISABLED", "POWERTOOLS_LOG_LEVEL", "AWS_REGION", "AWS_ENDPOINT_URL",
     "IDEMPOTENCY_RECORD_PREFIX", "BUFFER_QUEUE_URL", "MAX_ATTEMPTS", "MAX_EVENT_AGE_SECONDS",
     "API_KEY_MAX_AGE_SECONDS"],
)  # fmt: skip
def test_environment_refuses_reserved_names_and_prefixes(stack, name):
    with pytest.raises(
        PropValidationError, match=rf"'Validation/Step': environment may not set {name};"
    ):
        make_step(stack, environment={name: "x"})


def test_allowed_labels_must_be_plain_words(stack):
    with pytest.raises(PropValidationError, match=r"allowed_labels must be non-empty strings"):
        make_step(stack, allowed_labels=["hot", "warm,cold"])


def test_custom_handler_must_live_in_its_package(tmp_path):
    package = tmp_path / "my_step"
    package.mkdir()
    (package / "__init__.py").write_text("")
    with pytest.raises(PropValidationError, match=r"handler must be .* inside package 'my_step'"):
        ModelStepHandler.from_package(package, handler="other.handler.handler")


def test_custom_handler_path_must_be_a_package(tmp_path):
    with pytest.raises(PropValidationError, match=r"path must be a Python package directory"):
        ModelStepHandler.from_package(tmp_path, handler=f"{tmp_path.name}.handler.handler")


def test_extra_package_must_be_a_package(tmp_path):
    (tmp_path / "my_step").mkdir()
    (tmp_path / "my_step" / "__init__.py").write_text("")
    (tmp_path / "not_a_package").mkdir()
    with pytest.raises(
        PropValidationError, match=r"extra_packages must be a Python package directory"
    ):
        ModelStepHandler.from_package(
            tmp_path / "my_step",
            handler="my_step.handler.handler",
            extra_packages=[tmp_path / "not_a_package"],
        )


def test_extra_packages_need_distinct_names(tmp_path):
    for package in ("my_step", "other/my_step", "other/model_step"):
        (tmp_path / package).mkdir(parents=True)
        (tmp_path / package / "__init__.py").write_text("")
    with pytest.raises(PropValidationError, match=r"distinct names .*\['my_step', 'my_step'\]"):
        ModelStepHandler.from_package(
            tmp_path / "my_step",
            handler="my_step.handler.handler",
            extra_packages=[tmp_path / "other" / "my_step"],
        )
    with pytest.raises(PropValidationError, match=r"'model_step' is the library's runtime"):
        ModelStepHandler.from_package(
            tmp_path / "my_step",
            handler="my_step.handler.handler",
            extra_packages=[tmp_path / "other" / "model_step"],
        )


def test_retry_budget_range():
    with pytest.raises(
        PropValidationError, match=r"max_model_requests_per_delivery must be between 1 and 3, got 0"
    ):
        RetryBudget(max_model_requests_per_delivery=0)


def test_valid_props_build(stack):
    step = make_step(stack, **{k: v for k, v in step_props(stack).items() if k == "prompt_version"})
    assert step.max_model_requests_per_delivery == 3
