"""`gpuscale.model.cluster`: the per-node indexes every decision reads."""

from __future__ import annotations

from gpuscale.model.cluster import Cluster
from gpuscale.model.pod import PodPhase
from gpuscale.model.resources import Resources
from tests.builders import make_node, make_pod


def _cluster() -> Cluster:
    return Cluster(
        nodes=(make_node("n1"), make_node("n2")),
        pods=(
            make_pod("run", cpu="1", memory="1Gi", node="n1", phase=PodPhase.RUNNING),
            make_pod("done", cpu="4", memory="1Gi", node="n1", phase=PodPhase.SUCCEEDED),
            make_pod("bound", cpu="500m", memory="0", node="n1"),
            make_pod("ghost", cpu="1", memory="0", node="gone"),  # bound to a node not in the snapshot
            make_pod("pending"),
            make_pod("failed", phase=PodPhase.FAILED),
        ),
    )


def test_pods_by_node_skips_finished_pods_and_keeps_unknown_nodes() -> None:
    by_node = _cluster().pods_by_node()
    assert [p.name for p in by_node["n1"]] == ["run", "bound"]
    assert "n2" not in by_node  # a node without pods has no entry
    assert [p.name for p in by_node["gone"]] == ["ghost"]


def test_requested_by_node_sums_requests() -> None:
    requested = _cluster().requested_by_node()
    assert requested["n1"] == Resources.of(cpu=1500, memory=2**30)
    assert requested["n2"] == Resources()


def test_pending_pods_are_unbound_and_unfinished() -> None:
    assert [p.name for p in _cluster().pending_pods()] == ["pending"]
