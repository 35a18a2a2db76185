"""A cluster snapshot: the nodes, pods and budgets one decision reads, with the indexes every decision needs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuscale.model.dra import Dra
from gpuscale.model.frozen import quick_init
from gpuscale.model.node import Node
from gpuscale.model.pdb import PodDisruptionBudget
from gpuscale.model.pod import TERMINAL_PHASES, Pod, depends_on_placed
from gpuscale.model.resources import Resources
from gpuscale.model.volumes import Storage


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
    depends_on_placed: bool = False
    """Some pod (of any phase) `depends_on_placed` (inter-pod affinity or anti-affinity terms)."""
    uses_claims: bool = False
    """Some pod (of any phase) `uses_claims` (PersistentVolumeClaims): the what-if then keeps the volume state."""
    uses_devices: bool = False
    """Some pod (of any phase) `uses_devices` (ResourceClaims): the what-if then keeps the devices in use."""
    group_members: Mapping[str, int] = field(default_factory=dict)
    """Pods of each pod group (by `PodGroupRef.key`) that have not finished: pending, bound or being deleted."""


PLACED, PENDING = 1, 2
"""Where `Cluster.index` files a pod (`index_slot`); 0 is neither."""


def index_slot(pod: Pod) -> int:
    """`PLACED` (bound, not finished), `PENDING` (unbound, not finished, not being deleted) or 0."""
    if pod.phase in TERMINAL_PHASES:
        return 0
    if pod.node_name is not None:
        return PLACED
    return 0 if pod.deleting else PENDING


def group_member(pod: Pod) -> str | None:
    """The pod group a pod counts towards (`PodIndex.group_members`): its group's key while it has not finished."""
    return pod.group.key if pod.group is not None and pod.phase not in TERMINAL_PHASES else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Changes:
    """What a producer of snapshots (the twin's cluster) knows changed since its previous snapshot: which objects of
    `nodes_before`/`pods_before` (that snapshot's very tuples) left and which objects came instead (a replaced object
    is one of each). A hint only: a reader may use it to skip diffing the tuples (`engine.arrange`), and must get the
    same result without it."""

    nodes_before: tuple[Node, ...]
    nodes_left: tuple[Node, ...]
    nodes_came: tuple[Node, ...]
    pods_before: tuple[Pod, ...]
    pods_left: tuple[Pod, ...]
    pods_came: tuple[Pod, ...]


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Cluster:
    nodes: tuple[Node, ...] = ()
    pods: tuple[Pod, ...] = ()
    pdbs: tuple[PodDisruptionBudget, ...] = ()
    pod_groups: tuple[PodGroupSpec, ...] = ()
    storage: Storage = field(default_factory=Storage)
    """PersistentVolumes, PersistentVolumeClaims, StorageClasses and CSINodes (the volume filters read them)."""
    dra: Dra = field(default_factory=Dra)
    """ResourceSlices, DeviceClasses, ResourceClaims and ResourceClaimTemplates (DynamicResources reads them)."""
    other_kinds: Mapping[str, int] = field(default_factory=dict)
    """Objects of kinds gpuscale does not read, counted by kind: kept visible, never silently dropped."""
    changes: Changes | None = field(default=None, compare=False, repr=False)
    """How `nodes` and `pods` differ from the producer's previous snapshot, when it knows (a hint; see `Changes`)."""

    def index(self) -> PodIndex:
        """The pods sorted into pending, placed and placed-per-node in one pass (input order kept in each)."""
        by_node: dict[str, list[Pod]] = {}
        pending: list[Pod] = []
        placed: list[Pod] = []
        groups: dict[str, int] = {}
        affinity = claims = devices = False
        for pod in self.pods:  # the one pass over every pod of a decision: kept tight
            if not affinity and depends_on_placed(pod):
                affinity = True
            if not claims and pod.constraints.claims:
                claims = True
            if not devices and pod.constraints.resource_claims:
                devices = True
            slot = index_slot(pod)
            if slot == PLACED:
                placed.append(pod)
                name = pod.node_name or ""  # PLACED: bound, so the name is there
                held = by_node.get(name)
                if held is None:
                    held = by_node[name] = []
                held.append(pod)
            elif slot == PENDING:
                pending.append(pod)
            if pod.group is not None and (group := group_member(pod)) is not None:
                groups[group] = groups.get(group, 0) + 1
        return PodIndex(pending=tuple(pending), placed=tuple(placed), by_node=by_node, depends_on_placed=affinity,
                        uses_claims=claims, uses_devices=devices, group_members=groups)

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
