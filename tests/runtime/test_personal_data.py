"""Personal data for construct users (issue 34): a step keyed on ``email`` with a free-text
``parse_answer``, under generated faults, leaves no row value where it must not be.

Each generated schedule sends rows whose every value carries a marker (the email, the other
fields, the notes, the model's answer, which quotes the email, and the parser's text, which
quotes it too) through the real runtime (Powertools, the Anthropic SDK over HTTP to the fake
API, moto), under provider errors whose own text quotes the row (400, 401, 404, 500, 529),
dropped connections, parsers that raise with the answer in their message, rows without the
key, and duplicates. Every row is delivered until it has a terminal result, as Lambda retries.

Then the marker is looked for in:

- every log line: what the step's logger and every other logger emitted (each record with
  all its extras: what Powertools prints as a JSON line), what was printed (EMF metrics),
  and every exception a delivery raised, formatted with its whole chain (Lambda logs the
  message, an on-failure record carries it, a ``logger.exception`` would print the chain);
- every result event on the bus (the step's defaults: ids, not data);
- every dead-letter message: its attributes, and its body but for the ``detail`` the
  producer sent, which a DLQ keeps as it came so an operator can redrive it (that ``detail``
  must be exactly the input, nothing added);
- every stored reason: each ``error_message`` of every item of the idempotency table.

0 found, per schedule; and per key, one terminal result, at most ``MAX_ATTEMPTS`` billed
requests, and a dead letter for every dead-lettered key. The totals of what was scanned are
printed (``-s``) for the issue's closing note.
"""

from __future__ import annotations

import contextlib
import io
import json
import traceback
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model_step.errors import InvalidAnswerError, RetryableAnswerError

from tests.fakes import Reply

from .conftest import FakeLambdaContext, boto3_session, log_records, make_event
from .test_result_events import ResultBus

MARK = "qzpd"
API_FAULTS = ("ok", "400", "401", "404", "500", "529", "disconnect")
PARSERS = ("ok", "value_error", "invalid", "retryable")
#: Deliveries of one row before the test gives up on it reaching a terminal result.
MAX_DELIVERIES = 12
TOTALS: Counter[str] = Counter()


@dataclass(frozen=True)
class RowPlan:
    """One row of a schedule: its marker, what the API answers, how the parser behaves."""

    tag: str
    answers: tuple[str, ...]
    parser: str
    keyless: bool
    duplicates: int

    @property
    def email(self) -> str:
        return f"{self.tag}.doe@acme.example"

    def detail(self) -> dict[str, Any]:
        detail = {
            "email": self.email,
            "first_name": f"{self.tag}first",
            "company": f"{self.tag} Anvils",
            "notes": f"Call {self.tag} about the {self.email} account",
        }
        if self.keyless:
            del detail["email"]
        return detail


def _quoting_reply(fault: str, plan: RowPlan) -> Any:
    """What the fake API answers: a provider error whose message quotes the row, as a real
    provider's validation message can, or an answer that repeats the email."""
    if fault == "ok":
        return Reply(text=f"Sure: {plan.email} is {plan.tag} at Acme Anvils")
    if fault == "disconnect":
        return "disconnect"
    status = int(fault)
    body = {
        "type": "error",
        "error": {
            "type": "overloaded_error" if status == 529 else "invalid_request_error",
            "message": f"messages.0.content: could not process '{plan.email}' ({plan.tag})",
        },
    }
    return Reply(status=status, body=body)


def _parse(plan: RowPlan, answer: str) -> Any:
    """The row's ``parse_answer``: free text that quotes the row, or an exception that
    quotes the answer."""
    if plan.parser == "value_error":
        raise ValueError(f"no JSON in {answer!r}")
    if plan.parser == "invalid":
        raise InvalidAnswerError(f"unusable answer: {answer}")
    if plan.parser == "retryable":
        raise RetryableAnswerError(f"try again, {answer}")
    return {"summary": f"{plan.tag} runs procurement at Acme Anvils ({plan.email})"}


tags = st.text(alphabet="bcdfghjklmnpstvwxz", min_size=6, max_size=10).map(lambda t: MARK + t)
row_plans = st.builds(
    RowPlan,
    tag=tags,
    answers=st.lists(st.sampled_from(API_FAULTS), max_size=6).map(tuple),
    parser=st.sampled_from(PARSERS),
    keyless=st.sampled_from((False, False, False, True)),
    duplicates=st.integers(min_value=0, max_value=2),
)
schedules = st.lists(row_plans, min_size=1, max_size=4, unique_by=lambda plan: plan.tag)


@pytest.fixture
def result_bus_for_email(model_env, monkeypatch) -> ResultBus:
    """A classic result bus with the step's default result fields (none set)."""
    bus = ResultBus()
    monkeypatch.setenv("RESULT_BUS_ARN", bus.arn)
    monkeypatch.setenv("RESULT_EVENT_SOURCE", "Stack/Classify")
    return bus


@pytest.fixture
def email_env(model_env, result_bus_for_email, monkeypatch):
    """The conftest's step environment keyed on ``email``, with no label list (answers are
    free text, as the issue's team has them)."""
    monkeypatch.setenv("IDEMPOTENCY_KEY", "email")
    monkeypatch.setenv("MODEL_TIMEOUT_SECONDS", "2")
    monkeypatch.delenv("ALLOWED_LABELS", raising=False)
    return model_env


class Schedules:
    """Runs generated schedules and checks each: the scans and the per-key invariants."""

    def __init__(self, aws: Any, bus: ResultBus, api: Any, make_step: Any, logs: Any):
        self.aws, self.bus, self.api = aws, bus, api
        self.logs = logs
        #: What the deliveries print (EMF metrics), redirected here while they run.
        self.printed = io.StringIO()
        self._served: list[str] = []
        self._pending: list[str] = []
        self._plan: RowPlan | None = None
        #: Ids of the table items an earlier schedule scanned: each reason is counted once.
        self.seen_items: set[str] = set()
        api.script = self._answer
        # One step (one warm container) for every schedule; the parser is the row's.
        self.step = make_step(parse_answer=lambda answer: _parse(self._current(), answer))
        # Its logger is made before any output is redirected: Powertools binds its handler to
        # the sys.stdout of that moment, which must outlive this test.
        self.step.logger.debug("personal-data schedules start")

    def _current(self) -> RowPlan:
        assert self._plan is not None
        return self._plan

    def _answer(self, _index: int, _body: dict[str, Any]) -> Any:
        fault = self._pending.pop(0) if self._pending else "ok"
        self._served.append(fault)
        return _quoting_reply(fault, self._current())

    def run(self, plans: list[RowPlan]) -> None:
        # Keys new to the table: Hypothesis may draw (and, shrinking, replays) a tag again,
        # whose key would replay a stored result from an earlier schedule.
        TOTALS["schedules"] += 1
        plans = [replace(plan, tag=f"{plan.tag}n{TOTALS['schedules']}") for plan in plans]
        self._reset()
        raised: list[str] = []
        with contextlib.redirect_stdout(self.printed), contextlib.redirect_stderr(self.printed):
            results = {plan.tag: self._deliver(plan, raised) for plan in plans}
        TOTALS["rows"] += len(plans)
        self._check_keys(plans, results)
        self._scan(plans, raised)

    def _reset(self) -> None:
        self.logs.seek(0)
        self.logs.truncate()
        self.printed.seek(0)
        self.printed.truncate()
        self.bus.received()
        self.aws.dead_letters()

    def _deliver(self, plan: RowPlan, raised: list[str]) -> dict[str, Any]:
        """Deliver the row until it has a terminal result (each raise is Lambda's retry),
        then its duplicates; returns the result."""
        self._plan, self._pending, self._served = plan, list(plan.answers), []
        step = self.step
        result: dict[str, Any] | None = None
        for _ in range(MAX_DELIVERIES):
            TOTALS["deliveries"] += 1
            try:
                result = step.handle(make_event(plan.detail()), FakeLambdaContext())
                break
            except Exception as exc:  # a transient failure: Lambda retries the event
                raised.append("".join(traceback.format_exception(exc)))
        assert result is not None, f"{plan}: no terminal result in {MAX_DELIVERIES} deliveries"
        for _ in range(plan.duplicates):
            again = step.handle(make_event(plan.detail()), FakeLambdaContext())
            assert again["status"] == result["status"]
        billed = [fault for fault in self._served if fault not in ("401", "529")]
        assert len(billed) <= 3, f"{plan}: {len(billed)} billed requests"
        return dict(result)

    def _check_keys(self, plans: list[RowPlan], results: dict[str, dict[str, Any]]) -> None:
        dead = {r["dead_letter_id"] for r in results.values() if r["status"] == "dead_lettered"}
        self.dead_letters = self.aws.dead_letters()
        sent = {message["attributes"]["DEAD_LETTER_ID"] for message in self.dead_letters}
        assert dead <= sent, "a dead-lettered key has no dead letter"
        for plan in plans:
            result = results[plan.tag]
            assert result["status"] in ("completed", "dead_lettered")
            if plan.keyless:
                assert result["error_code"] == "MissingIdempotencyKey"

    def _scan(self, plans: list[RowPlan], raised: list[str]) -> None:
        lines = [
            *(json.dumps(record, default=str) for record in log_records(self.logs)),
            *self.printed.getvalue().splitlines(),
            *raised,
        ]
        events = self.bus.received()
        details = {json.dumps(plan.detail(), sort_keys=True) for plan in plans}
        letters = []
        for message in self.dead_letters:
            body = dict(message["body"])
            # The producer's detail, kept as it came for a redrive: nothing added to it.
            assert json.dumps(body.pop("detail"), sort_keys=True) in details
            letters.append(json.dumps({"body": body, "attributes": message["attributes"]}))
        reasons = _stored_reasons(self.seen_items)
        for name, texts in (
            ("log lines", lines),
            ("events", [json.dumps(event) for event in events]),
            ("dead letters", letters),
            ("stored reasons", reasons),
        ):
            found = [text for text in texts if MARK in text.lower()]
            assert found == [], f"a row value in {name}: {found[:3]}"
            TOTALS[name] += len(texts)
        TOTALS["raised"] += len(raised)


def _stored_reasons(seen: set[str]) -> list[str]:
    """Every ``error_message`` stored in the idempotency table (results and hand-offs) by
    items not in ``seen``, which this adds them to. The scan asks for the items whose data
    holds one, every page of them: the table keeps every schedule's items, and reading them
    all after each schedule made the module's cost grow with the square of its schedules."""
    reasons: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for name, inner in value.items():
                if name == "error_message" and isinstance(inner, str):
                    reasons.append(inner)
                walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)

    pages = (
        boto3_session()
        .client("dynamodb")
        .get_paginator("scan")
        .paginate(
            TableName="idempotency",
            FilterExpression="contains(#data, :name)",
            ExpressionAttributeNames={"#data": "data"},
            ExpressionAttributeValues={":name": {"S": '"error_message"'}},
        )
    )
    for item in (item for page in pages for item in page["Items"]):
        if item["id"]["S"] in seen:
            continue
        seen.add(item["id"]["S"])
        data = item.get("data", {}).get("S")
        if data:
            walk(json.loads(data))
    return reasons


def test_no_row_value_reaches_a_log_an_event_a_dead_letter_or_a_stored_reason(
    email_env, result_bus_for_email, fake_api, make_step, log_capture
):
    schedules_run = Schedules(email_env, result_bus_for_email, fake_api, make_step, log_capture)

    @settings(
        max_examples=30,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(plans=schedules)
    def one_schedule(plans: list[RowPlan]) -> None:
        schedules_run.run(plans)

    one_schedule()
    print(f"\npersonal-data scan (issue 34): {dict(TOTALS)}; row values found: 0")
    assert TOTALS["rows"] and TOTALS["dead letters"] and TOTALS["events"]
    assert TOTALS["stored reasons"] and TOTALS["raised"]


# -- hand-picked: each reason text, and the exception a delivery raises ------------------------
JANE = "jane.doe@acme.example"
QUOTING_400 = Reply(
    status=400,
    body={
        "type": "error",
        "error": {"type": "invalid_request_error", "message": f"bad content near '{JANE}'"},
    },
)
QUOTING_500 = Reply(
    status=500,
    body={"type": "error", "error": {"type": "api_error", "message": f"failed on {JANE}"}},
)


def test_a_refused_request_is_stored_and_dead_lettered_with_type_status_and_request_id(
    make_step, fake_api, model_env, monkeypatch
):
    # GIVEN a step keyed on email, and a 400 whose message quotes the email
    monkeypatch.setenv("IDEMPOTENCY_KEY", "email")
    fake_api.script = [QUOTING_400]
    # WHEN the row is delivered
    result = make_step().handle(make_event({"email": JANE}), FakeLambdaContext())
    # THEN the reason names the error, never the provider's text
    request_id = fake_api.requests[0].request_id
    expected = (
        "model API refused the request: BadRequestError, status 400, "
        f"type invalid_request_error, request id {request_id}"
    )
    assert result["error_message"] == expected
    [message] = model_env.dead_letters()
    assert message["attributes"]["ERROR_MESSAGE"] == expected
    assert JANE not in json.dumps(message["attributes"])


def test_a_transient_error_leaves_the_handler_without_the_provider_text(
    make_step, fake_api, model_env, monkeypatch
):
    import anthropic

    monkeypatch.setenv("IDEMPOTENCY_KEY", "email")
    fake_api.script = [QUOTING_500] * 3
    step = make_step()
    raised = []
    for _ in range(2):
        with pytest.raises(anthropic.InternalServerError) as caught:
            step.handle(make_event({"email": JANE}), FakeLambdaContext())
        raised.append("".join(traceback.format_exception(caught.value)))
    # What Lambda would log and put in an on-failure record: the type, status and request id.
    assert all(JANE not in text for text in raised)
    assert "InternalServerError, status 500, type api_error, request id req_" in raised[0]
    # The retry decision is unchanged: the class and status stay; the third attempt is the
    # budget's last, and its failure is stored.
    result = step.handle(make_event({"email": JANE}), FakeLambdaContext())
    assert result["error_code"] == "InternalServerError"
    assert result["error_message"].startswith(
        "transient failure on attempt 3 of 3: InternalServerError, status 500, "
        "type api_error, request id req_"
    )
    assert JANE not in result["error_message"]


def test_a_missing_key_part_is_named_by_position_not_by_the_other_parts(
    make_step, fake_api, model_env, monkeypatch
):
    monkeypatch.setenv("IDEMPOTENCY_KEY", "[account_id, email]")
    result = make_step().handle(make_event({"email": JANE}), FakeLambdaContext())
    assert result["error_code"] == "MissingIdempotencyKey"
    assert result["error_message"] == (
        "business key '[account_id, email]' has a missing or empty part: part 1 of 2"
    )
    assert fake_api.request_count == 0


def test_a_bad_replay_generation_is_named_by_its_type(make_step, fake_api, model_env, monkeypatch):
    monkeypatch.setenv("IDEMPOTENCY_KEY", "email")
    event = make_event({"email": JANE, "replay_generation": JANE})
    result = make_step().handle(event, FakeLambdaContext())
    assert result["error_code"] == "InvalidReplayGeneration"
    assert result["error_message"] == "detail.replay_generation must be an integer >= 1, got a str"


def test_on_the_buffer_queue_logs_carry_the_record_id_and_codes_only(
    make_step, fake_api, buffer, monkeypatch, log_capture
):
    # GIVEN a row on the buffer queue, a 529 and a 500 that quote it, then an answer
    monkeypatch.setenv("IDEMPOTENCY_KEY", "email")
    fake_api.script = [
        Reply(
            status=529,
            body={"type": "error", "error": {"type": "overloaded_error", "message": JANE}},
        ),
        QUOTING_500,
        Reply(text=f"{JANE} is warm"),
    ]
    step = make_step()
    step.logger.debug("made before stdout is redirected: its handler keeps the real one")
    event = make_event({"email": JANE, "notes": f"ask {JANE}"})
    printed = io.StringIO()
    # WHEN it is received three times (a wait, a retry, the answer)
    with contextlib.redirect_stdout(printed):
        for _ in range(3):
            step.handle(buffer.batch(event), FakeLambdaContext())
    # THEN every log line names the key by record id, and none holds the email
    records = log_records(log_capture)
    outcomes = [r["outcome"] for r in records if "outcome" in r]
    assert outcomes == ["rate_limited", "retry", "completed"]
    assert all(r["record_id"].startswith("model-step#") for r in records if "outcome" in r)
    assert JANE not in log_capture.getvalue() + printed.getvalue()
