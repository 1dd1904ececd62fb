"""The fields of a request that fit it to its model: ``thinking`` and ``output_config``.

``THINKING`` becomes ``thinking: {"type": "adaptive" | "disabled"}`` and ``EFFORT`` becomes
``output_config: {"effort": ...}``, the Messages API's shapes (the same body reaches Bedrock's
InvokeModel). Unset, neither is sent and the model does what it does by default: Claude Haiku
5.5 thinks (adaptive, effort ``medium``), and its thinking tokens count toward ``max_tokens``.
The construct checks both against the model catalogue at synth, with ``max_tokens``.

Both join the record key's fingerprint when set (:func:`.model_call.request_fingerprint`):
they change the answer, as ``max_tokens`` does. Unset, they add nothing to it, so a step
deployed before they existed keeps its keys.
"""

from __future__ import annotations

from typing import Any

from .config import Settings


def model_fields(settings: Settings) -> dict[str, Any]:
    """The ``thinking`` and ``output_config`` keyword arguments of ``messages.create`` (and
    params of a Message Batch request): only those the step sets."""
    fields: dict[str, Any] = {}
    if settings.thinking is not None:
        fields["thinking"] = {"type": settings.thinking}
    if settings.effort is not None:
        fields["output_config"] = {"effort": settings.effort}
    return fields


def fingerprint_fields(settings: Settings) -> dict[str, str]:
    """What of the two joins the request fingerprint: the ones the step sets."""
    found = {"thinking": settings.thinking, "effort": settings.effort}
    return {name: value for name, value in found.items() if value is not None}
