"""The hindsight bound: per pool, ceil(GPUs in use / GPUs per node) nodes at every moment, integrated.

Hand-checked cases on the step function and through the twin's world (pods bound and completed at known times), a
property against a brute-force integral, and a whole twin run: allocated ≤ bound ≤ provisioned in every pool."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.model.pod import Pod
from gpuscale.sim.cloud import CloudPool, NodeTimeline, SimCloud
from gpuscale.sim.cluster import SimCluster
from gpuscale.sim.core import Priority, Simulation
from gpuscale.sim.hindsight import HindsightBound, nodes_needed
from gpuscale.sim.profiles import PROFILES
from gpuscale.sim.run import simulate
from gpuscale.sim.scenario import load_scenario, policy_named
from gpuscale.sim.scheduler import SimScheduler
from gpuscale.sim.world import World
from tests.builders import make_node, make_pod
from tests.sim.test_twin import a100_pool

H = 3600.0


def test_nodes_needed_rounds_up_and_ignores_rounding_noise() -> None:
    assert [nodes_needed(u, 8) for u in (0.0, 0.5, 1.0, 8.0, 8.5, 16.0, 17.0)] == [0, 1, 1, 1, 2, 2, 3]
    assert nodes_needed(0.1 + 0.2 - 0.3, 1) == 0  # 5.6e-17 left over: no node
    assert nodes_needed(8 * (0.1 + 0.2) / 0.3, 8) == 1  # 8.000000000000002 is 8


def test_two_pods_on_one_eight_gpu_pool() -> None:
    """A: 2 GPUs over [0 h, 1 h); B: 4 GPUs over [0.5 h, 1.5 h). In use 2, 6, 4: one 8-GPU node throughout, so the
    bound is 8 × 1.5 = 12 GPU-h while allocated is 2 + 4 = 6 GPU-h."""
    bound = HindsightBound({"a100": 8})
    bound.change("a100", 2, 0.0)
    bound.change("a100", 4, 0.5 * H)
    bound.change("a100", -2, 1.0 * H)
    bound.change("a100", -4, 1.5 * H)
    assert bound.gpu_seconds(2 * H) == {"a100": 12 * H}


def test_overlap_past_one_node_needs_two() -> None:
    """A: 8 GPUs over [0, 1 h); B: 4 GPUs over [0.5 h, 1.5 h): 8, 12, 4 in use → 1, 2, 1 nodes → 4 + 8 + 4 = 16."""
    bound = HindsightBound({"a100": 8, "t4": 1})
    bound.change("a100", 8, 0.0)
    bound.change("a100", 4, 0.5 * H)
    bound.change("t4", 1, 0.5 * H)
    bound.change("a100", -8, 1.0 * H)
    assert bound.gpu_seconds(1.5 * H) == {"a100": 16 * H, "t4": 1 * H}  # the t4 pod still runs: counted to `now`


def test_a_pool_without_a_shape_counts_what_is_in_use() -> None:
    bound = HindsightBound({})
    bound.change("unknown", 1.5, 0.0)
    assert bound.gpu_seconds(H) == {"unknown": 1.5 * H}


def _world() -> tuple[Simulation, World]:
    sim = Simulation()
    cluster = SimCluster()
    cloud = SimCloud(sim, cluster, {"a100": CloudPool(pool=a100_pool("a100", "zone-a"),
                                                      profile=PROFILES["gpu-large"])}, np.random.default_rng(3))
    world = World(sim=sim, cluster=cluster, scheduler=SimScheduler(sim, cluster, ["cpu", "nvidia.com/gpu"]),
                  cloud=cloud, rng=np.random.default_rng(3))
    cloud._by_node["n1"] = NodeTimeline(pool="a100", request_id="a100-00001", requested_s=0.0, node="n1")
    return sim, world


def test_the_world_integrates_the_bound_where_it_integrates_allocated() -> None:
    """Pods bound and completed at known times on an 8-GPU node: the same case as `test_two_pods_on_one_eight_gpu_pool`,
    through `World.bound` and `World.complete_pod`."""
    sim, world = _world()
    node = make_node("n1", gpus=8)
    spans = {"a": (2, 0.0, 1.0 * H), "b": (4, 0.5 * H, 1.5 * H)}
    def bind(pod: Pod) -> None:
        world.cluster.put_pod(replace(pod, node_name="n1"))
        world.bound(pod, node)

    for key, (gpus, start, end) in spans.items():
        pod = make_pod(key, gpus=gpus)
        world.metrics.created(pod, 0.0)
        sim.at(start, Priority.WORKLOAD, partial(bind, pod))
        sim.at(end, Priority.WORKLOAD, partial(world.complete_pod, pod.key))
    sim.run(2 * H)
    assert world.metrics.allocated_gpu_seconds == {"a100": 6 * H}
    assert world.metrics.hindsight.gpu_seconds(sim.now) == {"a100": 12 * H}


SPANS = st.lists(st.tuples(st.sampled_from((0.5, 1, 2, 4, 8)), st.integers(0, 100), st.integers(1, 100)),
                 max_size=12)


@settings(max_examples=200, deadline=None)
@given(spans=SPANS, per_node=st.sampled_from((1, 2, 8)))
def test_the_bound_is_the_integral_of_the_node_hull_and_never_below_allocated(
        spans: list[tuple[float, int, int]], per_node: int) -> None:
    """Against a brute force over unit time steps; allocated ≤ bound, and bound ≤ allocated + one node's GPUs over
    the time anything runs (the rounding up costs at most one partly filled node)."""
    bound = HindsightBound({"p": per_node})
    changes = sorted([(start, gpus) for gpus, start, _ in spans]
                     + [(start + length, -gpus) for gpus, start, length in spans], key=lambda c: c[0])
    for t, delta in changes:
        bound.change("p", delta, float(t))
    got = bound.gpu_seconds(300.0).get("p", 0.0)
    in_use = [sum(g for g, s, n in spans if s <= t < s + n) for t in range(300)]
    assert got == pytest.approx(sum(math.ceil(u / per_node) * per_node for u in in_use))
    allocated = sum(g * n for g, _, n in spans)
    busy = sum(1 for u in in_use if u > 0)
    assert allocated - 1e-9 <= got <= allocated + per_node * busy + 1e-9


@pytest.mark.parametrize("seed", [1, 2])
def test_a_twin_run_puts_the_bound_between_allocated_and_provisioned(seed: int) -> None:
    setup, config = load_scenario("default", seed=seed)
    short = replace(setup, duration_s=4 * H, jobs=tuple(j for j in setup.jobs if j.submit_s < 4 * H))
    result = simulate(short, policy_named("gpuscale", config))
    assert result.gpu_hours_allocated > 0
    for pool, hours in result.gpu_hours_by_pool.items():
        assert hours["allocated"] - 1e-9 <= hours["hindsight_bound"] <= hours["provisioned"] + 1e-9, pool
    assert result.gpu_hours_hindsight_bound == pytest.approx(
        sum(h["hindsight_bound"] for h in result.gpu_hours_by_pool.values()))
    assert result.efficiency is not None and result.hindsight_efficiency is not None
    assert result.efficiency <= result.hindsight_efficiency <= 1.0 + 1e-12
