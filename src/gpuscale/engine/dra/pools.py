"""The resource pools one node may allocate from, as kube-scheduler v1.37's structured allocator gathers them
(k8s.io/dynamic-resource-allocation/structured, `GatherPools`, the implementation its default features select).

A node's slices are those naming it plus those whose node selector or `allNodes` serves it (or, with per-device node
selection, any of whose devices does). They are grouped by (driver, pool), the newest generation among them kept. A
pool is complete when the node sees all `resourceSliceCount` slices of that generation, or when the cluster holds
them all (the rest serve other nodes: they count for shared counters); a pool whose generation is not the cluster's
newest is obsolete and skipped; otherwise it is incomplete (devices not allocated from it; a request for "All" devices
fails on it). A pool is invalid when two of its device slices publish the same device name, or a device consumes a
counter its pool does not declare. Pools are ordered by driver then pool name, those with binding conditions last;
slices by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuscale.model.dra import Device, Dra, ResourceSlice, device_serves

DeviceId = tuple[str, str, str]
"""`DeviceID`: driver, pool, device name."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """A device a node may be given, where it was published."""

    id: DeviceId
    device: Device
    slice: ResourceSlice
    pool: GatheredPool = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class GatheredPool:
    driver: str
    name: str
    slices: tuple[ResourceSlice, ...] = ()
    """The pool's device slices that serve the node, by name."""
    others: tuple[ResourceSlice, ...] = ()
    """Its device slices serving other nodes (their allocated devices consume shared counters too)."""
    counters: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """Shared counter sets: name → counter → milli-units available in total."""
    incomplete: bool = False
    invalid: str | None = None

    @property
    def pool_id(self) -> str:
        """`PoolID` as the allocator's messages print it."""
        return f"{self.driver}/{self.name}"


def gather_pools(dra: Dra, node_name: str, labels: Mapping[str, str]) -> tuple[GatheredPool, ...]:
    """The pools of the slices serving the node, in the allocator's order."""
    grouped: dict[tuple[str, str], list[ResourceSlice]] = {}
    for s in dra.slices_for_node(node_name, labels):
        held = grouped.get(key := (s.driver, s.pool.name))
        if held is None or s.pool.generation > held[0].pool.generation:
            grouped[key] = [s]
        elif s.pool.generation == held[0].pool.generation:
            held.append(s)
    plain: list[GatheredPool] = []
    binding: list[GatheredPool] = []
    for (driver, name), held in sorted(grouped.items()):
        pool = _pool(dra, driver, name, held)
        if pool is None:
            continue
        has_binding = any(d.binding_conditions for s in pool.slices for d in s.devices)
        (binding if has_binding else plain).append(pool)
    return tuple(plain + binding)


def _pool(dra: Dra, driver: str, name: str, held: list[ResourceSlice]) -> GatheredPool | None:
    """The pool built from the node's slices, or None when it is obsolete."""
    generation, count = held[0].pool.generation, held[0].pool.resource_slice_count
    every: tuple[ResourceSlice, ...] = tuple(held)
    if len(held) != count:
        newest = dra.pool(driver, name)
        if newest is None or newest.generation > generation:
            return None
        if not newest.complete:
            return GatheredPool(driver=driver, name=name, incomplete=True)
        every = newest.slices
    mine = {s.name for s in held}
    devices = tuple(sorted((s for s in held if not s.shared_counters), key=lambda s: s.name))
    others = tuple(s for s in every if s.name not in mine and not s.shared_counters)
    counters: dict[str, Mapping[str, int]] = {}
    for s in every:
        for counter_set in s.shared_counters:
            counters[counter_set.name] = counter_set.counters
    problem = _invalid(devices, others, counters)
    return GatheredPool(driver=driver, name=name, slices=devices, others=others, counters=counters, invalid=problem)


def _invalid(devices: tuple[ResourceSlice, ...], others: tuple[ResourceSlice, ...],
             counters: Mapping[str, Mapping[str, int]]) -> str | None:
    seen: set[str] = set()
    for s in devices:
        for d in s.devices:
            if d.name in seen:
                return f"duplicate device name {d.name}"
            seen.add(d.name)
    for s in devices + others:
        for d in s.devices:
            for consumption in d.consumes_counters:
                known = counters.get(consumption.counter_set)
                if known is None:
                    return f"device {d.name} consumes counters of unknown counter set {consumption.counter_set}"
                missing = sorted(set(consumption.counters) - set(known))
                if missing:
                    return f"device {d.name} consumes unknown counter {missing[0]} of set {consumption.counter_set}"
    return None


def candidates(pools: tuple[GatheredPool, ...], node_name: str,
               labels: Mapping[str, str]) -> tuple[Candidate, ...]:
    """The devices of the complete, valid pools in the allocator's search order; a device of a per-device node
    selection slice only when it serves the node."""
    found: list[Candidate] = []
    for pool in pools:
        if pool.incomplete or pool.invalid is not None:
            continue
        for s in pool.slices:
            for d in s.devices:
                if s.per_device_node_selection and not device_serves(d, node_name, labels):
                    continue
                found.append(Candidate(id=(pool.driver, pool.name, d.name), device=d, slice=s, pool=pool))
    return tuple(found)
