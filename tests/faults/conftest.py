"""The fault lab reads the step's real settings from the synthesized Prospect Uploader."""

from __future__ import annotations

import json

import pytest

from tests.cdk_out import built


@pytest.fixture(scope="module")
def cdk_out_template() -> dict:
    template: dict = json.loads(built("ProspectUploader.template.json").read_text())
    return template
