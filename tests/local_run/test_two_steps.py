"""Two steps that chain without code: docs/construct.md's example, run end to end.

``Classify`` labels each prospect row hot, warm or cold and publishes its results on the bus;
``Outreach`` subscribes to the "hot" completions with ``classify.result_event_pattern(...)``,
keyed on the same business key (the result event's ``key``), and writes a one-line note.
The real construct is synthesized; the local engine runs the template's handlers (the real
runtime, Powertools and the Anthropic SDK) against moto and the local model. Every row is
published twice and every event delivered twice: still one model request per key per step.
"""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_events as events
from aws_cdk import aws_secretsmanager as secretsmanager

from constructs_lib import EventBusV2, IdempotentModelStep
from constructs_lib._paths import lambda_src_root
from constructs_lib.local_engine.assembly import load_assembly
from constructs_lib.local_engine.engine import EngineSettings, LocalEngine
from constructs_lib.local_engine.local_model import LocalMessagesAPI
from tests.adoption.markdown import code_blocks, section

from .billing import assert_billed, late_attempts
from .conftest import local_run_app

ROWS = 12
LABELS = ["hot", "warm", "cold"]


def two_steps_class() -> type[cdk.Stack]:
    """The ``TwoSteps`` stack of docs/construct.md, executed from the page as it is."""
    [block] = code_blocks(section("docs/construct.md", "Compose steps: result events"), "python")
    namespace: dict = {}
    exec(compile(block, "docs/construct.md", "exec"), namespace)
    return namespace["TwoSteps"]


@pytest.fixture(scope="module")
def cdk_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    outdir = tmp_path_factory.mktemp("two-steps")
    app = local_run_app(outdir)
    two_steps_class()(app, "TwoSteps")
    app.synth()
    return outdir


def row_event(row_number: int) -> dict:
    detail = {"upload_id": "u-1", "row_number": row_number, "company": f"Company {row_number}"}
    return {
        "version": "0",
        "id": f"row-{row_number}",
        "detail-type": "Prospect Row Validated",
        "source": "prospect-uploader",
        "account": "123456789012",
        "time": "2026-12-01T00:00:00Z",
        "region": "us-east-1",
        "resources": [],
        "detail": detail,
    }


def _settings(model: LocalMessagesAPI) -> EngineSettings:
    """Every event delivered twice, both steps' model calls on the local model."""
    return EngineSettings(
        duplicates=2,
        environment={
            "ANTHROPIC_API_KEY": "sk-ant-local-two-steps",
            "ANTHROPIC_BASE_URL": model.base_url,
        },
    )


def test_hot_prospects_get_one_outreach_note_each_with_one_request_per_key_per_step(cdk_out):
    assembly = load_assembly(cdk_out, "TwoSteps")
    with LocalMessagesAPI(labels=LABELS) as model:
        with LocalEngine(assembly, _settings(model), code_root=lambda_src_root()) as engine:
            bus = engine.aws.ref(_bus_logical_id(engine))
            # GIVEN every row published twice (a producer's retry)
            for row_number in range(1, ROWS + 1):
                for _ in range(2):
                    engine.router.put(bus, row_event(row_number))
            # WHEN the run settles
            engine.wait_until_settled()
            published = dict(engine.router.published)
            denials = list(engine.iam.denials)
            most_billed = engine.model_requests.max_billed_per_key
            late = late_attempts(engine)

        # THEN each row was classified with one request, each hot one got one note (plus
        # a retry of each request a loaded machine timed out after the model counted it)
        requests = model.requests_by_content()
    hot = published.get("Model Step Completed", 0) - ROWS
    assert 1 <= hot < ROWS
    assert len(requests) == ROWS + hot
    assert_billed(sum(requests.values()), ROWS + hot, late, "requests")
    assert_billed(model.request_count, ROWS + hot, late, "model requests")
    # every result published once per key per step (ROWS from Classify, hot from Outreach)
    assert published["Model Step Completed"] == ROWS + hot
    assert "Model Step Dead Lettered" not in published
    # the engine counts billed requests by business key, which both steps share: a hot key
    # got one request from each step, never more
    assert_billed(most_billed, 2, late, "most billed per key")
    assert denials == []


def _bus_logical_id(engine: LocalEngine) -> str:
    [spec] = engine.assembly.of_type("AWS::Events::EventBus")
    return spec.logical_id


class TwoStepsOnV2(cdk.Stack):
    """The same two steps on an EventBridge v2 bus: results carry a DeduplicationId."""

    def __init__(self, scope: cdk.App, id: str) -> None:
        super().__init__(scope, id)
        bus = EventBusV2(self, "Bus")
        key = secretsmanager.Secret(self, "ApiKey")
        common = {"event_bus": bus, "result_bus": bus, "api_key_secret": key}
        classify = IdempotentModelStep(
            self,
            "Classify",
            event_pattern=events.EventPattern(detail_type=["Prospect Row Validated"]),
            idempotency_key="[upload_id, row_number]",
            prompt_version="2026-12-01",
            system_prompt="Answer hot, warm or cold.",
            allowed_labels=LABELS,
            **common,
        )
        IdempotentModelStep(
            self,
            "Outreach",
            event_pattern=classify.result_event_pattern(detail={"result": {"label": ["hot"]}}),
            idempotency_key="key",
            prompt_version="2026-12-01",
            system_prompt="Write a one-line outreach note for this hot prospect.",
            **common,
        )


def test_on_a_v2_bus_the_steps_chain_and_every_result_is_published_once(tmp_path):
    app = local_run_app(tmp_path)
    TwoStepsOnV2(app, "TwoStepsV2")
    app.synth()
    assembly = load_assembly(tmp_path, "TwoStepsV2")
    with LocalMessagesAPI(labels=LABELS) as model:
        with LocalEngine(assembly, _settings(model), code_root=lambda_src_root()) as engine:
            [bus] = engine.buses_v2.buses.values()
            client = engine.aws.client("eventbridgev2")
            # GIVEN every row published twice, without a DeduplicationId of its own
            for row_number in range(1, ROWS + 1):
                for _ in range(2):
                    event = row_event(row_number)
                    client.put_events(
                        EventBusArn=bus.arn,
                        Entries=[
                            {
                                "Source": event["source"],
                                "DetailType": event["detail-type"],
                                "Detail": json.dumps(event["detail"]),
                            }
                        ],
                    )
            engine.wait_until_settled()
            stats = bus.stats
            denials = list(engine.iam.denials)
            late = late_attempts(engine)
        requests = model.requests_by_content()
    hot = len(requests) - ROWS
    # THEN one request per key per step, and the results were published once per key per step
    assert 1 <= hot < ROWS
    assert_billed(sum(requests.values()), ROWS + hot, late, "requests")
    assert stats.entries == 2 * ROWS + ROWS + hot  # the rows twice, then each result once
    assert stats.deduplicated == 0
    assert denials == []
