"""SnapStart priming: do the expensive, credential-free work at init, inside the snapshot.

Under SnapStart (``AWS_LAMBDA_INITIALIZATION_TYPE == "snap-start"``) init runs once, before the
snapshot, so its cost is not paid on restore. On-demand containers keep the lazy import: a
container that only serves duplicates never pays for the SDK.
"""

from __future__ import annotations

import os

SNAPSTART_INIT = "snap-start"
#: Service models the runtime's clients load; reading them needs no credentials.
PRIMED_SERVICE_MODELS = ("dynamodb", "sqs", "secretsmanager")


def prime_for_snapstart(environ: dict[str, str] | None = None) -> bool:
    """Import the model SDK and load the AWS service models when initialising a SnapStart
    snapshot; return whether it did. Creates no client, reads no credential or secret (those
    must be fresh after restore)."""
    env = os.environ if environ is None else environ
    if env.get("AWS_LAMBDA_INITIALIZATION_TYPE") != SNAPSTART_INIT:
        return False
    import anthropic  # noqa: F401  (about a second of cold start, now inside the snapshot)

    from .components import shared_session

    botocore_session = shared_session()._session
    for service in PRIMED_SERVICE_MODELS:
        botocore_session.get_service_model(service)
    return True
