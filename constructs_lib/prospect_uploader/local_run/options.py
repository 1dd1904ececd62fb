"""Options of a local run, and their validation before anything starts."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path

from constructs_lib.local_engine.errors import InputFileError, ModelUnavailableError, UsageError
from constructs_lib.local_engine.lambda_async import (
    DEFAULT_SECONDS_PER_MINUTE,
    DEFAULT_TIMEOUT_CAP_SECONDS,
)
from constructs_lib.local_engine.progress import Progress

MODELS = ("local", "anthropic")
#: Where the stack's classify step calls Claude; the first is the default (issue 22).
PROVIDERS = ("anthropic", "bedrock")
#: Values of ``--delivery`` (issue 19): the stack's context ``delivery``.
DELIVERIES = ("realtime", "batch", "auto")
#: Seconds of the run's clock a local Message Batch takes to end (the local model's default).
DEFAULT_BATCH_DELAY_SECONDS = 60.0
DEFAULT_STACK = "ProspectUploader"


@dataclass(frozen=True)
class RunOptions:
    """Options of one run (defaults in brackets).

    ``csv_path`` (required); ``cdk_out`` [cdk.out]; ``stack`` [ProspectUploader];
    ``duplicates`` [1] copies of every event to each Lambda target; ``concurrency`` [4]
    worker threads for Lambda invocations; ``fault_rate`` [0.0] and ``seed`` [0] of the
    local model; ``model`` [local] or ``anthropic``; ``seconds_per_minute`` [1.0] and
    ``timeout_cap_seconds`` [8.0] (see :class:`~.lambda_async.AsyncSettings`);
    ``object_key`` [the file name]; ``log_file`` [a new temp file]; ``code_root``
    [``constructs_lib._paths.lambda_src_root()``]; ``run_timeout_seconds`` [derived from
    the work: :func:`~constructs_lib.local_engine.run_bound.derive_run_bound`];
    ``rate_limit`` [none]: requests per minute of the run's clock the local model accepts
    (beyond that it answers 429 with ``retry-after``); ``kill_rate`` [0.0]: the share of
    model requests after which Lambda kills the invocation, and of batch results reads it
    kills partway (local model only);
    ``throttle_rate`` [0.0]: the share of SQS receives Lambda throttles (both seeded by
    ``seed``, see :mod:`~constructs_lib.local_engine.lambda_faults`); ``provider``
    [anthropic] or ``bedrock``: the provider the stack's classify step was synthesized
    with (``-c model_provider=bedrock``); ``bedrock`` runs it against the local
    ``bedrock-runtime`` (:mod:`~constructs_lib.local_engine.local_bedrock`), each call
    checked against the step's ``bedrock:InvokeModel`` grant; ``refusal_rate`` [0.0]: the
    seeded share of rows the local model refuses (``stop_reason: "refusal"``, as the model's
    safety classifiers may), each one a ``ModelRefused`` dead letter.

    Message Batches delivery (issue 19): ``delivery`` [the template's]: ``realtime``,
    ``batch`` or ``auto``, the splitter's ``DELIVERY`` as ``-c delivery=...`` sets it (the
    assembly must have the batch step unless ``realtime``); ``batch_delay_seconds`` [60]:
    seconds of the run's clock from a Message Batch's creation to its end;
    ``batch_errored_rate`` and ``batch_expired_rate`` [0.0]: the share of batch requests
    whose result is ``errored`` (``api_error``) / ``expired`` (seeded by ``seed``);
    ``batch_create_kill_rate`` [0.0]: the share of ``messages.batches.create`` calls around
    which Lambda kills the invocation, at one of three points (before the request reaches
    the model, after the model created the batch, after the answer before the batch id is
    recorded; seeded by ``seed``, see :mod:`~constructs_lib.local_engine.lambda_faults`);
    ``batch_canceled_rate``, ``batch_lost_rate`` and ``batch_broken_read_rate`` [0.0]: the
    share of batches someone cancels as they are created, of batches deleted at the
    provider once they end (404 before the step collects them), and of results reads broken
    partway (half as many retrieves answered 429/500/529), seeded by ``seed`` (see
    :mod:`~constructs_lib.local_engine.message_batch_faults`). Results always come in a new
    order on every read, as the API sends them.
    """

    csv_path: Path
    cdk_out: Path = Path("cdk.out")
    stack: str = DEFAULT_STACK
    duplicates: int = 1
    concurrency: int = 4
    fault_rate: float = 0.0
    seed: int = 0
    model: str = "local"
    seconds_per_minute: float = DEFAULT_SECONDS_PER_MINUTE
    timeout_cap_seconds: float = DEFAULT_TIMEOUT_CAP_SECONDS
    object_key: str | None = None
    log_file: Path | None = None
    code_root: Path | None = None
    run_timeout_seconds: float | None = None
    rate_limit: int | None = None
    kill_rate: float = 0.0
    throttle_rate: float = 0.0
    provider: str = "anthropic"
    progress: Progress | None = field(default=None, compare=False)
    # Message Batches delivery (issue 19).
    delivery: str | None = None
    batch_delay_seconds: float = DEFAULT_BATCH_DELAY_SECONDS
    batch_errored_rate: float = 0.0
    batch_expired_rate: float = 0.0
    batch_create_kill_rate: float = 0.0
    # Message Batches that hold for days (issue 33).
    batch_canceled_rate: float = 0.0
    batch_lost_rate: float = 0.0
    batch_broken_read_rate: float = 0.0
    # Issue 32.
    refusal_rate: float = 0.0


def validate_options(options: RunOptions) -> None:
    """Raise :class:`UsageError` (or :class:`InputFileError`) for unusable options."""
    path = options.csv_path
    if not path.exists():
        raise InputFileError(f"{path}: no such file")
    if not path.is_file():
        raise InputFileError(f"{path}: not a regular file")
    if not os.access(path, os.R_OK):
        raise InputFileError(f"{path}: not readable")
    if options.duplicates < 1:
        raise UsageError("--duplicates must be at least 1")
    if options.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    for flag, value in (
        ("--fault-rate", options.fault_rate),
        ("--kill-rate", options.kill_rate),
        ("--throttle-rate", options.throttle_rate),
        ("--refusal-rate", options.refusal_rate),
    ):
        if not 0.0 <= value <= 1.0:  # also false for NaN
            raise UsageError(f"{flag} must be between 0 and 1, got {value:g}")
    if options.model not in MODELS:
        raise UsageError(f"--model must be one of {', '.join(MODELS)}")
    if options.provider not in PROVIDERS:
        raise UsageError(f"--provider must be one of {', '.join(PROVIDERS)}")
    if options.provider == "bedrock" and options.model != "local":
        raise UsageError(
            "--provider bedrock runs against the local bedrock-runtime: it needs --model local "
            "(a local run never calls AWS)"
        )
    if options.rate_limit is not None and options.rate_limit < 1:
        raise UsageError("--rate-limit must be at least 1 request per minute")
    if options.model == "anthropic":
        if options.rate_limit is not None:
            raise UsageError("--rate-limit needs --model local (the limit is the local model's)")
        if options.fault_rate > 0:
            raise UsageError("--fault-rate needs --model local (faults are injected locally)")
        if options.refusal_rate > 0:
            raise UsageError("--refusal-rate needs --model local (refusals are injected locally)")
        if options.kill_rate > 0:
            raise UsageError(
                "--kill-rate needs --model local (each kill throws away a billed request)"
            )
        if not os.environ.get("ANTHROPIC_API_KEY"):
            raise ModelUnavailableError(
                "--model anthropic calls the real Claude API and needs ANTHROPIC_API_KEY; "
                "set it, or use the default --model local"
            )
    if options.seconds_per_minute <= 0 or options.timeout_cap_seconds <= 0:
        raise UsageError("--backoff-minute-ms and --timeout-cap must be positive")
    if options.run_timeout_seconds is not None and not options.run_timeout_seconds > 0:
        raise UsageError(f"--run-timeout must be positive, got {options.run_timeout_seconds:g}")
    _validate_batch_options(options)


def _validate_batch_options(options: RunOptions) -> None:
    """Message Batches delivery (issue 19)."""
    if options.delivery is not None and options.delivery not in DELIVERIES:
        raise UsageError(
            f"--delivery must be one of {', '.join(DELIVERIES)}, got {options.delivery!r}"
        )
    provider_faults = (
        ("--batch-canceled-rate", options.batch_canceled_rate),
        ("--batch-lost-rate", options.batch_lost_rate),
        ("--batch-broken-read-rate", options.batch_broken_read_rate),
    )
    for flag, value in (
        ("--batch-errored-rate", options.batch_errored_rate),
        ("--batch-expired-rate", options.batch_expired_rate),
        ("--batch-create-kill-rate", options.batch_create_kill_rate),
        *provider_faults,
    ):
        if not 0.0 <= value <= 1.0:
            raise UsageError(f"{flag} must be between 0 and 1, got {value:g}")
    if options.model == "anthropic" and any(value for _, value in provider_faults):
        raise UsageError(
            "--batch-canceled-rate, --batch-lost-rate and --batch-broken-read-rate need "
            "--model local (they are faults of the local Message Batches)"
        )
    if options.batch_errored_rate + options.batch_expired_rate > 1.0:
        raise UsageError("--batch-errored-rate and --batch-expired-rate add up to more than 1")
    if not options.batch_delay_seconds >= 0:
        raise UsageError(f"--batch-delay must not be negative, got {options.batch_delay_seconds:g}")
    faults = options.batch_errored_rate or options.batch_expired_rate
    if options.model == "anthropic" and faults:
        raise UsageError("--batch-errored-rate and --batch-expired-rate need --model local")
    if options.model == "anthropic" and options.batch_create_kill_rate > 0:
        raise UsageError(
            "--batch-create-kill-rate needs --model local (each kill after a create throws "
            "away a billed batch)"
        )


# What the local run imports beyond the library's own dependencies (moto for AWS; the
# handlers' own requirements), with the pip name to install.
LOCAL_DEPENDENCIES = {
    "moto": "moto[dynamodb,events,s3,sns,sqs]",
    "boto3": "boto3",
    "anthropic": "anthropic",
    "aws_lambda_powertools": "aws-lambda-powertools",
    "jmespath": "jmespath",
}


def require_local_dependencies() -> None:
    """Raise :class:`UsageError` naming what to install when a local-run package is absent."""
    missing = [pip for module, pip in LOCAL_DEPENDENCIES.items() if not find_spec(module)]
    if missing:
        raise UsageError(
            "the local run needs "
            + ", ".join(missing)
            + ": pip install "
            + " ".join(f"'{name}'" for name in missing)
        )
