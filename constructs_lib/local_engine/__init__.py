"""A local engine for stacks that compose ``IdempotentModelStep``: the synthesized cloud
assembly (``cdk.out``) run in one process.

The rules, patterns, targets, retry settings, event source mappings, handlers and
environments come from the template; AWS is moto (in-process); the real Lambda handlers run
with Lambda's async semantics (retries on a compressed clock, on-failure records,
concurrent duplicate deliveries); the model is a deterministic local Messages API on
127.0.0.1 (:class:`~.local_model.LocalMessagesAPI`).

Parts, each usable alone: :mod:`.assembly` (reading ``cdk.out``), :mod:`.intrinsics`,
:mod:`.event_patterns`, :mod:`.event_bus` (routing, PutEvents capture), :mod:`.targets`,
:mod:`.lambda_async`, :mod:`.sqs_queues` (mapped queues on the compressed clock),
:mod:`.scheduling`, :mod:`.local_aws` (moto), :mod:`.moto_fixes`,
:mod:`.environment`, :mod:`.execution_environment`, :mod:`.handler_logs`,
:mod:`.local_model`, :mod:`.loopback`, :mod:`.lambda_faults` (seeded kills and throttles),
:mod:`.model_requests` (billed requests per record key), :mod:`.run_bound` (a run's time
bound, from its work) and :mod:`.progress`. :class:`~.engine.LocalEngine` puts them
together.

Needs the ``local`` extra (moto, boto3, anthropic, aws-lambda-powertools); the construct
library itself never imports this package.
"""
