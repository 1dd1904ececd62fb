"""Issue 20: the system prompt ships with the function's code; only its sha256 is in the
environment."""

from __future__ import annotations

import hashlib
from pathlib import Path

import aws_cdk as cdk
from aws_cdk.assertions import Template

from constructs_lib import PromptCache
from constructs_lib._paths import lambda_src_root
from constructs_lib.bundling.local_pip import LocalPipBundling
from constructs_lib.system_prompt_asset import PROMPTS_DIRECTORY, SYSTEM_PROMPT_DIRECTORY

from .conftest import NO_BUNDLING, make_step, unvalidated_app

RUBRIC = "Score the lead against this rubric.\n" + "Worked example: hot.\n" * 5_000


def _stack(tmp_path: Path, name: str = "Prompt") -> cdk.Stack:
    return cdk.Stack(unvalidated_app(context=NO_BUNDLING, outdir=str(tmp_path / name)), name)


def _function(stack: cdk.Stack) -> dict:
    [function] = [
        body
        for body in Template.from_stack(stack).to_json()["Resources"].values()
        if body["Type"] == "AWS::Lambda::Function"
    ]
    return function["Properties"]


def test_a_long_prompt_is_in_the_assembly_and_only_its_hash_in_the_environment(tmp_path):
    stack = _stack(tmp_path)
    step = make_step(stack, system_prompt=RUBRIC)

    sha256 = hashlib.sha256(RUBRIC.encode()).hexdigest()
    variables = _function(stack)["Environment"]["Variables"]
    assert variables["SYSTEM_PROMPT_SHA256"] == step.system_prompt_sha256 == sha256
    assert not any("rubric" in str(value) for value in variables.values())
    shipped = tmp_path / "Prompt" / PROMPTS_DIRECTORY / sha256 / "model_step_prompt"
    assert (shipped / f"{sha256}.txt").read_text() == RUBRIC


def test_system_prompt_file_is_read_at_synth(tmp_path):
    path = tmp_path / "rubric.txt"
    path.write_text(RUBRIC)
    stack = _stack(tmp_path)
    make_step(stack, system_prompt=None, system_prompt_file=path)

    variables = _function(stack)["Environment"]["Variables"]
    assert variables["SYSTEM_PROMPT_SHA256"] == hashlib.sha256(RUBRIC.encode()).hexdigest()


def test_an_edited_prompt_is_new_code(tmp_path):
    first, second = _stack(tmp_path, "First"), _stack(tmp_path, "Second")
    make_step(first, system_prompt=RUBRIC + "Answer hot.")
    make_step(second, system_prompt=RUBRIC + "Answer cold.")

    assert _function(first)["Code"]["S3Key"] != _function(second)["Code"]["S3Key"]


def test_the_bundle_ships_the_prompt_beside_the_runtime(tmp_path):
    stack = _stack(tmp_path)
    step = make_step(stack, system_prompt=RUBRIC)
    prompts = tmp_path / "Prompt" / PROMPTS_DIRECTORY / step.system_prompt_sha256
    bundling = LocalPipBundling(
        [lambda_src_root() / "model_step", prompts / "model_step_prompt"],
        [],
        "manylinux2014_x86_64",
    )
    bundling.bundle(tmp_path / "asset")

    shipped = tmp_path / "asset" / "model_step_prompt" / f"{step.system_prompt_sha256}.txt"
    assert shipped.read_text() == RUBRIC
    assert (tmp_path / "asset" / "model_step" / "system_prompt.py").is_file()


def test_prompt_cache_sets_the_ttl_and_off(tmp_path):
    stack = _stack(tmp_path)
    make_step(stack, "Hour", prompt_cache=PromptCache.ONE_HOUR)
    make_step(stack, "Off", prompt_cache=PromptCache.OFF)

    template = Template.from_stack(stack).to_json()["Resources"].values()
    caches = sorted(
        body["Properties"]["Environment"]["Variables"]["PROMPT_CACHE"]
        for body in template
        if body["Type"] == "AWS::Lambda::Function"
    )
    assert caches == ["1h", "off"]


def test_the_construct_ships_the_prompt_where_the_runtime_reads_it():
    from constructs_lib.testing import runtime_on_path

    runtime_on_path()
    from model_step.system_prompt import SYSTEM_PROMPT_DIRECTORY as RUNTIME_DIRECTORY

    assert SYSTEM_PROMPT_DIRECTORY == RUNTIME_DIRECTORY == "model_step_prompt"


def test_the_cache_metrics_are_the_runtimes_emf_names(tmp_path):
    stack = _stack(tmp_path)
    step = make_step(stack)

    for metric, name in (
        (step.metric_cache_write_input_tokens(), "CacheWriteInputTokens"),
        (step.metric_cache_read_input_tokens(), "CacheReadInputTokens"),
    ):
        assert (metric.namespace, metric.metric_name) == ("IdempotentModelStep", name)
        assert metric.dimensions == {"service": step.node.path}
        assert metric.statistic == "Sum"
