"""Keyed draws (common random numbers): a draw depends on the seed and its key, never on what was drawn before, so
policies compared on one scenario meet the same luck for the same node and the same pod."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.sim.cloud import CloudPool, SimCloud
from gpuscale.sim.cluster import SimCluster
from gpuscale.sim.core import Simulation
from gpuscale.sim.distributions import Keyed, LogNormal
from gpuscale.sim.profiles import PROFILES
from tests.sim.test_twin import CPU_POOL, a100_pool


def test_a_keyed_draw_ignores_the_draws_before_it_and_depends_on_the_seed() -> None:
    first, second = Keyed(np.random.default_rng(7)), Keyed(np.random.default_rng(7))
    before = [first.uniform("pod", i) for i in range(50)]
    assert second.uniform("pod", 49) == before[49]  # no draws before it here
    assert Keyed(np.random.default_rng(8)).uniform("pod", 49) != before[49]
    assert len(set(before)) == 50 and all(0.0 < u < 1.0 for u in before)


def test_keyed_lognormal_keeps_its_median_and_p90() -> None:
    keyed = Keyed(np.random.default_rng(1))
    dist = LogNormal.from_p90(60.0, 150.0)
    values = np.array([keyed.lognormal(dist, "x", i) for i in range(4000)])
    assert abs(np.median(values) / 60.0 - 1) < 0.06
    assert abs(np.quantile(values, 0.9) / 150.0 - 1) < 0.08


def test_the_kth_node_of_a_pool_boots_alike_whatever_else_was_ordered() -> None:
    def timelines(extra_cpu_nodes: int) -> list[float]:
        sim, cluster = Simulation(), SimCluster()
        pools = {"cpu": CloudPool(pool=CPU_POOL, profile=PROFILES["cpu"]),
                 "a100": CloudPool(pool=a100_pool("a100", "zone-a"), profile=PROFILES["gpu-large"])}
        cloud = SimCloud(sim, cluster, pools, np.random.default_rng(3))
        if extra_cpu_nodes:
            cloud.increase("cpu", extra_cpu_nodes)
        ids = cloud.increase("a100", 2)
        sim.run(3600.0)
        return [t for i in ids for t in (cloud.timelines[i].acquired_s, cloud.timelines[i].gpu_s) if t is not None]

    alone = timelines(0)
    assert len(alone) == 4
    assert timelines(3) == alone


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), median=st.floats(0.01, 1e4), p90_over=st.sampled_from([1.0, 1.5, 4.0, 40.0]),
       floor=st.sampled_from([0.0, 1.0, 50.0]), cap=st.sampled_from([math.inf, 100.0, 5.0]),
       key=st.tuples(st.sampled_from(["start", "pull", "step"]), st.text(max_size=8), st.integers(0, 10**6)))
def test_keyed_lognormal_is_the_distribution_at_the_keyed_normal(seed: int, median: float, p90_over: float,
                                                                 floor: float, cap: float,
                                                                 key: tuple[str, str, int]) -> None:
    """`Keyed.lognormal` writes the draw out; it must give `at(normal(*key))` (the median when sigma is 0) to the bit,
    clipped the same way."""
    keyed = Keyed(np.random.default_rng(seed))
    dist = LogNormal.from_p90(median, median * p90_over, floor=floor, cap=cap)
    want = dist.at(keyed.normal(*key) if dist.sigma else 0.0)
    assert keyed.lognormal(dist, *key) == want
    assert keyed.lognormal(dist, *key[:2]) == dist.at(keyed.normal(*key[:2]) if dist.sigma else 0.0)
