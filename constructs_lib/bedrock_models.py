"""Claude model ids on Amazon Bedrock, and the resources ``bedrock:InvokeModel`` needs for each.

Pure functions and tables (no CDK import), so the routing table is read in one place:

- a **foundation-model id** (``anthropic.claude-...``) is invoked in the stack's region:
  ``arn:aws:bedrock:<region>::foundation-model/<id>``;
- an **inference-profile id** (``us.``, ``eu.``, ``apac.`` or ``global.`` followed by a
  foundation-model id) is invoked in the stack's region, and Bedrock routes each request to
  a destination region of the profile's geography. IAM evaluates ``bedrock:InvokeModel``
  twice: on the profile
  (``arn:aws:bedrock:<region>:<account>:inference-profile/<id>``), and on the foundation
  model in the destination region, with the request context key
  ``bedrock:InferenceProfileArn`` set to the profile's ARN. A role that may invoke the
  profile but not the foundation model in every destination region gets an
  ``AccessDeniedException`` on the requests Bedrock happens to route there.

Why these regions (:data:`GEOGRAPHY_REGIONS`): the destination regions of each prefix are
aws-cdk's ``aws-bedrock-alpha`` lists (``CrossRegionInferenceProfileRegion``, which cites
AWS's "Supported Regions and models for inference profiles" page): ``us``, ``eu``, ``jp``,
``au`` and ``us-gov`` as its grants use them, and ``apac`` as its documented list (13
regions, ``me-central-1`` included). Its grant matches ``apac`` by the region prefixes ``ap-``
and ``me-``, which also takes ``ap-east-1`` and ``me-south-1``, regions AWS does not list: we
grant the documented list, the least that covers every documented destination. ``global.``
routes to any commercial region, so its foundation-model resource has ``*`` for the region.
The grant conditions the foundation-model statement on ``bedrock:InferenceProfileArn``: the
role cannot invoke the model directly, in any region, outside the profile. Which models
publish which profile is the model catalogue's (``bedrock_profile_prefixes``); an id it does
not list is granted all the same, with a warning at synth.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ._runtime_modules import model_catalogue

#: Destination regions of the geographic inference profiles, by id prefix (see the module
#: docstring for the source of each list).
GEOGRAPHY_REGIONS: Mapping[str, tuple[str, ...]] = {
    "us": ("us-east-1", "us-east-2", "us-west-1", "us-west-2"),
    "eu": (
        "eu-central-1",
        "eu-central-2",
        "eu-north-1",
        "eu-south-1",
        "eu-south-2",
        "eu-west-1",
        "eu-west-2",
        "eu-west-3",
    ),
    "apac": (
        "ap-east-2",
        "ap-northeast-1",
        "ap-northeast-2",
        "ap-northeast-3",
        "ap-south-1",
        "ap-south-2",
        "ap-southeast-1",
        "ap-southeast-2",
        "ap-southeast-3",
        "ap-southeast-4",
        "ap-southeast-5",
        "ap-southeast-7",
        "me-central-1",
    ),
    "jp": ("ap-northeast-1", "ap-northeast-3"),
    "au": ("ap-southeast-2", "ap-southeast-4"),
    "us-gov": ("us-gov-east-1", "us-gov-west-1"),
}
#: The prefix of the global profiles: any commercial region.
GLOBAL_PREFIX = "global"
#: Every inference-profile prefix AWS defines, as the model catalogue names them.
PROFILE_PREFIXES: tuple[str, ...] = tuple(model_catalogue.PROFILE_PREFIXES)
#: A Claude foundation-model id on Bedrock, e.g. ``anthropic.claude-haiku-5-5``.
FOUNDATION_MODEL_ID = re.compile(r"^anthropic\.[a-z0-9][a-z0-9-]*(?:[.:][a-z0-9-]+)*$")
#: The condition key IAM sets on the foundation-model check of a request made through a
#: profile.
INFERENCE_PROFILE_ARN_KEY = "bedrock:InferenceProfileArn"
#: What ``model_id`` accepts with ``ModelProvider.BEDROCK``, for error messages.
ALLOWED = (
    "a Claude foundation-model id 'anthropic.<model>' (e.g. 'anthropic.claude-haiku-5-5') or "
    "an inference-profile id '<us|eu|apac|jp|au|us-gov|global>.anthropic.<model>' (e.g. "
    "'us.anthropic.claude-haiku-5-5')"
)


@dataclass(frozen=True)
class BedrockModel:
    """A parsed Bedrock model id."""

    #: The id as given: what the runtime sends in the InvokeModel path.
    model_id: str
    #: The foundation-model id, without a profile prefix.
    foundation_model: str
    #: The inference-profile prefix (one of :data:`PROFILE_PREFIXES`), or None for a
    #: foundation-model id.
    profile_prefix: str | None

    @property
    def is_profile(self) -> bool:
        """True for an inference-profile id."""
        return self.profile_prefix is not None

    def destination_regions(self, source_region: str | None) -> tuple[str, ...] | None:
        """The regions its requests may run in: the source region for a foundation model,
        the geography's regions for a geographic profile, None (any) for ``global.``."""
        if self.profile_prefix is None:
            return (source_region,) if source_region else ()
        return GEOGRAPHY_REGIONS.get(self.profile_prefix)


def parse_model_id(model_id: str) -> BedrockModel | None:
    """The :class:`BedrockModel` of ``model_id``, or None when Bedrock's Claude cannot be
    invoked with it."""
    prefix, foundation = model_catalogue.split_profile(model_id)
    if FOUNDATION_MODEL_ID.match(foundation):
        return BedrockModel(model_id, foundation, prefix)
    return None


def foundation_model_arns(model: BedrockModel, partition: str, source_region: str) -> list[str]:
    """The foundation-model ARNs an InvokeModel of ``model`` from ``source_region`` is
    evaluated on (``*`` for the region of a ``global.`` profile)."""
    regions = model.destination_regions(source_region)
    if regions is None:
        regions = ("*",)
    return [
        f"arn:{partition}:bedrock:{region}::foundation-model/{model.foundation_model}"
        for region in regions
    ]


def inference_profile_arn(model: BedrockModel, partition: str, region: str, account: str) -> str:
    """The ARN of a system-defined inference profile, in the region it is invoked from."""
    return f"arn:{partition}:bedrock:{region}:{account}:inference-profile/{model.model_id}"


def claude_model_name(model: BedrockModel) -> str:
    """The Claude API's name of the model, as Bedrock's answers report it: the catalogue's
    (``us.anthropic.claude-haiku-4-5-20251001-v1:0`` -> ``claude-haiku-4-5``), else the id
    without ``anthropic.`` and a version suffix."""
    spec = model_catalogue.lookup(model.foundation_model)
    if spec is not None:
        return str(spec.model_id)
    name = model.foundation_model.removeprefix("anthropic.")
    return re.sub(r"-v\d+(?::\d+)?$", "", name)
