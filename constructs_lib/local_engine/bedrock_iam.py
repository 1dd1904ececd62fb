"""``bedrock:InvokeModel`` checked against the calling function's role, as IAM checks it.

The Anthropic SDK calls Bedrock over ``httpx2``, not botocore, so :mod:`.iam`'s botocore hook
never sees it. While :meth:`BedrockInvokeCheck.installed` is open,
``httpx2.HTTPTransport.handle_request`` is wrapped: a request to the local
``bedrock-runtime``'s InvokeModel path, sent on a thread the engine marked as a function
(:mod:`.identity`), is evaluated with the run's :class:`~.iam.IamCheck` before it is sent.

What IAM evaluates for one InvokeModel (``constructs_lib.bedrock_models``):

- a foundation-model id: ``bedrock:InvokeModel`` on
  ``arn:aws:bedrock:<region>::foundation-model/<id>``;
- an inference-profile id: on the profile,
  ``arn:aws:bedrock:<region>:<account>:inference-profile/<id>``, **and** on the foundation
  model in the region Bedrock routes the request to, with ``bedrock:InferenceProfileArn``
  set to the profile's ARN. The local run routes requests round-robin over the profile's
  destination regions (the geography's; a sample of commercial regions for ``global.``),
  so a run of a few rows exercises the grant in every region.

A denied request never reaches the local model: the handler gets Bedrock's answer to it,
403 ``AccessDeniedException`` with AWS's message, and the denial is counted in the check.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from constructs_lib.bedrock_models import (
    INFERENCE_PROFILE_ARN_KEY,
    BedrockModel,
    foundation_model_arns,
    inference_profile_arn,
    parse_model_id,
)
from constructs_lib.testing.bedrock_api import error_headers, model_id_of

from . import identity
from .iam import IamCheck, Permission
from .intrinsics import LOCAL_ACCOUNT, LOCAL_REGION

ACTION = "bedrock:InvokeModel"
#: Where the local run routes ``global.`` requests: one region of each geography and more.
GLOBAL_SAMPLE_REGIONS = ("us-east-1", "us-west-2", "eu-west-1", "ap-northeast-1", "sa-east-1")


class BedrockInvokeCheck:
    """Evaluates each InvokeModel a function sends to ``base_url`` against its role.

    :param iam: the run's check (its roles, counts and denials).
    :param base_url: the local ``bedrock-runtime``'s address.
    :param region: the source region (the run's). Default us-east-1.
    :param account: the run's account. Default moto's, 123456789012.
    """

    def __init__(
        self,
        iam: IamCheck,
        base_url: str,
        *,
        region: str = LOCAL_REGION,
        account: str = LOCAL_ACCOUNT,
    ) -> None:
        self.iam = iam
        self.region = region
        self.account = account
        self._netloc = urlsplit(base_url).netloc
        self._turns: dict[str, Iterator[str]] = {}
        self._lock = threading.Lock()
        #: InvokeModel requests evaluated, and by destination region of the foundation model.
        self.evaluated = 0
        self.destinations: dict[str, int] = {}

    def permissions(self, model: BedrockModel) -> list[Permission]:
        """What IAM checks for one InvokeModel of ``model`` (routing it, for a profile)."""
        if not model.is_profile:
            [arn] = foundation_model_arns(model, "aws", self.region)
            return [Permission(ACTION, arn)]
        profile_arn = inference_profile_arn(model, "aws", self.region, self.account)
        destination = self._route(model)
        arn = f"arn:aws:bedrock:{destination}::foundation-model/{model.foundation_model}"
        return [
            Permission(ACTION, profile_arn),
            Permission(ACTION, arn, ((INFERENCE_PROFILE_ARN_KEY, profile_arn),)),
        ]

    def _route(self, model: BedrockModel) -> str:
        regions = model.destination_regions(self.region) or GLOBAL_SAMPLE_REGIONS
        with self._lock:
            turn = self._turns.setdefault(model.model_id, itertools.cycle(regions))
            destination = next(turn)
            self.destinations[destination] = self.destinations.get(destination, 0) + 1
        return destination

    def denied_response(self, request: Any, permission: Permission) -> Any:
        """Bedrock's 403 for a call the role does not allow."""
        import httpx2

        function_id = identity.current() or ""
        role = self.iam.roles[function_id]
        message = (
            f"User: arn:aws:sts::{self.account}:assumed-role/{role.role_name}/{role.function} "
            f"is not authorized to perform: {permission.action} on resource: "
            f"{permission.resource} because no identity-based policy allows the "
            f"{permission.action} action"
        )
        return httpx2.Response(
            403,
            headers={
                "content-type": "application/json",
                **error_headers("AccessDeniedException", "local-iam-denied"),
            },
            content=json.dumps({"message": message}).encode(),
            request=request,
        )

    @contextmanager
    def installed(self) -> Iterator[BedrockInvokeCheck]:
        """Wrap ``httpx2.HTTPTransport.handle_request`` while open."""
        import httpx2

        original = httpx2.HTTPTransport.handle_request
        check = self

        def handle_request(transport: httpx2.HTTPTransport, request: httpx2.Request) -> Any:
            denied = check._evaluate(request)
            if denied is not None:
                return denied
            return original(transport, request)

        setattr(httpx2.HTTPTransport, "handle_request", handle_request)  # noqa: B010
        try:
            yield self
        finally:
            setattr(httpx2.HTTPTransport, "handle_request", original)  # noqa: B010

    def _evaluate(self, request: Any) -> Any:
        """None to send the request on; Bedrock's 403 when the role lacks a permission."""
        function_id = identity.current()
        if function_id is None or function_id not in self.iam.roles:
            return None
        if request.url.netloc.decode() != self._netloc:
            return None
        model_id = model_id_of(request.url.raw_path.decode())
        model = parse_model_id(model_id) if model_id else None
        if model is None:
            return None  # the local model answers it (ValidationException)
        with self._lock:
            self.evaluated += 1
        missing = self.iam.evaluate(function_id, self.permissions(model))
        if missing is None:
            return None
        return self.denied_response(request, missing)
