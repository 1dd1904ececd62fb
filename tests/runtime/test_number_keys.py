"""Keys canonicalise by value for every JSON number (issue 31, item 4).

GIVEN the real handler, Powertools and moto's SQS, WHEN one row's key is written as two JSON
number forms of one value, THEN the key is billed once. The buffer path reads the SQS body
itself (exact numbers); the direct path gets the event as Lambda's runtime parsed it (floats).
"""

from __future__ import annotations

import json

import pytest

from .conftest import FakeLambdaContext, make_event, prospect_detail


def _body(row_number_literal: str) -> str:
    """The SQS body of an event whose ``detail.row_number`` is written as ``literal``."""
    event = make_event(prospect_detail())
    text = json.dumps(event)
    return text.replace('"row_number": 1,', f'"row_number": {row_number_literal},', 1)


@pytest.mark.parametrize(
    ("first", "second"),
    [("1e30", "1000000000000000000000000000000"), ("9007199254740993", "9007199254740993.0")],
    ids=["1e30-vs-its-int", "2**53+1-as-int-and-float"],
)
def test_on_the_buffer_queue_two_forms_of_one_number_are_one_key(
    make_step, fake_api, buffer, first, second
):
    step = make_step()
    for literal in (first, second):
        assert step.handle(buffer.batch(_body(literal)), FakeLambdaContext()) == {
            "batchItemFailures": []
        }

    assert fake_api.request_count == 1


def test_2_to_the_53_plus_1_is_not_2_to_the_53_on_the_buffer_queue(make_step, fake_api, buffer):
    # The exact reading keeps neighbours apart: a float would make these one key.
    step = make_step()
    for literal in ("9007199254740993.0", "9007199254740992"):
        step.handle(buffer.batch(_body(literal)), FakeLambdaContext())

    assert fake_api.request_count == 2


def test_on_the_direct_path_1e30_and_its_int_are_one_key(make_step, fake_api):
    # Lambda's runtime parsed the event already: 1e30 arrives as a float.
    step = make_step()
    email = "ada@example.com"
    one = step.handle(make_event(prospect_detail(1e30, email=email)), FakeLambdaContext())
    two = step.handle(make_event(prospect_detail(10**30, email=email)), FakeLambdaContext())

    assert fake_api.request_count == 1
    assert one == two and one["key"] == ["upload-001", 10**30]


def test_on_the_direct_path_a_float_past_2_to_the_53_is_the_value_it_was_rounded_to(
    make_step, fake_api
):
    # What holds there (docs/runtime.md): the float Lambda made of 9007199254740993.0 is
    # 2**53, so it is the key 2**53. Only the buffer queue reads the body exactly.
    step = make_step()
    rounded = json.loads("9007199254740993.0")
    email = "ada@example.com"
    step.handle(make_event(prospect_detail(rounded, email=email)), FakeLambdaContext())
    step.handle(make_event(prospect_detail(2**53, email=email)), FakeLambdaContext())

    assert fake_api.request_count == 1


def test_ordinary_values_reach_the_model_as_before(make_step, fake_api, buffer):
    """The user message is the canonical detail as JSON: for ordinary values it is the same
    text whether the event came by the buffer queue (exact reading) or directly."""
    detail = prospect_detail(score=0.1, ratio=2.5, whole=3.0, big=12345678901, tags=["a", 1.5])
    step = make_step()
    step.handle(make_event(detail), FakeLambdaContext())
    direct = fake_api.last_request.body["messages"][0]["content"]
    step.handle(buffer.batch(make_event({**detail, "row_number": 2})), FakeLambdaContext())
    queued = fake_api.last_request.body["messages"][0]["content"]

    # 3.0 has read 3 since issue 15; 0.1, 2.5 and 1.5 are as written.
    expected = json.dumps({**detail, "whole": 3}, sort_keys=True, ensure_ascii=False)
    assert direct == expected
    assert queued == expected.replace('"row_number": 1,', '"row_number": 2,')
