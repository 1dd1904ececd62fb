"""Issues 20 and 32: the price table (the model catalogue's prices), its overrides, and what
reaches the functions that report cost."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template
from hypothesis import given, settings
from hypothesis import strategies as st

from constructs_lib import PropValidationError
from constructs_lib.model_prices import NEW_MODEL_FIELDS, PRICE_TABLE, price_table, upload_cost
from constructs_lib.prospect_uploader.stack import ProspectUploaderStack

from .conftest import NO_BUNDLING, unvalidated_app


def _variable(stack: cdk.Stack, name: str, of_functions_with: str) -> set[str | None]:
    """``name`` of every function that has ``of_functions_with`` (None where it is unset)."""
    return {
        body["Properties"]["Environment"]["Variables"].get(name)
        for body in Template.from_stack(stack).to_json()["Resources"].values()
        if body["Type"] == "AWS::Lambda::Function"
        and of_functions_with in body["Properties"]["Environment"]["Variables"]
    }


def _model_prices(stack: cdk.Stack) -> set[str | None]:
    """MODEL_PRICE of every function that reports an upload's cost."""
    return _variable(stack, "MODEL_PRICE", "UPLOADS_TABLE_NAME")


def _step_rates(stack: cdk.Stack) -> set[str | None]:
    """MODEL_RATES of every model step function."""
    return _variable(stack, "MODEL_RATES", "MODEL_PROVIDER")


def test_the_default_model_is_priced_as_published_not_as_haiku_4_5():
    row = PRICE_TABLE["claude-haiku-5-5"]
    rates = (row.input, row.output, row.cache_write_5m, row.cache_write_1h, row.cache_read)
    assert rates == (0.10, 0.50, 0.125, 0.20, 0.01)
    assert (row.batch_discount, row.min_cacheable_tokens) == (0.5, 512)
    long_context = (
        row.long_context_input,
        row.long_context_output,
        row.long_context_cache_write_5m,
        row.long_context_cache_write_1h,
        row.long_context_cache_read,
    )
    assert (row.long_context_threshold_tokens, long_context) == (
        100_000,
        (0.50, 2.50, 0.625, 1.00, 0.05),
    )
    assert (row.source, row.as_of) == (
        "https://platform.claude.com/docs/en/models/haiku-5-5/overview",
        "2026-12-01",
    )


def test_every_row_cites_its_source_and_states_every_rate():
    for model_id, price in PRICE_TABLE.items():
        assert price.source and price.source.startswith("https://"), model_id
        assert price.as_of, model_id
        assert None not in (price.cache_write_5m, price.cache_write_1h, price.cache_read)


def test_an_override_moves_only_the_fields_it_gives():
    # A cache rate is a model's fact, not a multiple of its input price.
    table = price_table({"claude-haiku-5-5": {"input": 2}})

    row = table["claude-haiku-5-5"]
    assert (row.input, row.output, row.cache_write_5m, row.cache_read) == (2.0, 0.5, 0.125, 0.01)
    assert (row.source, row.as_of) == ("model_prices", None)


def test_a_new_model_must_state_every_price_never_a_multiple():
    with pytest.raises(PropValidationError, match=r"'my-model' is not in the model catalogue"):
        price_table({"my-model": {"input": 1, "output": 5, "min_cacheable_tokens": 1024}})


def test_a_tiered_new_model_must_state_every_long_context_rate():
    price = {
        "input": 1, "output": 5, "cache_write_5m": 1.25, "cache_write_1h": 2,
        "cache_read": 0.025, "batch_discount": 0.5, "min_cacheable_tokens": 1024,
        "long_context_threshold_tokens": 200_000, "long_context_input": 2,
    }  # fmt: skip
    with pytest.raises(PropValidationError, match=r"long_context_threshold_tokens.*output"):
        price_table({"my-model": price})
    row = price_table({"my-model": {**price, "long_context_threshold_tokens": None}})["my-model"]
    assert (row.cache_read, row.long_context_input) == (0.025, None)


def test_a_negative_price_names_the_model_and_the_field():
    with pytest.raises(PropValidationError, match=r"'claude-haiku-5-5'\.output must be a number"):
        price_table({"claude-haiku-5-5": {"output": -1}})


def test_an_unknown_model_has_no_cost_never_a_guess():
    figures = upload_cost({"input_tokens": 1_000_000}, None)

    assert set(figures.values()) == {None}


def test_the_stack_gives_every_reporting_function_the_classify_models_price():
    stack = ProspectUploaderStack(unvalidated_app(context=NO_BUNDLING), "Priced")

    [price] = _model_prices(stack)
    assert json.loads(price) == {
        "input": 0.1,
        "output": 0.5,
        "cache_write": 0.125,
        "cache_read": 0.01,
        "batch_discount": 0.5,
    }


def test_context_overrides_the_prop_and_the_prop_the_table():
    app = unvalidated_app(
        context={**NO_BUNDLING, "model_prices": '{"claude-haiku-5-5": {"output": 7}}'}
    )
    stack = ProspectUploaderStack(
        app, "Overridden", model_prices={"claude-haiku-5-5": {"input": 3, "output": 6}}
    )

    [price] = _model_prices(stack)
    assert (json.loads(price)["input"], json.loads(price)["output"]) == (3.0, 7.0)
    # The classify steps price each request with the same row (MODEL_RATES).
    [rates] = _step_rates(stack)
    assert (json.loads(rates)["input"], json.loads(rates)["output"]) == (3.0, 7.0)


def test_a_model_without_a_price_reports_none_to_its_functions():
    # null removes a row: a price known to be wrong is better unknown than reported.
    app = unvalidated_app(context={**NO_BUNDLING, "model_prices": '{"claude-haiku-5-5": null}'})
    stack = ProspectUploaderStack(app, "Unpriced")

    assert "claude-haiku-5-5" not in stack.model_prices
    assert _model_prices(stack) == {None}
    assert _step_rates(stack) == {None}


def test_context_model_prices_must_be_json():
    app = unvalidated_app(context={**NO_BUNDLING, "model_prices": "{not json"})
    with pytest.raises(PropValidationError, match=r"context model_prices must be JSON"):
        ProspectUploaderStack(app, "BadPrices")


#: Every price field an override may give a catalogued model, and a value it may take.
_RATE_VALUES = st.floats(min_value=0, max_value=100, allow_nan=False, allow_infinity=False)
_OVERRIDABLE = (
    "input", "output", "cache_write_5m", "cache_write_1h", "cache_read",
    "long_context_input", "long_context_output", "long_context_cache_write_5m",
    "long_context_cache_write_1h", "long_context_cache_read",
)  # fmt: skip


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.dictionaries(st.sampled_from(_OVERRIDABLE), _RATE_VALUES, max_size=len(_OVERRIDABLE)))
def test_an_override_of_a_catalogued_model_moves_exactly_the_fields_it_gives(given_rates):
    base = PRICE_TABLE["claude-haiku-5-5"]

    row = price_table({"claude-haiku-5-5": given_rates})["claude-haiku-5-5"]

    for name in _OVERRIDABLE:
        expected = given_rates.get(name, getattr(base, name))
        assert getattr(row, name) == pytest.approx(expected), name
    assert row.source == ("model_prices" if given_rates else base.source)


@settings(max_examples=50, deadline=None, derandomize=True)
@given(st.sampled_from(NEW_MODEL_FIELDS))
def test_a_new_model_that_leaves_out_any_one_price_is_refused_naming_it(missing):
    price = {
        "input": 1, "output": 5, "cache_write_5m": 1.25, "cache_write_1h": 2,
        "cache_read": 0.1, "batch_discount": 0.5, "min_cacheable_tokens": 1024,
        "long_context_threshold_tokens": None,
    }  # fmt: skip
    del price[missing]

    with pytest.raises(PropValidationError, match=rf"must give \['{missing}'\]"):
        price_table({"my-model": price})
