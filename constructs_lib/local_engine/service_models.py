"""One botocore data loader for every session a local run makes.

Each botocore session makes its own data loader, and each loader reads and parses the JSON
service models its clients need (DynamoDB's, SQS's, the endpoints, ...) again. A local run
makes a session for its resources, and the handlers make their own in each execution
environment, so every run parsed the same files again: about 230 of the 360 ms a run's
``local_aws`` took. The files are the installed botocore's and boto3's, read-only; one loader
per data path serves every session made while a run is open, as one session's loader serves
all of its clients.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from botocore.loaders import Loader

_LOADERS: dict[str | None, Loader] = {}
_LOCK = threading.Lock()


class _PathsOnce(list[str]):
    """A loader's search paths, each kept once: boto3 appends its data directory to the
    loader of every ``boto3.session.Session`` it makes, and this loader serves them all."""

    def __init__(self, paths: Iterable[str] = ()) -> None:
        super().__init__()
        self.extend(paths)

    def append(self, path: str) -> None:
        if path not in self:
            super().append(path)

    def extend(self, paths: Iterable[str]) -> None:
        for path in paths:
            self.append(path)


def shared_loader(search_path_string: str | None = None) -> Loader:
    """The process's loader for ``search_path_string`` (``AWS_DATA_PATH``), made as
    ``botocore.loaders.create_loader`` makes one at its first use."""
    with _LOCK:
        loader = _LOADERS.get(search_path_string)
        if loader is None:
            paths = (
                []
                if search_path_string is None
                else [
                    os.path.expanduser(os.path.expandvars(path))
                    for path in search_path_string.split(os.pathsep)
                ]
            )
            loader = Loader(extra_search_paths=_PathsOnce(paths))
            _LOADERS[search_path_string] = loader
        return loader


@contextmanager
def shared_service_models() -> Iterator[None]:
    """While open, every botocore session made in the process gets :func:`shared_loader`'s
    loader."""
    import botocore.session

    original = botocore.session.create_loader
    botocore.session.create_loader = shared_loader
    try:
        yield
    finally:
        botocore.session.create_loader = original
