"""Issue 20: the price table, its overrides, and what reaches the functions that report cost."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from constructs_lib import PropValidationError
from constructs_lib.model_prices import PRICE_TABLE, price_table, upload_cost
from constructs_lib.prospect_uploader.stack import ProspectUploaderStack

from .conftest import NO_BUNDLING


def _model_prices(stack: cdk.Stack) -> set[str | None]:
    """MODEL_PRICE of every function (None for a function without it)."""
    return {
        body["Properties"]["Environment"]["Variables"].get("MODEL_PRICE")
        for body in Template.from_stack(stack).to_json()["Resources"].values()
        if body["Type"] == "AWS::Lambda::Function"
        and "UPLOADS_TABLE_NAME" in body["Properties"]["Environment"]["Variables"]
    }


def test_every_row_follows_the_documented_multipliers():
    for model_id, price in PRICE_TABLE.items():
        assert price.cache_write_5m == pytest.approx(1.25 * price.input), model_id
        assert price.cache_write_1h == pytest.approx(2 * price.input), model_id
        assert price.cache_read == pytest.approx(0.1 * price.input), model_id
        assert price.batch_discount == 0.5, model_id
        assert 512 <= price.min_cacheable_tokens <= 4096, model_id


def test_a_new_input_price_moves_the_cache_prices_with_it():
    table = price_table({"claude-haiku-5-5": {"input": 2}})

    row = table["claude-haiku-5-5"]
    assert (row.input, row.output, row.cache_write_5m, row.cache_read) == (2.0, 5.0, 2.5, 0.2)


def test_a_new_model_needs_its_input_output_and_minimum():
    with pytest.raises(PropValidationError, match=r"'my-model' is not in the price table.*output"):
        price_table({"my-model": {"input": 1}})


def test_a_negative_price_names_the_model_and_the_field():
    with pytest.raises(PropValidationError, match=r"'claude-haiku-5-5'\.output must be a number"):
        price_table({"claude-haiku-5-5": {"output": -1}})


def test_an_unknown_model_has_no_cost_never_a_guess():
    figures = upload_cost({"input_tokens": 1_000_000}, None)

    assert set(figures.values()) == {None}


def test_the_stack_gives_every_reporting_function_the_classify_models_price():
    stack = ProspectUploaderStack(cdk.App(context=NO_BUNDLING), "Priced")

    [price] = _model_prices(stack)
    assert json.loads(price) == {
        "input": 1.0,
        "output": 5.0,
        "cache_write": 1.25,
        "cache_read": 0.1,
        "batch_discount": 0.5,
    }


def test_context_overrides_the_prop_and_the_prop_the_table():
    app = cdk.App(context={**NO_BUNDLING, "model_prices": '{"claude-haiku-5-5": {"output": 7}}'})
    stack = ProspectUploaderStack(
        app, "Overridden", model_prices={"claude-haiku-5-5": {"input": 3, "output": 6}}
    )

    [price] = _model_prices(stack)
    assert (json.loads(price)["input"], json.loads(price)["output"]) == (3.0, 7.0)


def test_a_model_without_a_price_reports_none_to_its_functions():
    # null removes a row: a price known to be wrong is better unknown than reported.
    app = cdk.App(context={**NO_BUNDLING, "model_prices": '{"claude-haiku-5-5": null}'})
    stack = ProspectUploaderStack(app, "Unpriced")

    assert "claude-haiku-5-5" not in stack.model_prices
    assert _model_prices(stack) == {None}


def test_context_model_prices_must_be_json():
    app = cdk.App(context={**NO_BUNDLING, "model_prices": "{not json"})
    with pytest.raises(PropValidationError, match=r"context model_prices must be JSON"):
        ProspectUploaderStack(app, "BadPrices")
