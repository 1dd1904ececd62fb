"""Issue 32: one model catalogue, with sources, and the arithmetic that prices a request.

The catalogue (``lambda_src/model_step/model_catalogue.py``) and the request cost
(``request_cost.py``) are standard library only, loaded here by their path as the
constructs load them.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from constructs_lib._runtime_modules import model_catalogue as catalogue
from constructs_lib.model_prices import PRICE_TABLE, request_cost

HAIKU = catalogue.CATALOGUE["claude-haiku-5-5"]


def test_every_row_cites_its_source_page_and_an_as_of_date():
    for model_id, spec in catalogue.CATALOGUE.items():
        assert spec.model_id == model_id
        assert spec.source.startswith("https://platform.claude.com/docs/"), model_id
        assert dt.date.fromisoformat(spec.as_of) <= dt.date(2026, 12, 31), model_id
        assert spec.bedrock_source and spec.bedrock_source.startswith(
            "https://docs.aws.amazon.com/"
        )


def test_haiku_5_5_is_as_its_overview_page_states_it():
    # GIVEN the published facts (platform.claude.com/docs/en/models/haiku-5-5/overview)
    rates = HAIKU.rates
    assert (rates.input, rates.output, rates.cache_write_5m, rates.cache_write_1h) == (
        0.10, 0.50, 0.125, 0.20,
    )  # fmt: skip
    assert rates.cache_read == 0.01
    assert HAIKU.long_context_threshold_tokens == 100_000
    assert HAIKU.long_context_rates == catalogue.Rates(0.50, 2.50, 0.625, 1.00, 0.05)
    assert (HAIKU.batch_discount, HAIKU.min_cacheable_tokens, HAIKU.max_output_tokens) == (
        0.5, 512, 128_000,
    )  # fmt: skip
    # Adaptive thinking by default at effort medium; off is allowed, enabled+budget is not.
    assert (HAIKU.default_thinking, HAIKU.thinking_modes) == ("adaptive", ("adaptive", "disabled"))
    assert (HAIKU.default_effort, HAIKU.effort_levels) == (
        "medium", ("low", "medium", "high", "xhigh", "max"),
    )  # fmt: skip
    assert HAIKU.effort_levels_without_thinking == ("low", "medium", "high")
    assert HAIKU.rejected_sampling_parameters == ("temperature", "top_p", "top_k")
    assert HAIKU.rejects_prefill
    assert (HAIKU.bedrock_model_id, HAIKU.bedrock_ids()[1]) == (
        "anthropic.claude-haiku-5-5", "us.anthropic.claude-haiku-5-5",
    )  # fmt: skip


def test_no_bedrock_id_of_the_default_model_carries_a_version_suffix():
    assert all(":" not in model_id for model_id in HAIKU.bedrock_ids())


@pytest.mark.parametrize("prefix", catalogue.PROFILE_PREFIXES)
def test_every_profile_prefix_names_its_model(prefix):
    assert catalogue.split_profile(f"{prefix}.anthropic.claude-haiku-5-5") == (
        prefix,
        "anthropic.claude-haiku-5-5",
    )
    assert catalogue.lookup(f"{prefix}.anthropic.claude-haiku-5-5") is HAIKU


def test_published_ids_are_the_catalogues_and_others_are_not():
    assert catalogue.is_published("claude-haiku-5-5", "anthropic")
    assert catalogue.is_published("jp.anthropic.claude-haiku-5-5", "bedrock")
    # A real prefix the row does not list, an old guess of an id, an id of the other provider.
    assert not catalogue.is_published("us-gov.anthropic.claude-haiku-5-5", "bedrock")
    assert catalogue.lookup("us.anthropic.claude-haiku-5-5-v1:0") is None
    assert not catalogue.is_published("anthropic.claude-haiku-5-5", "anthropic")
    assert not catalogue.is_published("claude-haiku-5-5", "bedrock")


def _price(model_id: str = "claude-haiku-5-5"):
    return request_cost().StepPrice.from_json(PRICE_TABLE[model_id].for_step())


def test_a_request_is_priced_at_its_tier_every_rate_included():
    price = _price()
    short = {"input_tokens": 100_000, "output_tokens": 1_000}
    long = {"input_tokens": 100_001, "output_tokens": 1_000}

    assert price.cost_usd(short, prompt_cache="5m", batch=False) == pytest.approx(
        (100_000 * 0.10 + 1_000 * 0.50) / 1e6
    )
    # Over 100,000 tokens of prompt, output too is billed at the long-context rate.
    assert price.cost_usd(long, prompt_cache="5m", batch=False) == pytest.approx(
        (100_001 * 0.50 + 1_000 * 2.50) / 1e6
    )


def test_cached_tokens_count_toward_the_tier_and_are_billed_at_their_own_rates():
    price = _price()
    usage = {
        "input_tokens": 60,
        "output_tokens": 2,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 100_000,
    }
    write = {**usage, "cache_creation_input_tokens": 2_000, "cache_read_input_tokens": 0}

    assert price.cost_usd(usage, prompt_cache="5m", batch=False) == pytest.approx(
        (60 * 0.50 + 2 * 2.50 + 100_000 * 0.05) / 1e6
    )
    assert price.cost_usd(write, prompt_cache="1h", batch=False) == pytest.approx(
        (60 * 0.10 + 2 * 0.50 + 2_000 * 0.20) / 1e6
    )


def test_a_batch_request_pays_its_share_and_a_one_tier_model_never_switches():
    price = _price("claude-opus-4-5")
    usage = {"input_tokens": 150_000, "output_tokens": 10}

    assert price.cost_usd(usage, prompt_cache="5m", batch=True) == pytest.approx(
        (150_000 * 5.0 + 10 * 25.0) / 1e6 * 0.5
    )


def test_a_malformed_price_is_refused_naming_the_variable():
    with pytest.raises(ValueError, match=r"MODEL_RATES must be JSON"):
        request_cost().StepPrice.from_json(json.dumps({"input": 1}))
