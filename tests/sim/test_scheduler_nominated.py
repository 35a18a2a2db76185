"""Nominations in the twin's scheduler (`status.nominatedNodeName`, written by the autoscaler, D50): the nominated
node is tried first and taken when it fits; while the nomination stands, the pods of the same or a lower priority
see that node without the nominated pod's room, higher-priority pods with it (kube-scheduler's
`RunFilterPluginsWithNominatedPods`); a failed attempt clears the nomination (kube-scheduler does, when preemption
finds no victims) and the room is free from the next attempt on."""

from __future__ import annotations

from dataclasses import replace

from gpuscale.model.pod import Pod
from gpuscale.sim.cluster import SimCluster
from gpuscale.sim.core import Simulation
from gpuscale.sim.scheduler import SimScheduler
from tests.builders import make_pod
from tests.sim.test_scheduler_incremental import node


def _scheduler() -> tuple[Simulation, SimCluster, SimScheduler]:
    sim, cluster = Simulation(), SimCluster()
    return sim, cluster, SimScheduler(sim, cluster, ["cpu", "memory"])


def _pending(cluster: SimCluster, pod: Pod, at: float, nominated: str | None = None) -> None:
    cluster.put_pod(replace(pod, created_s=at))
    if nominated is not None:
        assert cluster.nominate(pod.key, nominated)


def test_the_nominated_node_is_taken_over_the_one_the_scoring_prefers() -> None:
    sim, cluster, _ = _scheduler()
    for name in ("a", "b"):
        cluster.put_node(node(name, 0, ready=True))
    _pending(cluster, make_pod("scored", cpu="2"), 0.0)
    sim.run(1.0)
    preferred = cluster.pods["default/scored"].node_name
    other = "b" if preferred == "a" else "a"
    assert preferred in ("a", "b")
    cluster.delete_pod("default/scored")
    _pending(cluster, make_pod("nominated", cpu="2"), sim.now, nominated=other)
    sim.run(2.0)
    assert cluster.pods["default/nominated"].node_name == other


def _held(other_priority: int) -> tuple[SimCluster, SimScheduler]:
    """Node a (16 CPUs) is Ready, its GPU not registered yet; a 1-GPU, 12-CPU pod is nominated to it, and an older
    12-CPU pod of `other_priority` (the nominated pod has 0) is tried first when its priority is not lower."""
    sim, cluster, scheduler = _scheduler()
    cluster.put_node(node("a", 1, ready=True, registered=False))
    _pending(cluster, make_pod("other", cpu="12", priority=other_priority), 0.0)
    _pending(cluster, make_pod("gpu", cpu="12", gpus=1), 0.5, nominated="a")
    sim.run(1.0)
    return cluster, scheduler


def test_a_pod_of_the_same_priority_cannot_take_the_room_held_for_a_nominated_pod() -> None:
    cluster, _ = _held(0)
    assert cluster.pods["default/other"].node_name is None


def test_a_higher_priority_pod_sees_the_node_without_the_nomination() -> None:
    cluster, _ = _held(10)
    assert cluster.pods["default/other"].node_name == "a"


def test_a_failed_attempt_clears_the_nomination_and_the_next_event_gives_the_room_to_the_older_pod() -> None:
    """The race D50's loop answers by writing the nomination again: the GPUs register, both pods are tried, oldest
    first, and nothing holds the room any more."""
    cluster, scheduler = _held(0)
    gpu = cluster.pods["default/gpu"]
    assert gpu.node_name is None and gpu.unschedulable and gpu.nominated_node is None  # no GPU registered on a yet
    assert not scheduler._nominated
    cluster.put_node(node("a", 1, ready=True))
    scheduler._sim.run(3.0)
    assert cluster.pods["default/other"].node_name == "a" and cluster.pods["default/gpu"].node_name is None


def test_nominate_writes_only_on_a_pending_pod_not_nominated_yet() -> None:
    _, cluster, _ = _scheduler()
    cluster.put_node(node("a", 0, ready=True))
    cluster.put_pod(make_pod("bound", node="a"))
    cluster.put_pod(make_pod("waiting"))
    assert not cluster.nominate("default/bound", "a")
    assert not cluster.nominate("default/missing", "a")
    assert cluster.nominate("default/waiting", "a")
    assert not cluster.nominate("default/waiting", "b")  # nominated already: as KubeWriter's precondition
    assert not cluster.clear_nomination("default/waiting", "b")  # not nominated there
    assert cluster.pods["default/waiting"].nominated_node == "a"
    assert cluster.clear_nomination("default/waiting", "a")
    assert cluster.pods["default/waiting"].nominated_node is None
