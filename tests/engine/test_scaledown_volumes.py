"""Scale-down with volumes: a pod moves only where its claims allow (VolumeBinding, VolumeZone,
VolumeRestrictions), and the verdict of a node kept names the claim that keeps its pod there."""

from __future__ import annotations

from dataclasses import replace

from gpuscale.engine.reasons import ReasonCode
from gpuscale.engine.scaledown import ScaleDownResult
from gpuscale.engine.whatif.rows import whatif_of
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod
from gpuscale.model.selectors import NodeSelectorTerm, Requirement, SelectorOperator
from gpuscale.model.volumes import PersistentVolume, PersistentVolumeClaim, PodClaim, Storage
from tests.engine.test_scaledown import node, pod, removed, run

ZONE = "topology.kubernetes.io/zone"


def _zoned(name: str, zone: str) -> Node:
    base = node(name)
    return replace(base, labels={**base.labels, ZONE: zone})


def _storage(zone: str, rwop: bool = False) -> Storage:
    affinity = (NodeSelectorTerm(match_expressions=(Requirement(key=ZONE, operator=SelectorOperator.IN,
                                                                values=(zone,)),)),)
    modes = frozenset({"ReadWriteOncePod" if rwop else "ReadWriteOnce"})
    return Storage(volumes=(PersistentVolume(name="pv", capacity=2**30, access_modes=modes, node_affinity=affinity,
                                             claim="default/data", phase="Bound"),),
                   claims=(PersistentVolumeClaim(namespace="default", name="data", volume_name="pv",
                                                 bind_completed=True, access_modes=modes, phase="Bound"),))


def _with_claim(p: Pod) -> Pod:
    return replace(p, constraints=replace(p.constraints, claims=(PodClaim("default", "data"),)))


def _run(nodes: list[Node], pods: list[Pod], storage: Storage) -> ScaleDownResult:
    table = whatif_of(nodes, [n.allocatable for n in nodes], pods, storage=storage)
    return run(nodes, pods, table=table)


def test_a_pod_moves_only_to_a_node_in_its_volumes_zone() -> None:
    nodes = [_zoned("a", "z1"), _zoned("b", "z2"), _zoned("c", "z1")]
    pods = [_with_claim(pod("db", "a")), pod("busy-b", "b", cpu="3"), pod("busy-c", "c", cpu="3950m")]
    kept = _run(nodes, pods, _storage("z1"))
    # c (z1) has no room left, b has room but is in z2: a stays, and the verdict names the claim and why
    assert removed(kept) == []
    (verdict,) = [v for v in kept.blocked if v.node == "a"]
    message = verdict.reasons[0].message
    assert verdict.reasons[0].code is ReasonCode.NO_PLACE_TO_MOVE
    assert "default/data" in message and "node(s) didn't match PersistentVolume's node affinity" in message
    assert "can move elsewhere" not in " ".join(r.message for r in verdict.reasons)
    # room in zone z1: a goes, its pod to c
    freed = [p if p.name != "busy-c" else pod("busy-c", "c", cpu="3") for p in pods]
    assert removed(_run(nodes, freed, _storage("z1"))) == ["a"]


def test_a_read_write_once_pod_claim_moves_with_its_pod() -> None:
    """The pod leaves its node first: its ReadWriteOncePod claim is not in use by itself elsewhere."""
    nodes = [_zoned("a", "z1"), _zoned("c", "z1")]
    pods = [_with_claim(pod("db", "a")), pod("busy-c", "c", cpu="3")]
    assert "a" in removed(_run(nodes, pods, _storage("z1", rwop=True)))
