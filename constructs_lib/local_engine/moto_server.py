"""moto as an HTTP server on 127.0.0.1, for code that runs in other processes (a CDK CLI, a
child Python), with a clean state.

moto's backends are global to the process, whether ``mock_aws`` or a server serves them. A
server started in a process that used moto before (another bench, an earlier test on the
same pytest worker) would otherwise serve that run's tables and queues. So the state is
reset on entry and on exit, through moto's own reset endpoint. The port is the one the
server bound itself (port 0), so no other process can take it in between.
"""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["moto_server"]


def _reset(url: str) -> None:
    request = urllib.request.Request(f"{url}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=10):
        pass


@contextmanager
def moto_server(*, quiet: bool = True) -> Iterator[str]:
    """Run moto's ``ThreadedMotoServer`` on 127.0.0.1; yields its endpoint URL
    (``http://127.0.0.1:<port>``, for ``AWS_ENDPOINT_URL``).

    :param quiet: default True: werkzeug's per-request log lines are silenced.
    """
    from moto.server import ThreadedMotoServer

    if quiet:
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    try:
        _reset(url)
        yield url
    finally:
        try:
            _reset(url)
        finally:
            server.stop()
