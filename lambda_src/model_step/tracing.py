"""Opt-in X-Ray subsegments (Powertools Tracer) around the model call and the store.

Off by default (``TRACING_ENABLED`` unset): :meth:`StepTracer.subsegment` is then a no-op
and neither Powertools' Tracer nor the X-Ray SDK is imported. On, each model call and each
idempotency-store call (``idempotency store: <operation>``) is one subsegment.

A subsegment carries its name and, on failure, an ``error_type`` annotation (the exception's
class name) with the fault flag: never the exception's text, which may quote a row or the
model's answer. The X-Ray SDK would record that text if an exception left its context
manager, so the exception is caught inside it and raised again outside. Botocore is not
patched (``auto_patch=False``): the process's other clients stay untraced.

Example::

    tracer = StepTracer(enabled=True, service="Stack/Classify")
    with tracer.subsegment("model call"):
        ...
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: Subsegment names: the model request, and each store operation after this prefix.
MODEL_CALL = "model call"
STORE_PREFIX = "idempotency store: "


class StepTracer:
    """Subsegments on the Powertools Tracer's provider, or nothing when ``enabled`` is false."""

    def __init__(self, *, enabled: bool, service: str) -> None:
        self.enabled = enabled
        self._provider: Any = None
        if enabled:
            from aws_lambda_powertools import Tracer

            self._provider = Tracer(service=service, auto_patch=False).provider

    @contextmanager
    def subsegment(self, name: str) -> Iterator[None]:
        """Run the block in a subsegment ``name`` (a no-op when tracing is off)."""
        if self._provider is None:
            yield
            return
        failure: BaseException | None = None
        with self._provider.in_subsegment(name=name) as subsegment:
            try:
                yield
            except BaseException as exc:  # re-raised below, outside the SDK's manager
                failure = exc
                if subsegment is not None:
                    subsegment.put_annotation("error_type", type(exc).__name__)
                    subsegment.add_fault_flag()
        if failure is not None:
            raise failure


#: The tracer of a step whose tracing is off.
NO_TRACING = StepTracer(enabled=False, service="")
