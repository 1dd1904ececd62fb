"""A synthesized template with what varies between machines and runs masked, for snapshots.

What changes although the stack did not:

- **Asset hashes** (SHA-256, 64 hex), in S3 keys (``<hash>.zip``), asset paths and
  parameters. A Lambda asset's hash covers its sources and requirements, and also how it was
  built: with bytecode from a CPython 3.13 when the machine has one, without it otherwise,
  or not at all when bundling is skipped. So the same stack synthesized on two machines, or
  with and without bundling, gets different hashes.
- **Published-version hashes**: a ``lambda.Version`` made by ``function.current_version``
  (SnapStart) has a logical id ending in a hash of the function's code and configuration
  (``...CurrentVersion`` + 8 hex + 32 hex), which moves with the asset hash.
- **Asset metadata** (``aws:asset:path``, ``aws:asset:is-bundled``, ``aws:asset:property``
  in a resource's ``Metadata``): the CDK CLI adds it and an in-process ``app.synth()`` does
  not, and ``is-bundled`` says whether this synth bundled.

Everything else is left as synthesized, so a real change of the stack still fails the
snapshot.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["ASSET_HASH", "VERSION_HASH", "normalize_template"]

#: What an asset hash becomes.
ASSET_HASH = "<asset-hash>"
#: What the code-and-configuration hash of a published version's logical id becomes.
VERSION_HASH = "<version-hash>"

_HASH = re.compile(r"[0-9a-f]{64}")
_VERSION_ID = re.compile(r"(CurrentVersion[0-9A-F]{8})[0-9a-f]{32}")
_ASSET_METADATA = "aws:asset:"


def _mask(text: str) -> str:
    return _VERSION_ID.sub(rf"\1{VERSION_HASH}", _HASH.sub(ASSET_HASH, text))


def _masked(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {_mask(str(k)): _masked(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_masked(v) for v in value]
    if isinstance(value, str):
        return _mask(value)
    return value


def normalize_template(template: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``template`` that is the same on every machine, bundled or not.

    Masks asset hashes as ``<asset-hash>`` and published-version hashes as
    ``<version-hash>`` (in keys and values, so ``Ref`` and ``DependsOn`` follow), and drops
    the ``aws:asset:*`` entries of each resource's ``Metadata`` (and the ``Metadata`` left
    empty by that). ``template`` is not changed.

    :param template: a template as a dict: ``Template.from_stack(stack).to_json()``, or
        ``json.loads`` of a ``cdk.out/<stack>.template.json``.

    Usage with syrupy::

        from syrupy.extensions.json import JSONSnapshotExtension
        from constructs_lib.testing import normalize_template

        def test_stack(snapshot):
            template = Template.from_stack(stack).to_json()
            assert normalize_template(template) == snapshot.use_extension(JSONSnapshotExtension)
    """
    normalized: dict[str, Any] = _masked(template)
    for resource in (normalized.get("Resources") or {}).values():
        metadata = resource.get("Metadata") if isinstance(resource, dict) else None
        if not isinstance(metadata, dict):
            continue
        kept = {k: v for k, v in metadata.items() if not k.startswith(_ASSET_METADATA)}
        if kept:
            resource["Metadata"] = kept
        elif metadata:
            del resource["Metadata"]
    return normalized
