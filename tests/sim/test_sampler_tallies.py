"""What the twin's sampler reads every five simulated minutes is kept or gathered in one pass, and must equal the
per-object formulas it replaced to the last bit: the GPUs bound pods hold (`SimCluster.allocated_gpus`, carried pod
by pod as pods come, bind and go) and the cloud's tally (`SimCloud.tally`: cost so far, nodes and GPUs holding
capacity). Float sums are compared by `repr`, so a different order of additions (or an int 0 for a float) fails."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.plan import UpcomingNode
from gpuscale.model.pod import Pod, PodPhase
from gpuscale.model.resources import GPU_MILLI, NVIDIA_GPU
from gpuscale.sim.cloud import CloudPool, SimCloud
from gpuscale.sim.cluster import SimCluster, pod_gpus
from gpuscale.sim.core import Simulation
from gpuscale.sim.profiles import PROFILES
from tests.builders import make_pod
from tests.sim.test_twin import CPU_POOL, a100_pool

MILLI = (0, 100, 250, 333, 700)
"""Fractions whose float sums depend on the order they are added in."""


def fresh_allocated(cluster: SimCluster) -> float:
    """The sampler's formula before the carried sum."""
    return sum(pod_gpus(p.requests) for p in cluster.pods.values() if p.node_name)


def a_pod(i: int, gpus: int, milli: int) -> Pod:
    return make_pod(f"p{i}", gpus=gpus, extra={GPU_MILLI: milli} if milli else None)


step = st.tuples(st.sampled_from(["add", "add", "bind", "run", "unbind", "resize", "delete"]),
                 st.integers(0, 11), st.integers(0, 2), st.sampled_from(MILLI), st.sampled_from(["n0", "n1"]))


@settings(max_examples=150, deadline=None)
@given(st.lists(step, max_size=60))
def test_allocated_gpus_equals_the_sum_over_bound_pods(steps: list[tuple[str, int, int, int, str]]) -> None:
    cluster = SimCluster()
    assert repr(cluster.allocated_gpus()) == repr(fresh_allocated(cluster))
    for op, i, gpus, milli, node in steps:
        key = f"default/p{i}"
        pod = cluster.pods.get(key)
        if op == "add" and pod is None:
            cluster.put_pod(replace(a_pod(i, gpus, milli), node_name=node) if gpus % 2 else a_pod(i, gpus, milli))
        elif pod is None:
            continue
        elif op == "bind" and pod.node_name is None:
            cluster.put_pod(replace(pod, node_name=node))
        elif op == "run":
            cluster.put_pod(replace(pod, phase=PodPhase.RUNNING))
        elif op == "unbind":
            cluster.put_pod(replace(pod, node_name=None))
        elif op == "resize":
            cluster.put_pod(replace(pod, requests=a_pod(i, gpus, milli).requests))
        elif op == "delete":
            cluster.delete_pod(key)
        assert repr(cluster.allocated_gpus()) == repr(fresh_allocated(cluster))
    assert type(cluster.allocated_gpus()) is type(fresh_allocated(cluster))


def test_no_bound_pod_is_an_int_zero_as_the_plain_sum_gives() -> None:
    cluster = SimCluster()
    cluster.put_pod(make_pod("a", extra={GPU_MILLI: 300}))
    assert repr(cluster.allocated_gpus()) == "0"
    cluster.put_pod(make_pod("a", extra={GPU_MILLI: 300}, node="n"))
    assert repr(cluster.allocated_gpus()) == "0.3"
    cluster.put_pod(make_pod("b", gpus=1, node="n"))
    assert cluster.allocated_gpus() == 1.3 and NVIDIA_GPU in dict(cluster.pods["default/b"].requests.items)


def reference_tally(cloud: SimCloud, now: float) -> tuple[object, ...]:
    """`cost_so_far` and the sampler's loop as they were: `_bill` per open timeline, then a second pass."""
    cost, seconds = dict(cloud.cost_by_pool), dict(cloud.gpu_seconds_by_pool)
    for t in cloud.open.values():
        c, g = cloud._bill(t, now, closed=False)
        cost[t.pool] = cost.get(t.pool, 0.0) + c
        seconds[t.pool] = seconds.get(t.pool, 0.0) + g
    counts: dict[str, int] = {}
    gpus = 0.0
    for t in cloud.open.values():
        if t.acquired_s is not None:
            counts[t.pool] = counts.get(t.pool, 0) + 1
            gpus += cloud.pools[t.pool].pool.gpus_per_node
    return repr(list(cost.items())), repr(list(seconds.items())), counts, repr(gpus)


cloud_step = st.tuples(st.sampled_from(["increase", "wait", "wait", "delete", "cancel"]),
                       st.sampled_from(["cpu", "a100"]), st.integers(1, 3), st.floats(1.0, 400.0))


def _apply(sim: Simulation, cloud: SimCloud, op: str, pool: str, count: int, wait_s: float) -> None:
    """One drawn cloud step: order nodes, let time pass, delete live nodes or cancel requests not yet acquired."""
    if op == "increase":
        cloud.increase(pool, count)
    elif op == "wait":
        sim.run(sim.now + wait_s)
    elif op == "delete":
        cloud.delete([t.node for t in cloud.open.values() if t.node is not None][:count])
    elif op == "cancel":
        cloud.cancel([t.request_id for t in cloud.open.values() if t.node is None][:count])


@settings(max_examples=60, deadline=None)
@given(st.lists(cloud_step, max_size=30), st.integers(0, 3))
def test_cloud_tally_equals_billing_each_open_timeline(steps: list[tuple[str, str, int, float]], preload: int) -> None:
    sim = Simulation()
    pools = {"cpu": CloudPool(pool=replace(CPU_POOL, usd_per_hour=0.37), profile=PROFILES["cpu"]),
             "a100": CloudPool(pool=a100_pool("a100", "zone-a"), profile=PROFILES["gpu-large"])}
    cloud = SimCloud(sim, SimCluster(), pools, np.random.default_rng(5))
    cloud.preload("a100", preload)
    for op, pool, count, wait_s in steps:
        _apply(sim, cloud, op, pool, count, wait_s)
        now = sim.now + wait_s / 3
        tally = cloud.tally(now)
        got = (repr(list(tally.cost.items())), repr(list(tally.gpu_seconds.items())), tally.acquired, repr(tally.gpus))
        assert got == reference_tally(cloud, now)
        assert cloud.cost_so_far(now) == (tally.cost, tally.gpu_seconds)


@settings(max_examples=40, deadline=None)
@given(st.lists(cloud_step, max_size=25))
def test_node_pools_handed_out_never_change_and_follow_the_live_nodes(steps: list[tuple[str, str, int, float]]) -> None:
    """The loop keeps `node_pools()` in its snapshot without a copy: the cloud must hand out a new mapping when a node
    registers or goes, and leave every mapping it handed out as it was."""
    sim = Simulation()
    pools = {"cpu": CloudPool(pool=CPU_POOL, profile=PROFILES["cpu"]),
             "a100": CloudPool(pool=a100_pool("a100", "zone-a"), profile=PROFILES["gpu-large"])}
    cloud = SimCloud(sim, SimCluster(), pools, np.random.default_rng(7))
    handed: list[tuple[Mapping[str, str], dict[str, str]]] = []
    for op, pool, count, wait_s in steps:
        _apply(sim, cloud, op, pool, count, wait_s)
        mapping = cloud.node_pools()
        live = {t.node: t.pool for t in cloud.timelines.values() if t.node is not None and t.deleted_s is None}
        assert mapping == live and list(mapping) == list(cloud._live)
        handed.append((mapping, dict(mapping)))
    assert all(m == copy for m, copy in handed)


@settings(max_examples=60, deadline=None)
@given(st.lists(cloud_step, max_size=30), st.integers(0, 2))
def test_upcoming_nodes_are_the_requests_still_starting(steps: list[tuple[str, str, int, float]], preload: int) -> None:
    """`upcoming` hands out the `UpcomingNode` each request got when it was made (not one made again per call): they
    must be, in request order, the open requests not registered yet, with their pool, id and request time."""
    sim = Simulation()
    pools = {"cpu": CloudPool(pool=CPU_POOL, profile=PROFILES["cpu"]),
             "a100": CloudPool(pool=a100_pool("a100", "zone-a"), profile=PROFILES["gpu-large"])}
    cloud = SimCloud(sim, SimCluster(), pools, np.random.default_rng(11))
    cloud.preload("cpu", preload)
    for op, pool, count, wait_s in steps:
        _apply(sim, cloud, op, pool, count, wait_s)
        fresh = tuple(UpcomingNode(pool=t.pool, request_id=t.request_id, requested_s=t.requested_s)
                      for t in cloud.open.values() if t.node is None)
        assert cloud.upcoming() == fresh
