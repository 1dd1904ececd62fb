"""Hooks on every botocore call made while the engine runs.

The parts of the engine that answer or check a handler's AWS calls (``iam``, ``sqs_queues``,
``event_bus_v2``) see each call twice: ``before-parameter-build`` keeps the caller's
parameters in the request context under the part's own key, and ``before-call`` decides
(check, answer, or let it through). Handlers create their clients whenever they like, so
the hooks go on botocore's built-in handlers (every session created while open), on
boto3's default session and on any session created before.

botocore copies a session's handlers into each client it creates, so a hook registered after a
client exists never sees that client's calls. :class:`HookSlot` is registered once, before
any client exists; hooks added to it later (a test's faults, opened after the engine started
its schedule) see every call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import boto3
import botocore.handlers


@contextmanager
def before_call_hooks(
    params_key: str, before_call: Callable[..., Any], *sessions: boto3.session.Session
) -> Iterator[None]:
    """Register ``before_call`` (and the parameter keeper for ``params_key``) while open."""

    def remember(params: Mapping[str, Any], context: dict[str, Any], **_: Any) -> None:
        context[params_key] = dict(params)

    # Unqualified event names: botocore calls more specific handlers first, so every part
    # sees every call, in registration order (iam's decision before the others act).
    hooks = [("before-parameter-build", remember), ("before-call", before_call)]
    botocore.handlers.BUILTIN_HANDLERS.extend(hooks)
    existing = [s for s in (boto3.DEFAULT_SESSION, *sessions) if s is not None]
    for session in existing:
        for event_name, hook in hooks:
            session.events.register(event_name, hook)
    try:
        yield
    finally:
        for entry in hooks:
            botocore.handlers.BUILTIN_HANDLERS.remove(entry)
        for session in existing:
            for event_name, hook in hooks:
                session.events.unregister(event_name, hook)


_SLOT_PARAMS_KEY = "local_engine.hook_slot.params"


class HookSlot:
    """A place for ``before-call`` hooks added while clients already exist (see the module)."""

    def __init__(self) -> None:
        self._hooks: list[tuple[str, Callable[..., Any]]] = []
        self._lock = threading.Lock()

    def installed(self, *sessions: boto3.session.Session) -> Any:
        """Register the slot (as :func:`before_call_hooks`) while open."""
        return before_call_hooks(_SLOT_PARAMS_KEY, self._before_call, *sessions)

    @contextmanager
    def added(self, params_key: str, before_call: Callable[..., Any]) -> Iterator[None]:
        """Call ``before_call`` on every call while open, after the hooks registered before
        the slot; the call's parameters are in its context under ``params_key``."""
        entry = (params_key, before_call)
        with self._lock:
            self._hooks.append(entry)
        try:
            yield
        finally:
            with self._lock:
                self._hooks.remove(entry)

    def _before_call(self, context: dict[str, Any], **kwargs: Any) -> Any:
        with self._lock:
            hooks = list(self._hooks)
        for params_key, hook in hooks:
            context[params_key] = context.get(_SLOT_PARAMS_KEY) or {}
            response = hook(context=context, **kwargs)
            if response is not None:
                return response
        return None
