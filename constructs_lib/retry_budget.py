"""RetryBudget: an aspect that caps what one delivery may cost in model requests."""

from __future__ import annotations

import jsii
from aws_cdk import IAspect, Validations
from constructs import IConstruct

from ._validation import check_int_range
from .defaults import SDK_ATTEMPTS_PER_INVOCATION


@jsii.implements(IAspect)
class RetryBudget:
    """Fails synth for any :class:`IdempotentModelStep` whose retries exceed a budget.

    A step's worst case per delivery is SDK attempts (1) x the runtime's
    transient-failure attempts (``MAX_ATTEMPTS = lambda_retry_attempts + 1``).
    Rate-limit answers (429/529) are not billed and never use an attempt, so they
    do not count. Add the aspect to an app or stage so a change to one step's
    retries cannot quietly multiply the bill::

        Aspects.of(app).add(RetryBudget(max_model_requests_per_delivery=2))

    :param max_model_requests_per_delivery: the budget, 1-3 (3 is the most a step
        can cost: ``lambda_retry_attempts`` is at most 2).
    """

    def __init__(self, *, max_model_requests_per_delivery: int) -> None:
        check_int_range("RetryBudget", "max_model_requests_per_delivery",
                        max_model_requests_per_delivery, 1, 3)  # fmt: skip
        self.max_model_requests_per_delivery = max_model_requests_per_delivery

    def visit(self, node: IConstruct) -> None:
        """Report an error on each step over budget; CDK then stops synthesis."""
        from .idempotent_model_step import IdempotentModelStep

        if not isinstance(node, IdempotentModelStep):
            return
        cost = node.max_model_requests_per_delivery
        if cost <= self.max_model_requests_per_delivery:
            return
        Validations.of(node).add_error(
            "RetryBudgetExceeded",
            f"{node.node.path} may make {cost} model requests per delivery "
            f"({SDK_ATTEMPTS_PER_INVOCATION} SDK attempt x {node.max_attempts} "
            f"attempts = {cost}; 429s are not billed), over the budget of "
            f"{self.max_model_requests_per_delivery}. Lower lambda_retry_attempts to "
            f"{self.max_model_requests_per_delivery // SDK_ATTEMPTS_PER_INVOCATION - 1} or "
            "raise the budget.",
        )
