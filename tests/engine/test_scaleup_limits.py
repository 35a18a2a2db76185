"""Limit totals: `totals_of` and `Totals.add_all` add nodes of many pools in one pass; the totals equal what adding one
pool at a time by hand gives, the hourly price summed in the same order (the same floats)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.limits import Totals, totals_of
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import CPU, MEMORY, NVIDIA_GPU, Resources

POOLS = (
    NodePool(name="cpu", allocatable=Resources.of(cpu=8000, memory=2**35, pods=110), usd_per_hour=0.38),
    NodePool(name="t4", allocatable=Resources.of({"cpu": 16_000, "memory": 2**36, NVIDIA_GPU: 1}), gpu_model="t4",
             gpus_per_node=1, usd_per_hour=0.526),
    NodePool(name="a100", allocatable=Resources.of({"cpu": 96_000, "memory": 2**39, NVIDIA_GPU: 8}),
             gpu_model="a100", gpus_per_node=8, usd_per_hour=32.77),
    NodePool(name="t4-spot", allocatable=Resources.of({"cpu": 16_000, NVIDIA_GPU: 1}), gpu_model="t4",
             gpus_per_node=1, usd_per_hour=0.1578),
)


def by_hand(pool_counts: list[tuple[NodePool | None, int]]) -> Totals:
    """One pool at a time, pools in first-seen order with their counts summed, unknown pools as nodes only."""
    counts: dict[str, tuple[NodePool, int]] = {}
    unknown = 0
    for pool, count in pool_counts:
        if pool is None:
            unknown += count
        else:
            counts[pool.name] = (pool, counts.get(pool.name, (pool, 0))[1] + count)
    nodes, cpu, memory, usd = unknown, 0, 0, 0.0
    gpus: dict[str, int] = {}
    by_pool: dict[str, int] = {}
    for pool, count in counts.values():
        nodes += count
        cpu += pool.allocatable.get(CPU) * count
        memory += pool.allocatable.get(MEMORY) * count
        usd = usd + pool.usd_per_hour * count
        if pool.gpu_model:
            gpus[pool.gpu_model] = gpus.get(pool.gpu_model, 0) + pool.gpus_per_node * count
        by_pool[pool.name] = by_pool.get(pool.name, 0) + count
    return Totals(nodes=nodes, cpu_milli=cpu, memory_bytes=memory, gpus_by_model=gpus, gpus=sum(gpus.values()),
                  usd_per_hour=usd, nodes_by_pool=by_pool)


pairs = st.lists(st.tuples(st.sampled_from((*POOLS, None)), st.integers(0, 40)), max_size=12)


@settings(max_examples=200, deadline=None)
@given(pairs, pairs)
def test_totals_equal_pools_added_one_at_a_time(first: list[tuple[NodePool | None, int]],
                                                then: list[tuple[NodePool | None, int]]) -> None:
    totals = totals_of(first)
    assert totals == by_hand(first)
    assert totals.usd_per_hour.hex() == by_hand(first).usd_per_hour.hex()
    known = [(p, c) for p, c in then if p is not None]
    stepwise = totals
    for pool, count in known:
        stepwise = stepwise.add(pool, count)
    assert totals.add_all(known) == stepwise
    assert totals_of(first + known).nodes == stepwise.nodes
