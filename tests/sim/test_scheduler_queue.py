"""kube-scheduler's queue in the twin's scheduler: a pod that failed an attempt is queued again from the time it
failed (PrioritySort's timestamp), and while its backoff lasts (1 s doubling to 10 s, podInitialBackoffSeconds,
podMaxBackoffSeconds) it comes after the pods of the active queue — so a newly created pod can take a freed node ahead
of an older pod in backoff — but it is not kept waiting: the scheduler pops the backoff queue as soon as the active
queue is empty (SchedulerPopFromBackoffQ). A pod that no event woke is retried after 5 minutes."""

from __future__ import annotations

from dataclasses import replace

from gpuscale.sim.cluster import SimCluster
from gpuscale.sim.core import Simulation
from gpuscale.sim.scheduler import UNSCHEDULABLE_FLUSH_S, SimScheduler, backoff_s
from tests.builders import make_pod
from tests.sim.test_scheduler_incremental import node


def test_backoff_doubles_from_one_second_to_ten() -> None:
    assert [backoff_s(n) for n in range(0, 7)] == [0.0, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff_s(100_000) == 10.0  # a pod tried all day long


def _old_pod_failed_twice() -> tuple[Simulation, SimCluster, SimScheduler]:
    """Node a is full; pod old (created at 1 s) fails at 1 s, and again at 2 s when node b (too small) joins: it is
    queued from 2 s, backing off until 4 s."""
    sim, cluster = Simulation(), SimCluster()
    scheduler = SimScheduler(sim, cluster, ["cpu", "memory"])
    cluster.put_node(node("a", 0, ready=True))
    cluster.put_pod(make_pod("fill", cpu="15"))
    sim.run(1.0)
    cluster.put_pod(replace(make_pod("old", cpu="12"), created_s=1.0))
    sim.run(1.5)
    assert scheduler._stamps["default/old"] == (1.0, 1)
    cluster.put_node(node("b", 0, ready=True))
    cluster.put_pod(make_pod("fill-b", cpu="15", node_name="b"))
    sim.run(2.5)
    assert cluster.pods["default/old"].node_name is None
    assert scheduler._stamps["default/old"] == (2.0, 2)
    return sim, cluster, scheduler


def test_a_new_pod_takes_a_freed_node_ahead_of_an_older_pod_in_backoff() -> None:
    sim, cluster, _ = _old_pod_failed_twice()
    cluster.delete_pod("default/fill")  # room on a at 2.5 s; old backs off until 4 s
    cluster.put_pod(replace(make_pod("new", cpu="12"), created_s=sim.now))  # created after old: behind it by age
    sim.run(3.5)
    assert cluster.pods["default/new"].node_name == "a"
    assert cluster.pods["default/old"].node_name is None


def test_backoff_orders_retries_but_does_not_delay_them() -> None:
    sim, cluster, scheduler = _old_pod_failed_twice()
    cluster.delete_pod("default/fill")
    sim.run(3.5)  # nothing else waits: old, still backing off until 4 s, is popped from the backoff queue at 3 s
    assert cluster.pods["default/old"].node_name == "a"
    assert "default/old" not in scheduler._stamps


def test_once_its_backoff_ended_the_older_pod_goes_first() -> None:
    sim, cluster, _ = _old_pod_failed_twice()
    sim.run(6.0)
    cluster.delete_pod("default/fill")
    cluster.put_pod(replace(make_pod("new", cpu="12"), created_s=sim.now))
    sim.run(7.0)
    assert cluster.pods["default/old"].node_name == "a" and cluster.pods["default/new"].node_name is None


def test_a_pod_no_event_woke_is_queued_again_every_five_minutes() -> None:
    sim, cluster, scheduler = _old_pod_failed_twice()
    sim.run(2.0 + 2 * UNSCHEDULABLE_FLUSH_S + 50)
    cluster.put_pod(replace(make_pod("other", cpu="12"), created_s=sim.now))  # same shape: a pass, old is skipped
    sim.run(sim.now + 1)
    assert scheduler._stamps["default/old"] == (2.0 + 2 * UNSCHEDULABLE_FLUSH_S, 4)
