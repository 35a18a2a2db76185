"""Devices already allocated, as kube-scheduler's DynamicResources plugin tracks them for its allocator
(`AllocatedState`): exclusively allocated devices, and the capacity consumed on devices that allow multiple
allocations (shares). Results given by admin access hold nothing."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpuscale.engine.dra.pools import DeviceId
from gpuscale.model.dra import Allocation, ResourceClaim


@dataclass(frozen=True, slots=True, kw_only=True)
class InUse:
    """Devices already allocated (`AllocatedState`): exclusively, and the capacity (milli-units) consumed on devices
    that allow multiple allocations. Claims allocated by admin access take nothing."""

    devices: frozenset[DeviceId] = frozenset()
    shared: Mapping[DeviceId, Mapping[str, int]] = field(default_factory=dict)

    def allocated(self, device: DeviceId) -> bool:
        """`IsDeviceAllocated`: exclusively or as a share."""
        return device in self.devices or device in self.shared

    def plus(self, allocations: Iterable[Allocation]) -> InUse:
        """With what these allocations hold (a pod placed in a what-if)."""
        return _held(allocations, self, 1)

    def minus(self, allocations: Iterable[Allocation]) -> InUse:
        """Without what these allocations hold (their pod moved or removed)."""
        return _held(allocations, self, -1)


def _held(allocations: Iterable[Allocation], start: InUse, sign: int) -> InUse:
    devices = set(start.devices)
    shared = {d: dict(held) for d, held in start.shared.items()}
    for allocation in allocations:
        for result in allocation.devices:
            if result.admin_access:
                continue
            if result.share_id is None:
                (devices.add if sign > 0 else devices.discard)(result.device_id)
                continue
            held = shared.setdefault(result.device_id, {})
            for name, amount in result.consumed_capacity.items():
                held[name] = held.get(name, 0) + sign * amount
            if not any(held.values()):
                del shared[result.device_id]
    return InUse(devices=frozenset(devices), shared=shared)


def in_use(claims: Iterable[ResourceClaim]) -> InUse:
    """What the allocated claims among `claims` hold (admin-access results hold nothing)."""
    return _held((c.allocation for c in claims if c.allocation is not None), InUse(), 1)
