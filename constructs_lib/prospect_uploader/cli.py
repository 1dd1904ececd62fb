"""``prospect-uploader``: run the Prospect Uploader locally on a CSV file.

Exit codes: 0 the upload was processed and every invariant holds; 1 the upload was rejected
(the recorded reason is printed) or an invariant does not hold; 2 usage errors (bad options,
a missing file, no ``cdk.out``, ``--model anthropic`` without a key, the ``local`` extra not
installed); 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Sequence
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

# Only modules without boto3 or moto here: `--help`, and the message that names the missing
# extra, must work where the `local` extra is not installed. The local run is imported in
# _run(), once its dependencies are known to be there.
from constructs_lib.local_engine.errors import LocalRunError, RunTimeoutError
from constructs_lib.local_engine.lambda_async import (
    DEFAULT_SECONDS_PER_MINUTE,
    DEFAULT_TIMEOUT_CAP_SECONDS,
)
from constructs_lib.local_engine.progress import Progress

if TYPE_CHECKING:
    from .local_run.pipeline import LocalPipeline

PROG = "prospect-uploader"
#: What each command imports beyond the library's own dependencies: the ``local`` extra.
EXTRA_MODULES = {
    "run": ("boto3", "moto", "anthropic", "aws_lambda_powertools"),
    "viewer": ("botocore",),
}
LOCAL_EXTRA_INSTALL = "pip install 'idempotent-model-step[local]'"
RUN_EPILOG = """\
counts (the summary table and --json):
  rows            data rows in FILE (header and blank lines excluded)
  valid, invalid  the splitter's summary: rows published / rows recorded as invalid
  classified      rows labelled hot, warm or cold in ProspectsTable
  failed          valid rows that ended in FailureQueue -> FailuresTable, unlabelled
  dlq             model-step failures the recorder stored from FailureQueue (one per row)
  upload          the upload's state (complete, complete_with_failures, in_progress,
                  waiting_in_batch, stalled, rejected) and counts: the one counting rule
                  the Prospect Viewer and the summary mail use
  model_requests  requests billed for the upload's rows, each key's once (the viewer's
                  and the mail's count; 429 and 529 answers are never billed)
  http_requests   requests that reached the model: realtime HTTP requests (429s and 529s
                  included) plus succeeded Message Batch requests
  batches, batch_requests   Message Batches created / requests submitted in them
  batch_create_kills   kills around a batch create, by point (--batch-create-kill-rate)
  batch_faults    Message Batches faults injected: canceled, lost, broken_reads,
                  failed_retrieves (--batch-canceled-rate, --batch-lost-rate,
                  --batch-broken-read-rate)
  deliveries      row-event deliveries to the classify step (one per copy with
                  --duplicates): to its buffer queue, or async invocations; retries excluded
  alerts          upload summaries published to AlertTopic
  deduplicated    row events a v2 bus answered DEDUPLICATED (a re-run splitter's repeats)
  rate_limited    429 answers of the model (--rate-limit); not billed
  max_requests_per_key   the most billed model requests one record key got
  kills, throttles       Lambda faults injected (--kill-rate, --throttle-rate)
  redriven        messages SQS moved by a redrive policy (redriven_by_queue: per queue)
  input_tokens, output_tokens   billed tokens (200 answers)
  cache_creation_input_tokens, cache_read_input_tokens   prompt-cache tokens written / read
                  (cache_writes, cache_reads: the requests that wrote / read it)
  cost_usd        the billed requests in dollars at the step's MODEL_RATES (null: no price)
  elapsed_s       wall seconds from the upload until everything settled (run_minutes:
                  the same on the run's clock, whose minute lasts --backoff-minute-ms)
  aws_calls, denied   handler AWS calls evaluated against their role in cdk.out / denied
                  (denied_calls: each distinct "function: action on resource")
  settled         false when --run-timeout passed with work in flight: the summary and
                  --json still print (the counts so far), and the run exits 1

invariants (checked; exit 1 when one fails):
  rows = valid + invalid;  valid = classified + failed, every failure with a code;
  max_requests_per_key <= MAX_ATTEMPTS;  no step dead letter without ERROR_CODE unless
  every receive of it was throttled;
  no faults (throttles are none): failed = 0 and http_requests - rate_limited = valid;
  with faults or kills: billed <= MAX_ATTEMPTS x valid, and failed = dlq.

Rules, patterns, targets, retry settings, handlers and environments are read from the cloud
assembly, so run `make synth` after changing the stack. AWS is moto, in this process; the
handlers share one os.environ (functions must not set one variable to different values,
POWERTOOLS_SERVICE_NAME excepted).
"""


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _rate(text: str) -> float:
    # The range is checked with the other options (validate_options), so the error names
    # the flag, the value and the range in one UsageError.
    return float(text)


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: ``run`` (the local pipeline) and ``viewer`` (the signing proxy)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="The Prospect Uploader: run the pipeline locally (moto, no AWS), or open "
        "a deployed Prospect Viewer through a signing proxy.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="upload a CSV file and run the pipeline to completion",
        description="Upload FILE to the local UploadBucket and run the whole pipeline: "
        "splitter, classify step, failure recorder, alerts.",
        epilog=RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("file", metavar="FILE", type=Path, help="the CSV file to upload")
    run.add_argument(
        "--cdk-out",
        type=Path,
        default=Path("cdk.out"),
        help="cloud assembly directory (default: ./cdk.out, written by `make synth`)",
    )
    run.add_argument(
        "--stack", default="ProspectUploader", help="stack name (default: %(default)s)"
    )
    run.add_argument(
        "--duplicates",
        type=_positive_int,
        default=1,
        metavar="N",
        help="deliver every event N times to each Lambda target: two copies at "
        "once, the rest after them (default: 1)",
    )
    run.add_argument(
        "--concurrency",
        type=_positive_int,
        default=4,
        metavar="N",
        help="Lambda invocations running at once (default: 4)",
    )
    run.add_argument(
        "--fault-rate",
        type=_rate,
        default=0.0,
        metavar="F",
        help="fraction of rows whose model requests fail (429, 529, 500, timeouts, "
        "400), local model only (default: 0)",
    )
    run.add_argument(
        "--refusal-rate",
        type=_rate,
        default=0.0,
        metavar="R",
        help="fraction of rows the local model refuses (stop_reason refusal, dead-lettered "
        "as ModelRefused), local model only (default: 0)",
    )
    run.add_argument(
        "--kill-rate",
        type=_rate,
        default=0.0,
        metavar="P",
        help="share of model requests after which Lambda kills the invocation: the model "
        "answered (and billed) it, the handler never sees the answer; under --delivery batch "
        "also the share of batch results reads killed partway; local model only (default: 0)",
    )
    run.add_argument(
        "--throttle-rate",
        type=_rate,
        default=0.0,
        metavar="P",
        help="share of SQS receives Lambda throttles: received, never invoked, back after "
        "the visibility timeout with a higher receive count (default: 0)",
    )
    run.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the fault plan, the kills and the throttles (default: 0)",
    )
    run.add_argument(
        "--model",
        choices=("local", "anthropic"),
        default="local",
        help="local: deterministic Messages API on 127.0.0.1 (default); "
        "anthropic: the real API, needs ANTHROPIC_API_KEY",
    )
    run.add_argument(
        "--provider",
        choices=("anthropic", "bedrock"),
        default="anthropic",
        help="the provider the stack's classify step calls: anthropic (default) or bedrock, "
        "which needs the stack synthesized with -c model_provider=bedrock and runs against "
        "a local bedrock-runtime, each InvokeModel checked against the step's IAM grant",
    )
    run.add_argument(
        "--backoff-minute-ms",
        type=_positive_float,
        default=DEFAULT_SECONDS_PER_MINUTE * 1000,
        metavar="MS",
        help="local milliseconds per minute of Lambda's retry wait (default: "
        "%(default).0f; keep it above the longest attempt, about 1 s with timeouts)",
    )
    run.add_argument(
        "--timeout-cap",
        type=_positive_float,
        default=DEFAULT_TIMEOUT_CAP_SECONDS,
        metavar="SECONDS",
        help="remaining time a context reports at most; the model call's deadline is that "
        "minus 3 s, at least 1 s (default: %(default)s; keep it under the buffer queue's "
        "visibility timeout on the run's clock, 9 s at the default --backoff-minute-ms)",
    )
    run.add_argument(
        "--rate-limit",
        type=_positive_int,
        metavar="RPM",
        help="the local model accepts at most RPM requests per minute of the run's clock "
        "(a minute lasts --backoff-minute-ms); beyond that it answers 429 with retry-after",
    )
    run.add_argument(
        "--run-timeout",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="wall seconds the pipeline may take to settle before the run fails (default: "
        "derived from the work: rows, copies, faults, the rate limit, the run's clock and "
        "the step's queues; shown in the summary and in docs/local-run.md)",
    )
    run.add_argument("--key", help="object key of the upload (default: FILE's name)")
    run.add_argument(
        "--log-file",
        type=Path,
        help="where handler logs go (default: a new temporary file, named on stderr)",
    )
    run.add_argument(
        "--json", action="store_true", help="end stdout with one JSON line of the counts"
    )
    run.add_argument(
        "--verbose",
        action="store_true",
        help="also list the IAM detail: each function's grants the run never used and the "
        "IAM conditions assumed to hold (default: one line of counts; denied calls are "
        "always listed)",
    )
    run.add_argument(
        "--serve",
        action="store_true",
        help="then serve the Prospect Viewer on the run's results until Ctrl-C",
    )
    run.add_argument(
        "--port", type=int, default=0, help="viewer port with --serve (default: any free port)"
    )
    _add_batch_arguments(run)
    viewer = commands.add_parser(
        "viewer",
        help="open a deployed Prospect Viewer through a local SigV4-signing proxy",
        description="Serve http://127.0.0.1:PORT and forward each request, signed with your "
        "AWS credentials, to the viewer's IAM-authenticated Function URL (the stack "
        "output ViewerUrl). Nothing is exposed beyond loopback.",
    )
    viewer.add_argument("url", metavar="FUNCTION_URL", help="the stack output ViewerUrl")
    viewer.add_argument("--region", help="default: read from the Function URL's host")
    viewer.add_argument("--port", type=int, default=8080, help="local port (default: 8080)")
    return parser


# -- Message Batches delivery (issue 19) ----------------------------------------------------
def _add_batch_arguments(run: argparse.ArgumentParser) -> None:
    """``--delivery`` and the local Message Batches' options."""
    batch = run.add_argument_group("Message Batches delivery")
    batch.add_argument(
        "--delivery",
        choices=("realtime", "batch", "auto"),
        default=None,
        help="how the splitter sends the rows, as `-c delivery=...` sets it: realtime (one "
        "request per row), batch (Message Batches, or Bedrock batch inference jobs with --provider "
        "bedrock; half price) or auto (batch from the "
        "stack's batch_min_rows valid rows); default: the assembly's (auto unless "
        "synthesized otherwise). batch and auto need the assembly's batch step",
    )
    batch.add_argument(
        "--batch-delay",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="seconds of the run's clock a local Message Batch takes to end (default: "
        "%(default).0f)",
    )
    for flag, what in BATCH_FAULT_FLAGS:
        batch.add_argument(
            flag,
            type=_rate,
            default=0.0,
            metavar="P",
            help=f"share of {what}; seeded by --seed, local model only (default: 0)",
        )


#: The local Message Batches' fault flags, and what each is the share of.
BATCH_FAULT_FLAGS = (
    ("--batch-errored-rate", "batch requests whose result is errored (api_error)"),
    ("--batch-expired-rate", "batch requests whose result is expired"),
    (
        "--batch-create-kill-rate",
        "Message Batch creates around which Lambda kills the invocation, at one of three "
        "points: before the request reaches the model, after the model created the batch, "
        "or after the answer before the batch id is recorded",
    ),
    (
        "--batch-canceled-rate",
        "batches someone cancels as they are created (canceling, then canceled results; "
        "some requests succeed despite the cancel)",
    ),
    (
        "--batch-lost-rate",
        "batches deleted at the provider once they end, before the step collects them "
        "(404: the step gives up on them after its bound and sends their rows again)",
    ),
    (
        "--batch-broken-read-rate",
        "batch results reads broken partway, and half as many retrieves answered "
        "429/500/529 (results always come in a new order on every read, as the API's do)",
    ),
)


def _batch_options(args: argparse.Namespace) -> dict[str, object]:
    return {
        "delivery": args.delivery,
        "batch_delay_seconds": args.batch_delay,
        "batch_errored_rate": args.batch_errored_rate,
        "batch_expired_rate": args.batch_expired_rate,
        "batch_create_kill_rate": args.batch_create_kill_rate,
        "batch_canceled_rate": args.batch_canceled_rate,
        "batch_lost_rate": args.batch_lost_rate,
        "batch_broken_read_rate": args.batch_broken_read_rate,
    }


def _viewer(args: argparse.Namespace, err: TextIO) -> int:
    from .viewer_proxy import SigningProxy, ViewerProxyError

    try:
        proxy = SigningProxy(args.url, region=args.region, port=args.port)
    except (ViewerProxyError, OSError) as exc:
        print(f"{PROG}: error: {exc}", file=err)
        return 2
    print(f"{PROG}: Prospect Viewer on {proxy.url} (Ctrl-C to stop)", file=err, flush=True)
    try:
        proxy.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        proxy.stop()
    return 0


def missing_extra(command: str) -> list[str]:
    """The modules ``command`` needs that are not installed (empty when all are)."""
    return [module for module in EXTRA_MODULES[command] if find_spec(module) is None]


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from .local_run.invariants import check_invariants
    from .local_run.options import RunOptions
    from .local_run.pipeline import LocalPipeline
    from .local_run.report import json_line, render_table

    options = RunOptions(
        csv_path=args.file,
        cdk_out=args.cdk_out,
        stack=args.stack,
        duplicates=args.duplicates,
        concurrency=args.concurrency,
        fault_rate=args.fault_rate,
        seed=args.seed,
        model=args.model,
        provider=args.provider,
        seconds_per_minute=args.backoff_minute_ms / 1000,
        rate_limit=args.rate_limit,
        kill_rate=args.kill_rate,
        throttle_rate=args.throttle_rate,
        refusal_rate=args.refusal_rate,
        timeout_cap_seconds=args.timeout_cap,
        run_timeout_seconds=args.run_timeout,
        object_key=args.key,
        log_file=args.log_file,
        progress=Progress(err),
        **_batch_options(args),  # type: ignore[arg-type]
    )
    with LocalPipeline(options) as pipeline:
        print(f"{PROG}: handler logs: {pipeline.log_path}", file=err)
        try:
            result = pipeline.run()
        except RunTimeoutError as unsettled:
            _print_unsettled(unsettled, args, out)
            raise
        rejected = result.status == "rejected"
        checks = [] if rejected else check_invariants(result)
        print(render_table(result, checks, verbose=args.verbose), file=out)
        if args.json:
            print(json_line(result), file=out)
        out.flush()
        if rejected:
            code = result.error_code or "Rejected"
            print(f"{PROG}: error: upload rejected ({code}): {result.reason}", file=err)
            return 1
        failing = [check for check in checks if not check.ok]
        for check in failing:
            hint = f": {check.hint}" if check.hint else ""
            print(f"{PROG}: invariant violated: {check.name} ({check.values}){hint}", file=err)
        if args.serve:
            _serve(pipeline, args.port, err)
        return 1 if failing else 0


def _print_unsettled(unsettled: RunTimeoutError, args: argparse.Namespace, out: TextIO) -> None:
    """A run that did not settle still prints its summary and, with ``--json``, its JSON line
    (``"settled": false``, the denied calls); ``main`` then prints the error and exits 1."""
    from .local_run.report import json_line, render_table
    from .local_run.results import RunResult

    result = unsettled.result
    if not isinstance(result, RunResult):
        return
    print(render_table(result, [], verbose=args.verbose), file=out)
    if args.json:
        print(json_line(result), file=out)
    out.flush()


def _serve(pipeline: LocalPipeline, port: int, err: TextIO) -> None:
    server = pipeline.serve_viewer(port=port)
    print(f"{PROG}: Prospect Viewer on {server.url} (Ctrl-C to stop)", file=err, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point; returns the exit code (see the module docstring)."""
    args = build_parser().parse_args(argv)
    out, err = sys.stdout, sys.stderr
    missing = missing_extra(args.command)
    if missing:
        print(
            f"{PROG}: error: '{args.command}' needs the library's 'local' extra "
            f"({', '.join(missing)} not installed): {LOCAL_EXTRA_INSTALL}",
            file=err,
        )
        return 2
    if args.command == "viewer":
        return _viewer(args, err)
    try:
        return _run(args, out, err)
    except LocalRunError as exc:
        print(f"{PROG}: error: {exc}", file=err)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=err)
        return 130


if __name__ == "__main__":
    sys.exit(main())
