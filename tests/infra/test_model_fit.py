"""Issue 32: a step's request fits its model, checked at synth against the model catalogue.

``thinking`` and ``effort`` are sent as the Messages API takes them (``THINKING``/``EFFORT``),
a ``max_tokens`` too small for the model's thinking fails naming both props, a model the
catalogue does not know is a warning naming ``model_id`` (never a refusal), and the step's
price (``MODEL_RATES``) is the catalogue's row of its model, under ``model_prices``.
"""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import assertions

from constructs_lib import Effort, ModelProvider, PropValidationError, Thinking
from constructs_lib.model_fit import UNKNOWN_MODEL_WARNING

from .conftest import NO_BUNDLING, make_step, unvalidated_app


@pytest.fixture
def app() -> cdk.App:
    """An app per test: each test synthesizes (or refuses) one stack of its own."""
    return unvalidated_app(context=NO_BUNDLING)


def _stack(app: cdk.App) -> cdk.Stack:
    return cdk.Stack(app, "Fit")


def _variables(step) -> dict[str, str]:
    """The step function's environment, as synthesized."""
    template = assertions.Template.from_stack(cdk.Stack.of(step))
    [function] = template.find_resources(
        "AWS::Lambda::Function",
        {"Properties": {"Environment": {"Variables": {"MODEL_ID": assertions.Match.any_value()}}}},
    ).values()
    return function["Properties"]["Environment"]["Variables"]


def test_by_default_nothing_is_sent_and_the_step_is_priced_from_the_catalogue(app):
    # GIVEN the default model (it thinks by default) and the default max_tokens (1,024)
    step = make_step(_stack(app))

    # THEN neither field is sent (the model's own default), and the price is Haiku 5.5's
    variables = _variables(step)
    assert "THINKING" not in variables and "EFFORT" not in variables
    rates = json.loads(variables["MODEL_RATES"])
    assert (rates["input"], rates["output"], rates["cache_write_5m"]) == (0.1, 0.5, 0.125)
    assert (rates["cache_write_1h"], rates["cache_read"]) == (0.2, 0.01)
    assert (rates["long_context_threshold_tokens"], rates["long_context_input"]) == (100_000, 0.5)
    assert rates["source"].startswith("https://platform.claude.com/")
    assert step.model_spec.model_id == "claude-haiku-5-5"


def test_a_max_tokens_too_small_for_default_thinking_names_both_props(app):
    with pytest.raises(PropValidationError) as raised:
        make_step(_stack(app), max_tokens=16)

    message = str(raised.value)
    assert "max_tokens=16" in message and "thinking" in message
    assert "1,024" in message and "Thinking.DISABLED" in message


def test_a_max_tokens_too_small_for_adaptive_thinking_names_both_props(app):
    with pytest.raises(PropValidationError, match=r"max_tokens=512.*Thinking\.ADAPTIVE"):
        make_step(_stack(app), max_tokens=512, thinking=Thinking.ADAPTIVE)


def test_thinking_off_takes_a_short_max_tokens_and_is_sent(app):
    step = make_step(_stack(app), max_tokens=16, thinking=Thinking.DISABLED)

    assert _variables(step)["THINKING"] == "disabled"
    assert _variables(step)["MAX_TOKENS"] == "16"


@pytest.mark.parametrize("effort", [Effort.LOW, "low", Effort.MAX])
def test_an_effort_level_of_the_model_is_sent(app, effort):
    step = make_step(_stack(app), effort=effort)

    value = effort.value if isinstance(effort, Effort) else effort
    assert _variables(step)["EFFORT"] == value


def test_an_effort_the_model_refuses_without_thinking_names_effort_and_thinking(app):
    # Claude Haiku 5.5 caps effort at high with thinking off (its Bedrock model card).
    with pytest.raises(PropValidationError, match=r"effort='xhigh' with thinking=Thinking\.DIS"):
        make_step(_stack(app), max_tokens=16, thinking=Thinking.DISABLED, effort=Effort.XHIGH)


@pytest.mark.parametrize(
    ("props", "pattern"),
    [
        ({"thinking": "adaptive"}, r"thinking must be Thinking\.ADAPTIVE, Thinking\.DISABLED"),
        ({"effort": "extreme"}, r"effort must be one of \['low', 'medium', 'high', 'xhigh'"),
        (
            {"model_id": "claude-haiku-4-5", "thinking": Thinking.ADAPTIVE},
            r"thinking=Thinking\.ADAPTIVE: claude-haiku-4-5 accepts thinking types "
            r"\['enabled', 'disabled'\]",
        ),
        (
            {"model_id": "claude-haiku-4-5", "effort": Effort.LOW},
            r"claude-haiku-4-5 has no effort parameter",
        ),
        (
            {"model_id": "claude-haiku-4-5", "max_tokens": 100_000},
            r"max_tokens must be at most 64,000 for claude-haiku-4-5.*got 100,000",
        ),
        (
            {"model_id": "claude-opus-4-5", "effort": Effort.MAX},
            r"claude-opus-4-5 accepts effort \['low', 'medium', 'high'\], not 'max'",
        ),
    ],
)
def test_a_request_the_model_refuses_fails_at_synth_naming_the_prop(app, props, pattern):
    with pytest.raises(PropValidationError, match=pattern):
        make_step(_stack(app), **props)


def test_a_model_older_than_thinking_takes_a_short_max_tokens(app):
    # Claude Haiku 4.5 does not think unless asked: 16 tokens hold a label.
    step = make_step(_stack(app), model_id="claude-haiku-4-5", max_tokens=16)

    assert json.loads(_variables(step)["MODEL_RATES"])["input"] == 1.0


def test_a_model_the_catalogue_does_not_know_warns_naming_model_id_and_has_no_price(app):
    stack = _stack(app)
    step = make_step(stack, model_id="claude-sonnet-9-9", max_tokens=16)

    assert step.model_spec is None
    assert "MODEL_RATES" not in _variables(step)
    [warning] = assertions.Annotations.from_stack(stack).find_warning(
        f"/{stack.node.path}/Step", assertions.Match.string_like_regexp("model_id")
    )
    text = str(warning.entry.data)
    assert "model_id 'claude-sonnet-9-9' is not in the model catalogue" in text
    assert UNKNOWN_MODEL_WARNING in text


def test_a_new_model_is_priced_when_model_prices_states_every_price(app):
    price = {
        "input": 2.0,
        "output": 10.0,
        "cache_write_5m": 2.5,
        "cache_write_1h": 4.0,
        "cache_read": 0.05,  # not 0.1x: stated, never derived
        "batch_discount": 0.5,
        "min_cacheable_tokens": 1024,
        "long_context_threshold_tokens": None,
    }
    step = make_step(
        _stack(app),
        model_id="claude-sonnet-9-9",
        max_tokens=16,
        model_prices={"claude-sonnet-9-9": price},
    )

    rates = json.loads(_variables(step)["MODEL_RATES"])
    assert rates["cache_read"] == 0.05
    assert rates["source"].endswith(": model_prices")  # an override says it is one


def test_a_new_model_that_leaves_a_price_out_is_refused_never_guessed(app):
    with pytest.raises(
        PropValidationError, match=r"must give \['cache_write_5m', 'cache_write_1h'"
    ):
        make_step(
            _stack(app),
            model_id="claude-sonnet-9-9",
            max_tokens=16,
            model_prices={
                "claude-sonnet-9-9": {"input": 2, "output": 10, "min_cacheable_tokens": 1024}
            },
        )


def test_a_price_set_to_none_leaves_the_cost_unknown(app):
    step = make_step(_stack(app), model_prices={"claude-haiku-5-5": None})

    assert step.model_price is None
    assert "MODEL_RATES" not in _variables(step)


def test_a_bedrock_profile_is_priced_as_the_model_it_names(app):
    step = make_step(
        _stack(app),
        model_provider=ModelProvider.BEDROCK,
        api_key_secret=None,
        model_id="eu.anthropic.claude-opus-4-5-20251101-v1:0",
        max_tokens=16,
    )

    rates = json.loads(_variables(step)["MODEL_RATES"])
    assert (rates["input"], rates["output"], rates["cache_read"]) == (5.0, 25.0, 0.5)
