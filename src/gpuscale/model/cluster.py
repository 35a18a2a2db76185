"""A cluster snapshot: the nodes, pods and budgets one decision reads, with the indexes every decision needs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuscale.model.node import Node
from gpuscale.model.pdb import PodDisruptionBudget
from gpuscale.model.pod import TERMINAL_PHASES, Pod
from gpuscale.model.resources import Resources


@dataclass(frozen=True, slots=True, kw_only=True)
class PodGroupSpec:
    """A gang's declared size from a PodGroup object (Volcano or coscheduling); `key` is `namespace/name`."""

    key: str
    min_member: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PodIndex:
    pending: tuple[Pod, ...]
    """Not bound, not finished, not being deleted."""
    placed: tuple[Pod, ...]
    """Bound and not finished: holding their requests on their node."""
    by_node: dict[str, list[Pod]]
    """`placed` per node name; a node with no such pod has no entry (read it with `.get(name, ())`)."""
    pod_affinity: bool = False
    """Some pod (of any phase) has inter-pod affinity or anti-affinity terms."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Cluster:
    nodes: tuple[Node, ...] = ()
    pods: tuple[Pod, ...] = ()
    pdbs: tuple[PodDisruptionBudget, ...] = ()
    pod_groups: tuple[PodGroupSpec, ...] = ()
    other_kinds: Mapping[str, int] = field(default_factory=dict)
    """Objects of kinds gpuscale does not read, counted by kind: kept visible, never silently dropped."""

    def index(self) -> PodIndex:
        """The pods sorted into pending, placed and placed-per-node in one pass (input order kept in each)."""
        by_node: dict[str, list[Pod]] = {}
        pending: list[Pod] = []
        placed: list[Pod] = []
        affinity = False
        for pod in self.pods:  # the one pass over every pod of a decision: kept tight
            if not affinity and (pod.constraints.pod_affinity or pod.constraints.pod_anti_affinity):
                affinity = True
            if pod.phase in TERMINAL_PHASES:
                continue
            name = pod.node_name
            if name is not None:
                placed.append(pod)
                held = by_node.get(name)
                if held is None:
                    held = by_node[name] = []
                held.append(pod)
            elif not pod.deleting:
                pending.append(pod)
        return PodIndex(pending=tuple(pending), placed=tuple(placed), by_node=by_node, pod_affinity=affinity)

    def pods_by_node(self) -> dict[str, list[Pod]]:
        """Pods that hold capacity, per node name (bound and not Succeeded/Failed); a node without any has no entry."""
        return self.index().by_node

    def requested_by_node(self) -> dict[str, Resources]:
        """Requests held per node name: every node (zero when empty) and any other name pods are bound to."""
        held = self.pods_by_node()
        return {name: sum((p.requests for p in held.get(name, ())), Resources())
                for name in dict.fromkeys([*(n.name for n in self.nodes), *held])}

    def pending_pods(self) -> tuple[Pod, ...]:
        """Pods not bound to any node and not finished, in input order."""
        return self.index().pending
