"""The runtime's environment names are declared once (model_step/environment.py) and the
construct sets exactly the declared ones."""

from __future__ import annotations

import ast
import subprocess
import sys

from constructs_lib import RESERVED_ENVIRONMENT
from constructs_lib._paths import lambda_src_root
from constructs_lib._runtime_environment import runtime_environment as env

from .conftest import REPO

ENVIRONMENT_PY = lambda_src_root() / "model_step" / "environment.py"


def demo_function_environment(demo) -> dict:
    # The demo step sets every optional name: allowed labels, an API key secret, thinking,
    # effort and (its model being in the catalogue) MODEL_RATES.
    functions = [
        resource
        for resource in demo.templates["IdempotentModelStepDemo"]["Resources"].values()
        if resource["Type"] == "AWS::Lambda::Function"
    ]
    assert len(functions) == 1
    return functions[0]["Properties"]["Environment"]["Variables"]


def test_every_name_the_construct_sets_is_declared_with_origin_construct(demo):
    # GIVEN a step with every optional prop  WHEN synthesized
    # THEN its function's variables are exactly the declared construct-set names
    declared = {v.name for v in env.VARIABLES if v.origin == "construct"}
    # Set under ModelDelivery.batch() only (the demo is realtime): test_model_delivery.py.
    batch_only = {env.MODEL_DELIVERY, env.BATCH_MAX_REQUESTS, env.BATCH_MAX_WAIT_SECONDS}
    # Set under ModelDelivery.batch() on Bedrock only: test_bedrock_batch_jobs.py.
    batch_only |= {env.BATCH_BUCKET_NAME, env.BATCH_S3_PREFIX, env.BATCH_ROLE_ARN}
    assert set(demo_function_environment(demo)) == declared - batch_only


def test_reserved_environment_is_derived_from_the_declarations():
    assert RESERVED_ENVIRONMENT == {v.name for v in env.VARIABLES if v.reserved}
    assert env.ANTHROPIC_API_KEY in RESERVED_ENVIRONMENT  # never on a deployed step
    assert env.ANTHROPIC_BASE_URL not in RESERVED_ENVIRONMENT  # a caller may point the SDK


def test_each_constant_names_itself_and_is_declared_once():
    constants = {
        name: value
        for name, value in vars(env).items()
        if name.isupper() and isinstance(value, str)
    }
    assert all(name == value for name, value in constants.items())
    declared = [v.name for v in env.VARIABLES]
    assert sorted(declared) == sorted(constants.values())
    assert len(declared) == len(set(declared))


def test_every_declaration_has_a_meaning_and_required_ones_no_default():
    for variable in env.VARIABLES:
        assert variable.meaning.strip(), variable.name
        assert not (variable.required and variable.default is not None), variable.name
    assert env.by_name(env.MAX_ATTEMPTS).default == "3"


def test_the_module_imports_the_standard_library_only():
    # The construct loads it in a CDK app, where boto3 and Powertools need not exist.
    tree = ast.parse(ENVIRONMENT_PY.read_text())
    imported = {
        (node.module if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}


def test_the_construct_loads_the_file_without_importing_model_step():
    # model_step/__init__ imports boto3 and Powertools; the construct must not run it.
    code = (
        "import sys; from constructs_lib._runtime_environment import runtime_environment; "
        "print(runtime_environment.MAX_ATTEMPTS, sorted(n for n in sys.modules "
        "if n.split('.')[0] in {'model_step', 'boto3', 'aws_lambda_powertools'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["MAX_ATTEMPTS", "[]"]
