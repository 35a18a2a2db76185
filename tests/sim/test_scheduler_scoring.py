"""The twin's scheduler scores nodes as kube-scheduler's default profile does for what it models: NodeResourcesFit
(weight 1) plus TaintToleration (weight 3), so pods keep off nodes the autoscaler marked as deletion candidates
(`PreferNoSchedule`) unless they tolerate the mark or no other node fits."""

from __future__ import annotations

from gpuscale.model.node import Node
from gpuscale.model.pod import Pod
from gpuscale.model.resources import PODS, Resources
from gpuscale.model.taints import TaintEffect, Toleration, TolerationOperator
from gpuscale.sim.cluster import SimCluster
from gpuscale.sim.core import Simulation
from gpuscale.sim.scheduler import Scoring, SimScheduler
from tests.builders import make_pod

COLUMNS = ["cpu", "memory"]


def cpu_node(name: str) -> Node:
    allocatable = Resources.of({"cpu": 16_000, "memory": 64 * 2**30, PODS: 110})
    return Node(name=name, allocatable=allocatable, capacity=allocatable, labels={"kubernetes.io/hostname": name})


def run(pods: list[Pod], *, marked: tuple[str, ...] = ("a",), scoring: Scoring = Scoring.LEAST_ALLOCATED,
        filler: str | None = None) -> SimCluster:
    """Nodes a and b (a first in name order), `marked` ones deletion candidates; `filler` fills b to 14 of 16
    CPUs first; then `pods` are scheduled one pass each."""
    sim, cluster = Simulation(), SimCluster()
    SimScheduler(sim, cluster, COLUMNS, scoring)
    for name in ("a", "b"):
        cluster.put_node(cpu_node(name))
    if filler is not None:
        cluster.put_pod(make_pod(filler, cpu="14", memory="1Gi", node="b"))
    for name in marked:
        cluster.set_deletion_candidate(name, 0.0)
    for pod in pods:
        cluster.put_pod(pod)
        sim.run(sim.now + 1)
    return cluster


def node_of(cluster: SimCluster, name: str) -> str | None:
    return cluster.pods[f"default/{name}"].node_name


def test_a_pod_keeps_off_a_deletion_candidate() -> None:
    assert node_of(run([make_pod("x", cpu="1")], marked=()), "x") == "a"  # unmarked: ties go to the first name
    assert node_of(run([make_pod("x", cpu="1")]), "x") == "b"
    assert node_of(run([make_pod("x", cpu="1")], marked=("b",)), "x") == "a"


def test_the_mark_outweighs_free_room_under_any_resource_scoring() -> None:
    """TaintToleration's weight 3 × 100 is more than NodeResourcesFit's whole 0–100 range: b, 14/16 CPUs used, wins
    over an empty candidate under least-allocated, as it does under most-allocated."""
    for scoring in (Scoring.LEAST_ALLOCATED, Scoring.MOST_ALLOCATED):
        assert node_of(run([make_pod("x", cpu="1")], filler="big", scoring=scoring), "x") == "b"
    assert node_of(run([make_pod("x", cpu="1")], marked=(), filler="big"), "x") == "a"
    assert node_of(run([make_pod("x", cpu="1")], marked=(), filler="big", scoring=Scoring.MOST_ALLOCATED),
                   "x") == "b"


def test_a_pod_that_tolerates_the_mark_scores_as_if_unmarked() -> None:
    tolerant = (Toleration(key="DeletionCandidateOfClusterAutoscaler", operator=TolerationOperator.EXISTS,
                           effect=TaintEffect.PREFER_NO_SCHEDULE),)
    assert node_of(run([make_pod("x", cpu="1", tolerations=tolerant)]), "x") == "a"


def test_a_candidate_still_takes_pods_that_fit_nowhere_else() -> None:
    cluster = run([make_pod("x", cpu="3")], filler="big")  # b has 2 CPUs left: only the candidate fits
    assert node_of(cluster, "x") == "a"


def test_candidates_with_fewer_marks_win() -> None:
    """Counts are normalised over the feasible nodes: with both marked, the mark no longer separates them."""
    assert node_of(run([make_pod("x", cpu="1")], marked=("a", "b")), "x") == "a"
    assert node_of(run([make_pod("x", cpu="1")], marked=("a", "b"), filler="big"), "x") == "a"
