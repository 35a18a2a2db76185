"""Keyed draws (common random numbers): a draw depends on the seed and its key, never on what was drawn before, so
policies compared on one scenario meet the same luck for the same node and the same pod."""

from __future__ import annotations

import numpy as np

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
