"""The fault lab reads the step's real settings from the synthesized Prospect Uploader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

TEMPLATE = Path(__file__).resolve().parents[2] / "cdk.out" / "ProspectUploader.template.json"


@pytest.fixture(scope="module")
def cdk_out_template() -> dict:
    if not TEMPLATE.is_file():
        pytest.skip("cdk.out/ProspectUploader.template.json is missing: `make test` synthesizes it")
    template: dict = json.loads(TEMPLATE.read_text())
    return template
