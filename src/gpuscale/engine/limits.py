"""Scale-up limits: how many more nodes of a pool fit under every configured ceiling, and which ceiling binds.

Totals count every node that is not being deleted plus every requested node, so upcoming capacity is never
double-spent. Each limit divides its headroom by what one node of the pool adds: cores and memory by the template's
allocatable (CA counts capacity; allocatable is within a few percent), GPUs by the pool's physical GPU count (per model,
and all models together), cost by its hourly price.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuscale.engine.policy import Limits
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import CPU, MEMORY

UNLIMITED = 10**9


@dataclass(frozen=True, slots=True, kw_only=True)
class Totals:
    """What the cluster holds (and has on order) now, per limit dimension."""

    nodes: int = 0
    cpu_milli: int = 0
    memory_bytes: int = 0
    gpus_by_model: Mapping[str, int] | None = None
    gpus: int = 0
    """Physical GPUs of every model together."""
    usd_per_hour: float = 0.0
    nodes_by_pool: Mapping[str, int] | None = None

    def add(self, pool: NodePool, count: int) -> Totals:
        return self.add_all(((pool, count),))

    def add_all(self, pool_counts: Iterable[tuple[NodePool, int]]) -> Totals:
        """These totals with `count` more nodes of each pool, added in order (one new object, however many pools)."""
        gpus = dict(self.gpus_by_model or {})
        by_pool = dict(self.nodes_by_pool or {})
        nodes, cpu, memory, usd, all_gpus = self.nodes, self.cpu_milli, self.memory_bytes, self.usd_per_hour, self.gpus
        for pool, count in pool_counts:
            if pool.gpu_model:
                gpus[pool.gpu_model] = gpus.get(pool.gpu_model, 0) + pool.gpus_per_node * count
                all_gpus += pool.gpus_per_node * count
            by_pool[pool.name] = by_pool.get(pool.name, 0) + count
            nodes += count
            cpu += pool.allocatable.get(CPU) * count
            memory += pool.allocatable.get(MEMORY) * count
            usd += pool.usd_per_hour * count
        return Totals(nodes=nodes, cpu_milli=cpu, memory_bytes=memory, gpus_by_model=gpus, gpus=all_gpus,
                      usd_per_hour=usd, nodes_by_pool=by_pool)


def totals_of(pool_counts: Iterable[tuple[NodePool | None, int]]) -> Totals:
    """Totals for `count` nodes of each pool; nodes of unknown pools count as nodes only."""
    counts: dict[str, int] = {}
    pools: dict[str, NodePool] = {}
    unknown = 0
    for pool, count in pool_counts:
        if pool is None:
            unknown += count
        else:
            counts[pool.name] = counts.get(pool.name, 0) + count
            pools[pool.name] = pool
    return Totals(nodes=unknown, gpus_by_model={}, nodes_by_pool={}).add_all(
        (pools[name], count) for name, count in counts.items())


@dataclass(frozen=True, slots=True)
class Headroom:
    nodes: int
    binding: str
    """The limit that allows the fewest nodes, in words (`pool max_size 8`, `max_nodes_total 100`, …)."""
    refused_step: int = 0
    """A zero-or-max pool's step to its max size that the limits cut short (`nodes` is then 0), else 0."""


def headroom(pool: NodePool, totals: Totals, limits: Limits, max_per_scale_up: int) -> Headroom:
    """How many nodes of `pool` may still be added, and which limit decides that. A zero-or-max pool
    (`NodePool.zero_or_max`) takes exactly its step to `max_size` or nothing: `nodes` is that step when every limit
    allows it, else 0 (with `refused_step`)."""
    in_pool = (totals.nodes_by_pool or {}).get(pool.name, 0)
    candidates: list[tuple[int, str]] = [
        (pool.max_size - in_pool, f"pool {pool.name} max_size {pool.max_size}"),
        (max_per_scale_up, f"max_nodes_per_scale_up {max_per_scale_up}"),
    ]
    if limits.max_nodes_total is not None:
        candidates.append((limits.max_nodes_total - totals.nodes, f"max_nodes_total {limits.max_nodes_total}"))
    cpu = pool.allocatable.get(CPU)
    if limits.max_cores_total is not None and cpu > 0:
        candidates.append(((limits.max_cores_total * 1000 - totals.cpu_milli) // cpu,
                           f"cores_total {limits.max_cores_total}"))
    memory = pool.allocatable.get(MEMORY)
    if limits.max_memory_bytes_total is not None and memory > 0:
        candidates.append(((limits.max_memory_bytes_total - totals.memory_bytes) // memory,
                           f"memory_total {limits.max_memory_bytes_total} bytes"))
    if pool.gpu_model and pool.gpus_per_node and pool.gpu_model in limits.max_gpus_by_model:
        cap = limits.max_gpus_by_model[pool.gpu_model]
        have = (totals.gpus_by_model or {}).get(pool.gpu_model, 0)
        candidates.append(((cap - have) // pool.gpus_per_node, f"gpu_total {pool.gpu_model} {cap}"))
    if limits.max_gpus_total is not None and pool.gpu_model and pool.gpus_per_node:
        candidates.append(((limits.max_gpus_total - totals.gpus) // pool.gpus_per_node,
                           f"gpu_total {limits.max_gpus_total} (all GPU models)"))
    if limits.max_usd_per_hour is not None and pool.usd_per_hour > 0:
        left = limits.max_usd_per_hour - totals.usd_per_hour
        candidates.append((int(left // pool.usd_per_hour + 1e-9), f"max_usd_per_hour {limits.max_usd_per_hour:g}"))
    nodes, binding = min(candidates, key=lambda c: c[0])
    if pool.zero_or_max and nodes < pool.max_size - in_pool:  # the pool's own max is a candidate: nodes ≤ step
        return Headroom(0, binding, refused_step=pool.max_size - in_pool)
    return Headroom(max(nodes, 0), binding)
