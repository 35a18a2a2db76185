"""A claim's device constraints as kube-scheduler v1.37's allocator keeps them while it searches: `matchAttribute`
(every device of the named requests has the same value of the attribute) and `distinctAttribute` (consumable
capacity, on by default: values differ). A device without the attribute breaks either. Both are monotonic: once a
device is refused, adding more cannot help, so the search backtracks. `requests` empty means every request of the
claim; a name matches a request, or `request/subrequest` one subrequest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from gpuscale.engine.dra.pools import DeviceId
from gpuscale.model.dra import AttributeValue, Device, DeviceConstraint, Version


class Constraint(Protocol):
    def add(self, request: str, sub: str, device: Device, device_id: DeviceId) -> bool:
        """Whether the device keeps the constraint; if so it counts from now on."""
        ...

    def remove(self, request: str, sub: str, device: Device, device_id: DeviceId) -> None:
        """Undo one successful `add` with the same arguments."""
        ...


def _same(a: AttributeValue, b: AttributeValue) -> bool:
    """Equal values of the same type (versions as text, as kube compares them)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, Version) and isinstance(b, Version):
        return a.text == b.text
    return a == b


def _applies(requests: frozenset[str], request: str, sub: str) -> bool:
    if not requests:
        return True
    return request in requests or (bool(sub) and f"{request}/{sub}" in requests)


@dataclass(slots=True)
class MatchAttribute:
    requests: frozenset[str]
    attribute: str
    value: AttributeValue | None = None
    devices: int = 0

    def add(self, request: str, sub: str, device: Device, device_id: DeviceId) -> bool:
        if not _applies(self.requests, request, sub):
            return True
        value = device.attributes.get(self.attribute)
        if value is None:
            return False
        if self.devices == 0:
            self.value = value
        elif self.value is None or not _same(value, self.value):
            return False
        self.devices += 1
        return True

    def remove(self, request: str, sub: str, device: Device, device_id: DeviceId) -> None:
        if _applies(self.requests, request, sub):
            self.devices -= 1


@dataclass(slots=True)
class DistinctAttribute:
    requests: frozenset[str]
    attribute: str
    values: list[AttributeValue] = field(default_factory=list)
    """The values of the devices added, in order (removals undo the last add)."""

    def add(self, request: str, sub: str, device: Device, device_id: DeviceId) -> bool:
        if not _applies(self.requests, request, sub):
            return True
        value = device.attributes.get(self.attribute)
        if value is None or any(_same(value, held) for held in self.values):
            return False
        self.values.append(value)
        return True

    def remove(self, request: str, sub: str, device: Device, device_id: DeviceId) -> None:
        if _applies(self.requests, request, sub):
            self.values.pop()


class ConstraintError(ValueError):
    """A constraint of a kind the allocator does not know (kube refuses the claim)."""


def constraint_for(claim: str, index: int, constraint: DeviceConstraint) -> Constraint:
    requests = frozenset(constraint.requests)
    if constraint.match_attribute is not None:
        return MatchAttribute(requests, constraint.match_attribute)
    if constraint.distinct_attribute is not None:
        return DistinctAttribute(requests, constraint.distinct_attribute)
    raise ConstraintError(f"claim {claim}, constraint #{index}: empty constraint (unsupported constraint type?)")
