"""Which function is running on this thread: the identity an AWS call is made with.

Lambda runs each function with its own execution role; locally every function shares one
process, so the engine marks the thread for the duration of a handler call
(:func:`acting_as`), and :mod:`.iam` evaluates a call against the role of the function
marked on the calling thread.

A thread a handler starts (a ``ThreadPoolExecutor`` of parallel PutEvents, for example)
inherits its creator's mark while :func:`inherit_in_new_threads` is open, as the calls it
makes are the function's calls. Calls on an unmarked thread (the engine itself creating
resources, uploading a file, reading results) are the operator's, and are not evaluated.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_state = threading.local()
_INHERITED = "_local_engine_identity"


def current() -> str | None:
    """The logical id of the function running on this thread, else None."""
    marked = getattr(_state, "function", _INHERITED)
    if marked is not _INHERITED:
        return marked
    return getattr(threading.current_thread(), _INHERITED, None)


@contextmanager
def acting_as(function: str | None) -> Iterator[None]:
    """Mark this thread as running ``function`` (None: the engine itself) until exit."""
    previous = getattr(_state, "function", _INHERITED)
    _state.function = function
    try:
        yield
    finally:
        if previous is _INHERITED:
            del _state.function
        else:
            _state.function = previous


@contextmanager
def inherit_in_new_threads() -> Iterator[None]:
    """While open, a new ``threading.Thread`` carries its creator's :func:`current`."""
    original = threading.Thread.__init__

    def init(self: threading.Thread, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        setattr(self, _INHERITED, current())

    threading.Thread.__init__ = init  # type: ignore[method-assign]
    try:
        yield
    finally:
        threading.Thread.__init__ = original  # type: ignore[method-assign]
