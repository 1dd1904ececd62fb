"""A total deadline for one model request, whatever the server's pacing.

The SDK's ``timeout`` bounds each connect and each read, not the call: an answer that arrives
in chunks 1.2 s apart never trips a 5 s read timeout, and ran 6 s against a 5 s budget. In
Lambda that invocation is killed after the request was billed, and the next receive bills
again. So the runtime gives every request a deadline (:func:`total`), and the SDK's HTTP
client is built on :class:`DeadlineTransport`, which enforces it three ways:

- no request starts once the deadline has passed;
- the SDK's per-read timeout is the time left, so waiting for the first byte ends by it;
- while the body streams, every chunk is checked against it, and a watchdog shuts the socket
  down at the deadline, so a read blocked on a slow server returns at once.

A passed deadline surfaces as ``httpx2.ReadTimeout``, which the SDK raises as
``APITimeoutError``; :func:`fired` tells the runtime it was this deadline
(code ``ModelDeadlineExceeded``).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx2

_state = threading.local()


@contextmanager
def total(seconds: float) -> Iterator[None]:
    """Requests made by this thread inside the block end within ``seconds``."""
    _state.end = time.monotonic() + seconds
    _state.fired = False
    _state.unsent = False
    try:
        yield
    finally:
        _state.end = None


def fired() -> bool:
    """Whether this thread's last deadline stopped a request."""
    return bool(getattr(_state, "fired", False))


def stopped_unsent() -> bool:
    """Whether this thread's last deadline passed before its request was sent: nothing left
    the function, so nothing was billed (a loaded machine can spend the whole deadline
    before the first byte)."""
    return bool(getattr(_state, "unsent", False))


def _end() -> float | None:
    end: float | None = getattr(_state, "end", None)
    return end


def _fire(request: httpx2.Request, what: str) -> httpx2.ReadTimeout:
    _state.fired = True
    return httpx2.ReadTimeout(f"total deadline of the model call passed {what}", request=request)


class DeadlineTransport(httpx2.BaseTransport):
    """Wraps an ``httpx2`` transport and holds each request to this thread's deadline."""

    def __init__(self, inner: httpx2.BaseTransport) -> None:
        self._inner = inner

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        end = _end()
        if end is None:
            return self._inner.handle_request(request)
        if time.monotonic() >= end:
            _state.unsent = True
            raise _fire(request, "before the request was sent")
        try:
            response = self._inner.handle_request(request)
        except httpx2.TimeoutException:
            if time.monotonic() >= end:
                raise _fire(request, "before the answer began") from None
            raise
        watchdog = _Watchdog(response, end)
        response.stream = _DeadlineStream(response.stream, end, watchdog, request)
        return response

    def close(self) -> None:
        self._inner.close()


class _Watchdog:
    """Shuts the response's socket down at the deadline, unless cancelled first."""

    def __init__(self, response: httpx2.Response, end: float) -> None:
        stream = response.extensions.get("network_stream")
        self._socket: socket.socket | None = (
            stream.get_extra_info("socket") if stream is not None else None
        )
        self._lock = threading.Lock()
        self._done = False
        self._timer = threading.Timer(max(0.0, end - time.monotonic()), self._interrupt)
        self._timer.daemon = True
        self._timer.start()

    def _interrupt(self) -> None:
        with self._lock:
            if self._done or self._socket is None:
                return
            self._done = True
            try:
                self._socket.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cancel(self) -> None:
        with self._lock:
            self._done = True
        self._timer.cancel()


class _DeadlineStream(httpx2.SyncByteStream):
    def __init__(
        self, inner: Any, end: float, watchdog: _Watchdog, request: httpx2.Request
    ) -> None:
        self._inner = inner
        self._end = end
        self._watchdog = watchdog
        self._request = request

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self._inner:
                if time.monotonic() >= self._end:
                    raise _fire(self._request, "while the answer was streaming")
                yield chunk
        except httpx2.ReadTimeout:
            raise
        except httpx2.TransportError:
            if time.monotonic() >= self._end:
                raise _fire(self._request, "while the answer was streaming") from None
            raise
        finally:
            self._watchdog.cancel()

    def close(self) -> None:
        self._watchdog.cancel()
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()
