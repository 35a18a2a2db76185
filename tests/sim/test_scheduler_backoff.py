"""kube-scheduler's backoff queue in the twin's scheduler: a pod whose attempt failed waits 1 s, doubling to 10 s
(podInitialBackoffSeconds, podMaxBackoffSeconds), before it is tried again, so a newly created pod can take a freed
node ahead of an older pod still backing off; once its backoff ends, the older pod is tried at once."""

from __future__ import annotations

from dataclasses import replace

from gpuscale.sim.cluster import SimCluster
from gpuscale.sim.core import Simulation
from gpuscale.sim.scheduler import SimScheduler, backoff_s
from tests.builders import make_pod
from tests.sim.test_scheduler_incremental import node


def test_backoff_doubles_from_one_second_to_ten() -> None:
    assert [backoff_s(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff_s(100_000) == 10.0  # a pod tried all day long


def test_a_new_pod_takes_a_freed_node_ahead_of_an_older_pod_in_backoff() -> None:
    sim, cluster = Simulation(), SimCluster()
    SimScheduler(sim, cluster, ["cpu", "memory"])
    cluster.put_node(node("a", 0, ready=True))
    cluster.put_pod(make_pod("fill", cpu="15"))
    sim.run(1.0)
    cluster.put_pod(replace(make_pod("old", cpu="12"), created_s=1.0))  # fails at 1 s: backoff until 2 s
    sim.run(2.0)
    cluster.put_pod(make_pod("other", cpu="17"))  # an event at 2 s: old is tried again and fails, backoff until 4 s
    sim.run(2.5)
    assert cluster.pods["default/old"].node_name is None and cluster.pods["default/old"].unschedulable
    cluster.delete_pod("default/fill")
    # created later, same priority: behind old in PrioritySort
    cluster.put_pod(replace(make_pod("new", cpu="12"), created_s=sim.now))
    sim.run(3.5)
    assert cluster.pods["default/new"].node_name == "a"
    assert cluster.pods["default/old"].node_name is None
    cluster.delete_pod("default/new")  # room again at 3.5 s; old is still backing off until 4 s
    sim.run(3.9)
    assert cluster.pods["default/old"].node_name is None
    sim.run(4.0)
    assert cluster.pods["default/old"].node_name == "a"  # tried when its backoff ends, no other event needed


def test_without_backoff_the_older_pod_goes_first() -> None:
    sim, cluster = Simulation(), SimCluster()
    SimScheduler(sim, cluster, ["cpu", "memory"])
    cluster.put_node(node("a", 0, ready=True))
    cluster.put_pod(make_pod("fill", cpu="15"))
    sim.run(1.0)
    cluster.put_pod(replace(make_pod("old", cpu="12"), created_s=1.0))  # fails at 1 s: backoff until 2 s
    sim.run(5.5)
    cluster.delete_pod("default/fill")
    cluster.put_pod(replace(make_pod("new", cpu="12"), created_s=sim.now))
    sim.run(6.0)
    assert cluster.pods["default/old"].node_name == "a" and cluster.pods["default/new"].node_name is None
