"""A cluster snapshot: the nodes, pods and budgets one decision reads, with the indexes every decision needs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuscale.model.node import Node
from gpuscale.model.pdb import PodDisruptionBudget
from gpuscale.model.pod import Pod
from gpuscale.model.resources import Resources


@dataclass(frozen=True, slots=True, kw_only=True)
class PodGroupSpec:
    """A gang's declared size from a PodGroup object (Volcano or coscheduling); `key` is `namespace/name`."""

    key: str
    min_member: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Cluster:
    nodes: tuple[Node, ...] = ()
    pods: tuple[Pod, ...] = ()
    pdbs: tuple[PodDisruptionBudget, ...] = ()
    pod_groups: tuple[PodGroupSpec, ...] = ()
    other_kinds: Mapping[str, int] = field(default_factory=dict)
    """Objects of kinds gpuscale does not read, counted by kind: kept visible, never silently dropped."""

    def pods_by_node(self) -> dict[str, list[Pod]]:
        """Pods that hold capacity, per node name (bound and not Succeeded/Failed)."""
        by_node: dict[str, list[Pod]] = {n.name: [] for n in self.nodes}
        for pod in self.pods:
            if pod.node_name is not None and not pod.is_terminal():
                by_node.setdefault(pod.node_name, []).append(pod)
        return by_node

    def requested_by_node(self) -> dict[str, Resources]:
        return {name: sum((p.requests for p in pods), Resources()) for name, pods in self.pods_by_node().items()}

    def pending_pods(self) -> tuple[Pod, ...]:
        """Pods not bound to any node and not finished, in input order."""
        return tuple(p for p in self.pods if p.node_name is None and not p.is_terminal() and not p.deleting)
