"""kube-scheduler's queue in the twin's scheduler: a pod that failed an attempt is queued again from the time it
failed (PrioritySort's timestamp), and while its backoff lasts (1 s doubling to 10 s, podInitialBackoffSeconds,
podMaxBackoffSeconds) it comes after the pods of the active queue — so a newly created pod can take a freed node ahead
of an older pod in backoff — but it is not kept waiting: the scheduler pops the backoff queue as soon as the active
queue is empty (SchedulerPopFromBackoffQ). A pod that no event woke is retried after 5 minutes."""

from __future__ import annotations

from dataclasses import replace

from gpuscale.model.pod import Pod
from gpuscale.model.resources import NVIDIA_GPU
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


def _gpu_pod(name: str, at: float) -> Pod:
    return replace(make_pod(name, cpu="2", gpus=1), created_s=at)


def test_a_node_turning_ready_before_its_gpus_register_fails_the_waiting_gpu_pods_again() -> None:
    """kube-scheduler's hints queue a pod again when a node whose taints it tolerates turns Ready; with no GPUs
    registered yet the attempt fails, so the pod backs off longer. A node whose taints it does not tolerate leaves it
    where it is."""
    sim, cluster = Simulation(), SimCluster()
    scheduler = SimScheduler(sim, cluster, ["cpu", "memory", NVIDIA_GPU])
    cluster.put_node(node("cpu", 0, ready=True))
    cluster.put_pod(_gpu_pod("old", 0.0))
    sim.run(0.5)
    assert scheduler._stamps["default/old"] == (0.0, 1)
    cluster.put_node(node("g1", 1, ready=True, registered=False))
    sim.run(1.5)
    assert scheduler._stamps["default/old"] == (1.0, 2)
    cluster.put_node(node("t", 1, ready=True, registered=False, tainted=True))
    sim.run(2.5)
    assert scheduler._stamps["default/old"] == (1.0, 2)


def test_the_oldest_pod_of_a_burst_backs_off_longest_and_a_newer_one_takes_the_first_node() -> None:
    """What the real-control-plane replay shows (tests/e2e/test_replay.py): every node of a burst turning Ready fails
    the pods already waiting once more, so when the first node's GPUs register, a pod created later, backing off less,
    is in the active queue and binds there while the oldest is still in the backoff queue."""
    sim, cluster = Simulation(), SimCluster()
    scheduler = SimScheduler(sim, cluster, ["cpu", "memory", NVIDIA_GPU])
    cluster.put_node(node("cpu", 0, ready=True))
    cluster.put_pod(_gpu_pod("old", 0.0))
    sim.run(0.5)
    cluster.put_node(node("g1", 1, ready=True, registered=False))  # old fails at 1 s: 2 failures
    sim.run(2.5)
    cluster.put_pod(_gpu_pod("new", 2.5))  # fails at 3 s: 1 failure
    sim.run(3.5)
    cluster.put_node(node("g2", 1, ready=True, registered=False))  # both fail at 4 s: old backs off 4 s, new 2 s
    sim.run(4.5)
    assert scheduler._stamps["default/old"] == (4.0, 3) and scheduler._stamps["default/new"] == (4.0, 2)
    sim.run(6.5)
    cluster.put_node(node("g1", 1, ready=True))  # GPUs registered at 6.5 s: new's backoff ended, old's lasts to 8 s
    sim.run(7.5)
    assert cluster.pods["default/new"].node_name == "g1"
    assert cluster.pods["default/old"].node_name is None
