"""The lab's hook points: every AWS call of the step's session, and every model request.

Each botocore call of the step's session (DynamoDB, SQS, EventBridge classic and v2) passes
three hooks: ``before-parameter-build`` keeps its parameters, ``before-call`` lets the lab
kill or fail it, then answer it itself (SQS's size rule, a refusing DLQ, the result bus),
and ``after-call`` lets the lab note what it did, then kill or fail. One handler per event,
at the generic event name, so the lab decides in one place and in one order (a more specific
handler would run first, and could answer before the lab's kill point).

Every model request passes the HTTP transport: a hook point before it is sent, the send's
tag, a hook point after it was answered, and the send marked ``answered`` once the runtime
read its whole body (a client that gave up first, at its deadline, cannot know what the
answer was). When the deadline runs on the lab's clock (``LabWorld.deadlines_on_the_clock``),
a ``slow`` answer reaches the runtime in :data:`~.model_api.SLOW_PIECES` pieces, the clock
moved :data:`~.model_api.SLOW_PIECE_SECONDS` before each after the first, and the request's
socket waits up to :data:`~.harness.REAL_TIMEOUT_SECONDS` of real time (the runtime's own
timeout is the deadline, which is lab time).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx2

from .harness import REAL_TIMEOUT_SECONDS, LabWorld, MovableClock
from .lab import AWS_SERVICES
from .model_api import SLOW_PIECE_SECONDS, SLOW_PIECES
from .observed import Send

_PARAMS = "fault-lab.params"
#: A model request's socket timeouts when its deadline runs on the lab's clock.
_REAL_TIMEOUTS = dict.fromkeys(("connect", "read", "write", "pool"), REAL_TIMEOUT_SECONDS)


class _Answered(httpx2.SyncByteStream):
    """An answer's body that marks its send ``answered`` when read to the end; a ``slow``
    one paced on ``clock`` (None: as the fake sent it)."""

    def __init__(self, inner: Any, send: Send, clock: MovableClock | None) -> None:
        self._inner = inner
        self._send = send
        self._clock = clock

    def __iter__(self) -> Iterator[bytes]:
        if self._clock is not None and self._send.behaviour == "slow":
            yield from _paced(b"".join(self._inner), self._clock)
        else:
            yield from self._inner
        self._send.answered = True

    def close(self) -> None:
        self._inner.close()


def _paced(body: bytes, clock: MovableClock) -> Iterator[bytes]:
    """``body`` in :data:`SLOW_PIECES` pieces, ``clock`` moved :data:`SLOW_PIECE_SECONDS`
    before each after the first: however the bytes came off the socket, the runtime's check
    of its deadline on every piece sees the same times."""
    size = -(-len(body) // SLOW_PIECES)
    for start in range(0, len(body), size):
        if start:
            clock.advance(SLOW_PIECE_SECONDS)
        yield body[start : start + size]


@contextlib.contextmanager
def installed_hooks(world: LabWorld) -> Iterator[None]:
    """Route every AWS call of ``world.step_session`` and every HTTP request to the lab of
    the schedule running now (``world.lab``)."""

    def service(model: Any) -> str | None:
        name = model.service_model.service_name
        return name if name in AWS_SERVICES else None

    def keep(params: Any, model: Any, context: dict[str, Any], **_: Any) -> None:
        if service(model):
            context[_PARAMS] = dict(params)

    def before(model: Any, context: dict[str, Any], **_: Any) -> Any:
        lab = world.lab
        if lab is None or not service(model):
            return None
        return lab.before_call(model.name, context.get(_PARAMS) or {})

    def after(model: Any, context: dict[str, Any], parsed: Any, http_response: Any, **_: Any):
        lab = world.lab
        if lab is None or not service(model):
            return
        status = int(getattr(http_response, "status_code", 200) or 200)
        lab.after_call(model.name, context.get(_PARAMS) or {}, parsed or {}, status)

    real = httpx2.HTTPTransport.handle_request

    def handle_request(transport: httpx2.HTTPTransport, request: httpx2.Request) -> Any:
        lab = world.lab
        send = None
        if lab is not None:
            lab.model_point("before")
            send = lab.on_send(request.headers)
        if world.deadlines_on_the_clock:
            request.extensions["timeout"] = _REAL_TIMEOUTS
        response = real(transport, request)
        if send is not None:
            paced = world.clock if world.deadlines_on_the_clock else None
            response.stream = _Answered(response.stream, send, paced)
        if lab is not None:
            lab.model_point("after")
        return response

    events = world.step_session.events
    hooks = [("before-parameter-build", keep), ("before-call", before), ("after-call", after)]
    for name, hook in hooks:
        events.register(name, hook)
    httpx2.HTTPTransport.handle_request = handle_request  # type: ignore[method-assign]
    try:
        yield
    finally:
        httpx2.HTTPTransport.handle_request = real  # type: ignore[method-assign]
        for name, hook in hooks:
            events.unregister(name, hook)
