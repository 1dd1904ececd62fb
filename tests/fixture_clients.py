"""The fixtures' and test helpers' own boto3 clients: one per service for the test run; and
moto started once a module, with an empty account for each test.

Building a client or a resource costs 5-10 ms of CPU (most of it copying the session's
event hooks), and the runtime and Prospect fixtures built several per test. moto's
interception is global once moto is imported, so a client made inside one test's
``mock_aws`` talks to the next test's fresh moto as a new one would. They come from a
session of their own, on which no fixture or test registers a hook: like the per-test
clients they replace, they never see a test's hooks (a call recorder, a ``killer``, a hook
on EventBridge's ``PutEvents``), which reach only what the test and the handlers make from
the test's own session.
"""

from __future__ import annotations

import functools
import io
import pickle
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import boto3

T = TypeVar("T")

REGION = "us-east-1"


@functools.cache
def _session() -> boto3.session.Session:
    return boto3.session.Session(region_name=REGION)


@functools.cache
def fixture_client(service_name: str) -> Any:
    """The fixtures' client of ``service_name``, one for the run."""
    return _session().client(service_name)


@functools.cache
def fixture_table(name: str) -> Any:
    """The fixtures' DynamoDB ``Table`` resource of ``name``, one for the run."""
    return _session().resource("dynamodb").Table(name)


@contextmanager
def unsigned_moto_requests(*sessions: boto3.session.Session) -> Iterator[None]:
    """While open, requests to moto's services go unsigned from the fixtures' session,
    ``sessions``, boto3's default session and every session created meanwhile: the local
    engine's ``unsigned_moto_requests``, which says why that hides nothing (in-process moto
    checks no signature; the handlers never sign themselves; S3 and Bedrock stay signed).
    Signing was about 5 % of the runtime's and the Prospect's test CPU.

    A session created inside the block keeps the choice after it: pass every session that
    must sign again afterwards (the runtime conftest's shared one). The fixtures' clients
    made inside it keep it too; they only ever talk to moto."""
    from constructs_lib.local_engine.local_aws import unsigned_moto_requests as unsigned

    with unsigned(_session(), *sessions):
        yield


@contextmanager
def fresh_moto_account() -> Iterator[None]:
    """An empty moto account for one test, emptied again when it ends, as starting and
    stopping ``mock_aws`` would (every backend reset, boto3's default session dropped),
    under a ``mock_aws`` started once for the module.

    Starting ``mock_aws`` registers a ``responses`` callback for every URL pattern of every
    service moto emulates (about 5 ms of CPU, a few thousand objects), and each test of the
    runtime and Prospect fixtures paid it again. Nested ``mock_aws`` blocks inside a test
    work as before (moto counts them; the outermost one resets)."""
    from moto.core.base_backend import BackendDict
    from moto.core.model_instances import reset_model_data

    def empty() -> None:
        BackendDict.reset()
        reset_model_data()
        boto3.DEFAULT_SESSION = None

    empty()
    try:
        yield
    finally:
        empty()


#: The lock types a moto backend holds (an SQS queue's, for one): a restored copy gets new ones.
_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))


class _BackendPickler(pickle.Pickler):
    """Pickles moto's backends of one account: each lock as a new lock (a copy shares no lock
    with the original), every ``BackendDict`` (a service's map, which moto looks up by
    identity) by reference."""

    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is _LOCK_TYPES[0]:
            return threading.Lock, ()
        if kind is _LOCK_TYPES[1]:
            return threading.RLock, ()
        return NotImplemented

    def persistent_id(self, obj: Any) -> Any:
        from moto.core.base_backend import BackendDict

        if isinstance(obj, BackendDict):
            return _live_backends().index(obj)
        return None


#: A ``BackendDict``'s attributes that say which service it is, not what the account holds.
_IDENTITY = frozenset({"_id", "backend", "service_name"})


def _own_state(service: Any) -> dict[str, Any]:
    """What a service's ``BackendDict`` holds beside its accounts: S3's keeps the account of
    every bucket name (``bucket_accounts``), which moto reads to find a bucket."""
    return {name: value for name, value in vars(service).items() if name not in _IDENTITY}


def _live_backends() -> list[Any]:
    from moto.core.base_backend import BackendDict

    return BackendDict._instances  # type: ignore[no-any-return]


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, backends: list[Any]) -> None:
        super().__init__(io.BytesIO(data))
        self.backends = backends

    def persistent_load(self, pid: Any) -> Any:
        return self.backends[pid]


#: (create, the fixtures' access key) -> (the services' maps, their pickled accounts, what
#: ``create`` returned).
_SNAPSHOTS: dict[tuple[Any, ...], tuple[list[Any], bytes, Any]] = {}


def restored(create: Callable[[], T]) -> T:
    """What ``create()`` returns, and the resources it makes through the fixtures' clients,
    in the empty account :func:`fresh_moto_account` just made.

    The first call runs ``create`` and keeps a pickle of every moto backend the account then
    has; later calls load that pickle into the (again empty) account instead of sending the
    requests again. A fixture's resources took 9 requests in the Prospect's (bucket, three
    tables and their TTL, bus, queue, rule and target; about 23 ms of CPU) and 4 in the
    runtime's, for every test; the load takes under half a millisecond. What a test finds is
    what ``create`` made: the same tables, queues, buckets and buses, each object a new copy
    (no test sees what another wrote), with the names, ARNs and creation times of the first
    run. ``create`` must depend on nothing but the account being empty and the fixtures'
    clients (whose region and credentials are fixed for the run); a ``create`` that raises
    keeps nothing."""
    credentials = _session().get_credentials()
    key = (create, credentials.access_key if credentials is not None else None)
    kept = _SNAPSHOTS.get(key)
    if kept is None:
        result = create()
        services = list(_live_backends())
        buffer = io.BytesIO()
        _BackendPickler(buffer, pickle.HIGHEST_PROTOCOL).dump(
            [(dict(b), _own_state(b)) for b in services]
        )
        _SNAPSHOTS[key] = (services, buffer.getvalue(), result)
        return result
    services, data, result = kept
    live = _live_backends()
    for service, (accounts, state) in zip(services, _Unpickler(data, services).load(), strict=True):
        service.update(accounts)
        vars(service).update(state)
        if not any(known is service for known in live):
            live.append(service)
    return result
