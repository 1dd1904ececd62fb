"""Resolution of the CloudFormation intrinsics a CDK template uses in environments, patterns
and targets (``Ref``, ``Fn::GetAtt``, ``Fn::Join``, pseudo parameters) to local values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import AssemblyError

LOCAL_REGION = "us-east-1"
LOCAL_ACCOUNT = "123456789012"  # moto's default account


@dataclass(frozen=True)
class PhysicalResource:
    """What one template resource is called locally: its ``Ref`` value and its attributes."""

    logical_id: str
    resource_type: str
    ref: str
    attributes: Mapping[str, str] = field(default_factory=dict)


def logical_id_of(value: object) -> str | None:
    """The logical id a ``{"Ref": id}`` or ``{"Fn::GetAtt": [id, attr]}`` points at, else None."""
    if isinstance(value, Mapping) and len(value) == 1:
        if "Ref" in value and isinstance(value["Ref"], str):
            return value["Ref"]
        get_att = value.get("Fn::GetAtt")
        if isinstance(get_att, list) and get_att and isinstance(get_att[0], str):
            return get_att[0]
        if isinstance(get_att, str):
            return get_att.split(".", 1)[0]
    return None


class Resolver:
    """Replaces intrinsics with the values of the local resources.

    ``physical`` maps logical id to :class:`PhysicalResource`. Unsupported intrinsics and
    references to unknown resources raise :class:`AssemblyError` naming where they occur, so
    a template feature the local run does not understand fails loudly instead of silently
    producing a wrong value.
    """

    def __init__(
        self,
        physical: Mapping[str, PhysicalResource],
        *,
        stack_name: str,
        region: str = LOCAL_REGION,
        account: str = LOCAL_ACCOUNT,
    ) -> None:
        self._physical = physical
        self._pseudo = {
            "AWS::Region": region,
            "AWS::AccountId": account,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": stack_name,
            "AWS::NoValue": "",
        }

    def resolve(self, value: Any, where: str = "template") -> Any:
        """Return ``value`` with every intrinsic replaced (recursively)."""
        if isinstance(value, list):
            return [self.resolve(item, f"{where}[{index}]") for index, item in enumerate(value)]
        if not isinstance(value, Mapping):
            return value
        if len(value) == 1:
            ((name, argument),) = value.items()
            if name == "Ref":
                return self._ref(argument, where)
            if name == "Fn::GetAtt":
                return self._get_att(argument, where)
            if name == "Fn::Join":
                delimiter, parts = argument
                return str(delimiter).join(str(part) for part in self.resolve(parts, where))
            if name == "Fn::Select":
                index, items = argument
                return self.resolve(items, where)[int(self.resolve(index, where))]
            if name == "Fn::Split":
                delimiter, text = argument
                return str(self.resolve(text, where)).split(str(delimiter))
            if name.startswith("Fn::"):
                raise AssemblyError(f"{where}: intrinsic {name} is not supported by the local run")
        return {key: self.resolve(item, f"{where}.{key}") for key, item in value.items()}

    def _ref(self, target: str, where: str) -> str:
        if target in self._pseudo:
            return self._pseudo[target]
        resource = self._physical.get(target)
        if resource is None:
            raise AssemblyError(f"{where}: Ref to {target!r}, which is not in the template")
        return resource.ref

    def _get_att(self, argument: object, where: str) -> str:
        if isinstance(argument, str):
            argument = argument.split(".", 1)
        logical_id, attribute = str(argument[0]), str(argument[1])  # type: ignore[index]
        resource = self._physical.get(logical_id)
        if resource is None:
            raise AssemblyError(f"{where}: Fn::GetAtt of {logical_id!r}, not in the template")
        if attribute not in resource.attributes:
            raise AssemblyError(
                f"{where}: Fn::GetAtt {logical_id}.{attribute} is not known locally "
                f"({resource.resource_type} has {sorted(resource.attributes)})"
            )
        return resource.attributes[attribute]
