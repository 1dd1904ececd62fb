"""The EventBridge pattern matcher, operator by operator, and on the stack's own patterns."""

from __future__ import annotations

import pytest

from constructs_lib.local_engine.event_patterns import (
    EventPattern,
    PatternError,
    matches,
)


def event(**detail) -> dict:
    return {"source": "prospect-uploader", "detail-type": "T", "detail": detail}


@pytest.mark.parametrize(
    ("pattern", "detail", "expected"),
    [
        ({"status": ["rejected"]}, {"status": "rejected"}, True),
        ({"status": ["rejected"]}, {"status": "completed"}, False),
        ({"status": ["rejected", "failed"]}, {"status": "failed"}, True),
        ({"n": [5]}, {"n": 5.0}, True),  # numbers compare numerically
        ({"n": [1]}, {"n": True}, False),  # true is not 1
        ({"flag": [True]}, {"flag": True}, True),
        ({"v": [None]}, {"v": None}, True),
        ({"v": [None]}, {}, False),  # null is not "missing"
        ({"tags": ["a"]}, {"tags": ["b", "a"]}, True),  # arrays: any element
        ({"tags": ["c"]}, {"tags": ["b", "a"]}, False),
        ({"key": [{"prefix": "in/"}]}, {"key": "in/a.csv"}, True),
        ({"key": [{"prefix": "in/"}]}, {"key": "out/a.csv"}, False),
        ({"key": [{"suffix": ".csv"}]}, {"key": "a.csv"}, True),
        ({"key": [{"suffix": ".csv"}]}, {"key": "a.csv.gz"}, False),
        ({"key": [{"suffix": ".csv"}]}, {"key": 5}, False),  # strings only
        ({"key": [{"equals-ignore-case": "A.CSV"}]}, {"key": "a.csv"}, True),
        ({"key": [{"wildcard": "in/*.csv"}]}, {"key": "in/x/y.csv"}, True),
        ({"key": [{"wildcard": "in/*.csv"}]}, {"key": "out/y.csv"}, False),
        ({"n": [{"numeric": [">", 0]}]}, {"n": 3}, True),
        ({"n": [{"numeric": [">", 0]}]}, {"n": 0}, False),
        ({"n": [{"numeric": [">", 0]}]}, {"n": "3"}, False),  # numeric matches numbers only
        ({"n": [{"numeric": [">=", 1, "<", 10]}]}, {"n": 9.5}, True),
        ({"n": [{"numeric": [">=", 1, "<", 10]}]}, {"n": 10}, False),
        ({"n": [{"numeric": ["=", 2]}]}, {"n": 2}, True),
        ({"x": [{"exists": True}]}, {"x": 0}, True),
        ({"x": [{"exists": True}]}, {}, False),
        ({"x": [{"exists": False}]}, {}, True),
        ({"x": [{"exists": False}]}, {"x": "a"}, False),
        ({"s": [{"anything-but": "rejected"}]}, {"s": "completed"}, True),
        ({"s": [{"anything-but": "rejected"}]}, {"s": "rejected"}, False),
        ({"s": [{"anything-but": "rejected"}]}, {}, False),  # needs the field
        ({"s": [{"anything-but": ["a", "b"]}]}, {"s": "b"}, False),
        ({"s": [{"anything-but": {"prefix": "tmp/"}}]}, {"s": "tmp/x"}, False),
        ({"s": [{"anything-but": {"prefix": "tmp/"}}]}, {"s": "in/x"}, True),
        ({"s": [{"anything-but": {"suffix": ".tmp"}}]}, {"s": "a.csv"}, True),
        ({"n": [{"anything-but": 0}]}, {"n": 1}, True),
        ({"o": {"k": ["v"]}}, {"o": {"k": "v"}}, True),  # nested objects
        ({"o": {"k": ["v"]}}, {"o": "v"}, False),
        ({"o": {"k": [{"exists": False}]}}, {}, True),
    ],
)
def test_operators(pattern, detail, expected):
    assert matches({"detail": pattern}, event(**detail)) is expected


def test_keys_are_anded_and_lists_are_ored():
    pattern = {"source": ["prospect-uploader"], "detail-type": ["A", "T"]}
    assert matches(pattern, event())
    assert not matches({**pattern, "source": ["other"]}, event())


def test_or_matches_when_any_branch_matches():
    pattern = {"detail": {"$or": [{"invalid": [{"numeric": [">", 0]}]}, {"status": ["rejected"]}]}}
    assert matches(pattern, event(invalid=2, status="completed"))
    assert matches(pattern, event(invalid=0, status="rejected"))
    assert not matches(pattern, event(invalid=0, status="completed"))


def test_or_is_anded_with_sibling_keys():
    pattern = {"detail": {"kind": ["x"], "$or": [{"a": [1]}, {"b": [1]}]}}
    assert matches(pattern, event(kind="x", b=1))
    assert not matches(pattern, event(kind="y", b=1))


@pytest.mark.parametrize(
    "bad",
    [
        {"detail": {"k": [{"cidr": "10.0.0.0/8"}]}},
        {"detail": {"k": [{"numeric": ["!=", 1]}]}},
        {"detail": {"k": [{"prefix": "a", "suffix": "b"}]}},
        {"detail": {"k": "not-a-list"}},
        {"detail": {"k": []}},
        {"detail": {"$or": [{"a": [1]}]}},
    ],
)
def test_unsupported_shapes_fail_at_compile_time(bad):
    with pytest.raises(PatternError):
        EventPattern(bad)


def test_the_stacks_patterns_once_resolved(assembly):
    """The template's own rules, with Refs resolved, route the events the pipeline sees."""
    from constructs_lib.local_engine.intrinsics import PhysicalResource, Resolver

    physical = {
        lid: PhysicalResource(lid, spec.resource_type, f"local-{lid}", {"Arn": f"arn:{lid}"})
        for lid, spec in assembly.resources.items()
    }
    resolver = Resolver(physical, stack_name=assembly.stack_name)
    rules = {
        rule.display_name: EventPattern(resolver.resolve(dict(rule.event_pattern)))
        for rule in assembly.rules()
    }
    bucket = physical[assembly.upload_bucket().logical_id].ref
    s3_event = {
        "source": "aws.s3",
        "detail-type": "Object Created",
        "detail": {"bucket": {"name": bucket}, "object": {"key": "in/p.csv", "size": 1}},
    }
    assert rules["SplitterRule"].matches(s3_event)
    s3_event["detail"]["object"]["key"] = "in/p.txt"
    assert not rules["SplitterRule"].matches(s3_event)
    row = {"source": "prospect-uploader", "detail-type": "Prospect Row Validated", "detail": {}}
    (subscriber,) = [s for s in assembly.subscribers() if s.display_name == "Classify/Subscriber"]
    assert any(EventPattern(resolver.resolve(dict(p))).matches(row) for p in subscriber.patterns)
    # UploadAlertRule mails only rejected splitter summaries.
    summary = {
        "source": "prospect-uploader",
        "detail-type": "Prospect Upload Summarized",
        "detail": {"invalid": 3, "status": "completed"},
    }
    assert not rules["UploadAlertRule"].matches(summary)
    summary["detail"]["status"] = "rejected"
    assert rules["UploadAlertRule"].matches(summary)
    # UploadCompletedAlertRule: invalid > 0, failed > 0 or incomplete.
    completed = {
        "source": "prospect-uploader",
        "detail-type": "Prospect Upload Completed",
        "detail": {"status": "completed", "invalid": 0, "failed_total": 0},
    }
    assert not rules["UploadCompletedAlertRule"].matches(completed)
    for change in ({"invalid": 6}, {"failed_total": 1}, {"status": "incomplete"}):
        assert rules["UploadCompletedAlertRule"].matches(
            {**completed, "detail": {**completed["detail"], **change}}
        )
